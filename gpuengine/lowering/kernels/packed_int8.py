"""int8 (and int4) constant tables kept packed on the GPU: 4 int8 values per u32 (8 int4 values per u32), one row
per output channel (FC weights) or per table row (EMBEDDING_LOOKUP / GATHER), with their per-row f32 scales bound
beside them.

An int4 table keeps its file's size on the GPU: int8 words 2m and 2m + 1 of a row share int4 word m, byte j holding
byte j of word 2m in its low nibble and byte j of word 2m + 1 in its high nibble. So the reader `{name}_word` of
either form returns the same packed int8 word: for int4 one shift, one mask and a sign extension of the four
nibbles (`v | (v & 0x08080808) * 0x1E` sets bits 4-7 of each byte whose bit 3 is set, no carry between bytes), and
every consumer (dot4I8Packed, extractBits) is shared.

One layout serves both readers, row-major [rows, ceil(C/4) words per pixel], so a language model whose LM head
reuses the embedding table (tied weights) binds one buffer for both: constant buffers are shared by content per
device. A table larger than one storage binding is split into row chunks (`row_chunks`), each its own binding; the
shader picks the chunk of a row with a few comparisons (`chunked_reader`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...model.ir import Tensor
from ...model.quantization import INT4, int8_values
from .. import codegen
from ..layout import slices
from .base import Binding, Code

# WebGPU's guaranteed maxStorageBufferBindingSize: every adapter binds this much, so a table split at it runs
# anywhere (the device is opened with the adapter's own, usually larger, limits). Tests lower it.
MAX_BINDING_BYTES = 1 << 27


@dataclass(frozen=True)
class PackedRows:
    """A [rows, C] int8 table (C = channels of one pixel; P pixels per row) packed as u32 words: row r holds P * SI
    words (SI = ceil(C / 4)), pixel p's channels 4s..4s+3 in word p * SI + s, byte j = channel 4s + j."""

    words: np.ndarray  # u32 [rows, P * SI] (int8), or [rows, ceil(P * SI / 2)] (int4: 8 values per word)
    scale: np.ndarray  # f32 [rows]: the real value of q in row r is q * scale[r]
    row_sums: np.ndarray  # i64 [rows]: sum of the row's int8 values (for an asymmetric input's zero point)
    bits: int = 8  # 8 or 4: the width each value is stored with on the GPU
    block: int = 0  # blockwise quantization: values per block along a row (scale is then 1 and row_sums real sums)
    block_scales: np.ndarray | None = None  # u32 [rows, ceil(blocks / 2)]: the float16 block scales, two a word

    @property
    def rows(self) -> int:
        return int(self.words.shape[0])

    @property
    def row_words(self) -> int:
        return int(self.words.shape[1])


def pack_rows(tensor: Tensor, channels: int) -> PackedRows:
    """Pack a symmetric int8 constant (int8_values is not None) whose rows hold whole pixels of `channels`."""
    data = int8_values(tensor)
    assert data is not None
    rows = data.shape[0]
    flat = data.reshape(rows, -1)
    p = flat.shape[1] // channels
    si = slices(channels)
    padded = np.zeros((rows, p, si * 4), np.int8)
    padded[:, :, :channels] = flat.reshape(rows, p, channels)
    bits = 4 if tensor.type_code == INT4 else 8
    if bits == 4:  # int8 words 2m, 2m + 1 -> int4 word m (low, high nibble of each byte)
        pairs = np.zeros((rows, -(-p * si // 2) * 2, 4), np.uint8)
        pairs[:, :p * si] = padded.reshape(rows, p * si, 4).view(np.uint8) & 0xF
        nibbles = pairs[:, 0::2] | (pairs[:, 1::2] << 4)
        words = np.ascontiguousarray(nibbles).view("<u4").reshape(rows, -1).astype(np.uint32)
    else:
        words = np.ascontiguousarray(padded).view("<u4").reshape(rows, p * si).astype(np.uint32)
    q = tensor.quantization
    if q.blockwise:  # sum of the row's real values (value times its block's scale) for the input's zero point
        scales = q.block_scales.astype(np.float32)
        row_sums = (flat * np.repeat(scales.astype(np.float64), q.block_size, axis=1)).sum(axis=1)
        halves = np.zeros((rows, -(-scales.shape[1] // 2) * 2), np.float16)
        halves[:, :scales.shape[1]] = q.block_scales
        block_words = np.ascontiguousarray(halves).view("<u4").astype(np.uint32)
        return PackedRows(words, np.ones(rows, np.float32), row_sums, bits, q.block_size, block_words)
    scale = np.broadcast_to(np.asarray(q.scale, np.float32).reshape(-1), (rows,)).astype(np.float32)
    return PackedRows(words, scale, flat.astype(np.int64).sum(axis=1), bits)


def row_chunks(rows: int, row_bytes: int, align: int = 4) -> list[tuple[int, int]]:
    """[start, stop) row ranges of at most MAX_BINDING_BYTES each, starting on multiples of `align` rows."""
    per = max(align, MAX_BINDING_BYTES // max(1, row_bytes) // align * align)
    return [(s, min(rows, s + per)) for s in range(0, rows, per)]


def chunked_reader(name: str, packed: PackedRows, align: int = 4) -> tuple[Code, list[Binding]]:
    """`fn {name}_word(r: u32, w: u32) -> u32`: packed int8 word w of row r (clamped to the last row; an int4 table's
    nibbles sign-extended to bytes), and its bindings (one per chunk of rows). A blockwise table also gets
    `fn {name}_block_scale(r: u32, b: u32) -> f32`: the scale of block b of row r (float16 on the GPU, as in the
    file)."""
    if packed.bits == 8:
        fn, bindings = chunked_rows(f"{name}_word", name, packed.words, "u32", 1, align)
    else:
        fn, bindings = chunked_rows(f"{name}_int4", name, packed.words, "u32", 1, align)
        fn = Code(fn + codegen.fill("packed/int4_word.wgsl", {"NAME": Code(name)}) + "\n")
    if packed.block_scales is not None:
        scale_fn, scale_bindings = chunked_rows(f"{name}_scale_pair", f"{name}_bs", packed.block_scales, "u32", 1,
                                                align)
        fn = Code(fn + scale_fn + codegen.fill("packed/block_scale.wgsl", {"NAME": Code(name)}) + "\n")
        bindings = [*bindings, *scale_bindings]
    return fn, bindings


def chunked_rows(fn: str, name: str, data: np.ndarray, element: str, unit: int, align: int = 4,
                 ) -> tuple[Code, list[Binding]]:
    """`fn {fn}(r: u32, w: u32) -> element`: element w of row r (clamped to the last row) of a constant [rows, n]
    (n scalars a row, `unit` scalars an element), bound as row chunks of at most MAX_BINDING_BYTES (4-byte
    scalars) named {name}_0, {name}_1, ..."""
    rows, per = data.shape[0], data.shape[1] // unit
    chunks = row_chunks(rows, data.shape[1] * 4, align)
    bindings = [Binding(f"{name}_{c}", data=np.ascontiguousarray(data[a:b]).reshape(-1), element=element)
                for c, (a, b) in enumerate(chunks)]
    wrap = "SM" if element == "SM" else ""  # an SM constant may be bound in f32 (codegen.dispatch_precision)
    body = [f"  let row = min(r, {rows - 1}u);"]
    for c, (a, b) in enumerate(chunks):
        read = f"return {wrap}({name}_{c}[(row - {a}u) * {per}u + w]);"
        body.append(f"  if (row < {b}u) {{ {read} }}" if c < len(chunks) - 1 else f"  {read}")
    return Code(f"fn {fn}(r: u32, w: u32) -> {element} {{\n" + "\n".join(body) + "\n}\n"), bindings
