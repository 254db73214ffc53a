"""Decoder-only language models written the way litert-torch 0.10 converts them, at any size, without litert-torch.

`decoder(DecoderConfig(...), seed)` writes a `.tflite` with the op patterns of litert-torch's LLM exports (studied
on ../shared/models/smollm_4l_int8.tflite and toy_decoder_kv.tflite):
- two signatures over subgraphs of their own that share every weight buffer: `prefill_N` (N tokens; outputs the
  KV cache only, as litert-torch's prefill does) and `decode` (1 token; outputs `logits` and the KV cache). Inputs
  `tokens` [1, T] int32, `input_pos` [T] int32 and, per layer i, `kv_cache_k_i` / `kv_cache_v_i` f32 in BTNH
  ([1, cache, kv_heads, head_dim]) or, with kv_layout="transposed", litert-torch's KV_LAYOUT_TRANSPOSED (k BNTH
  [1, kv_heads, cache, head_dim], v BNHT [1, kv_heads, head_dim, cache]);
- EMBEDDING_LOOKUP of an int8 (per-row scales) or f32 table, tied to the LM head as SmolLM ties it;
- RMSNorm and attention as STABLEHLO_COMPOSITE `odml.rms_norm` (attribute epsilon) and
  `odml.scaled_dot_product_attention` (attribute scale) with their decompositions as subgraphs: MUL x x, MEAN,
  ADD eps, RSQRT, MUL, MUL weight; GQA as RESHAPE + BROADCAST_TO + RESHAPE of the cache, q and k each scaled by
  sqrt(scale), BATCH_MATMUL, ADD mask, SOFTMAX, BATCH_MATMUL;
- one fused QKV FULLY_CONNECTED split by RESHAPE + SLICE, rotary embeddings from CAST(input_pos) * inv_freq, COS,
  SIN and the half-split rotation (SLICE, MUL, SUB, ADD, CONCATENATION), the causal mask a GATHER_ND of a
  constant [cache, 1, 1, cache] table by the position (float32 min above the diagonal), with litert-torch's range
  check (LESS, ADD, SELECT, GREATER_EQUAL, LESS_EQUAL, LOGICAL_AND, REDUCE_ALL, SELECT_V2 with NaN), the cache
  written by DYNAMIC_UPDATE_SLICE at PACK(0, input_pos[0], 0, 0);
- FULLY_CONNECTED hybrid (f32 input, int8 weights with per-channel symmetric scales, no bias, keep_num_dims,
  version 5) or f32; a gated SiLU MLP (LOGISTIC, MUL, MUL);
- optionally Gemma 3's forms (`gemma=True`, as litert-torch writes tests/fixtures/litert_torch/gemma3_*): the
  embedding times sqrt(width), an RMSNorm over each query and key head before the rotation, "sandwich" norms (an
  RMSNorm of the attention's and of the MLP's output before each residual ADD) and a GELU-tanh gated MLP (GELU
  approximate, MUL). Gemma's sliding-window layers are not written (every layer attends the whole cache).
Weights are seeded and scaled so activations stay sane: RMSNorm'd inputs, Xavier-like projections, query and key
scaled up so attention rows are peaked but not one-hot, the tied embedding scaled so logits spread over several
units (tests/models/test_decoder_zoo.py checks both).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..model.builder import ModelBuilder
from ..model.ir import Quantization

Shape = tuple[int, ...]
MASK_MIN = float(np.finfo(np.float32).min)  # litert-torch's mask value above the diagonal


@dataclass(frozen=True)
class DecoderConfig:
    """A decoder's size and how it is written. heads: query heads, a multiple of kv_heads (groups = heads //
    kv_heads query heads share one KV head). weights: "int8" (hybrid FCs) or "f32"; embedding: "int8" or "f32"
    (default: as weights). kv_layout: "btnh" or "transposed"."""

    layers: int = 2
    width: int = 64
    heads: int = 3
    kv_heads: int = 1
    head_dim: int = 64
    mlp: int = 128
    vocab: int = 256
    cache: int = 32
    prefill: int = 8
    weights: str = "int8"
    embedding: str | None = None
    kv_layout: str = "btnh"
    rope_base: float = 10000.0
    epsilon: float = 1e-5
    gemma: bool = False

    def __post_init__(self) -> None:
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        if self.weights not in ("int8", "f32") or self.embedding_type not in ("int8", "f32"):
            raise ValueError(f"weights / embedding must be 'int8' or 'f32', got {self.weights!r} / {self.embedding!r}")
        if self.kv_layout not in ("btnh", "transposed"):
            raise ValueError(f"kv_layout must be 'btnh' or 'transposed', got {self.kv_layout!r}")
        if not 1 <= self.prefill <= self.cache:
            raise ValueError(f"prefill ({self.prefill}) must be within 1..cache ({self.cache})")

    @property
    def groups(self) -> int:
        return self.heads // self.kv_heads

    @property
    def embedding_type(self) -> str:
        return self.embedding or self.weights

    @property
    def prefill_signature(self) -> str:
        return f"prefill_{self.prefill}"


def _symmetric_int8(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 rows and their scales (max|row| / 127, zero point 0): litert-torch's dynamic_int8 weights."""
    scale = np.maximum(np.abs(w).max(axis=1) / 127.0, 1e-12).astype(np.float32)
    return np.clip(np.round(w / scale[:, None]), -127, 127).astype(np.int8), scale


class _Weights:
    """Every weight of the model, drawn once (seeded) and written into each signature's subgraph."""

    def __init__(self, c: DecoderConfig, seed: int) -> None:
        rng = np.random.default_rng(seed)
        qkv_rows = (c.heads + 2 * c.kv_heads) * c.head_dim

        def normal(shape: Shape, std: float) -> np.ndarray:
            return rng.normal(0.0, std, shape).astype(np.float32)

        # Tied table: rows of rms ~ 2.5 / sqrt(width) * sqrt(width) give logits of std ~2.5 on an RMSNorm'd input.
        self.embedding = normal((c.vocab, c.width), 2.5 / math.sqrt(c.width))
        self.layers = []
        for _ in range(c.layers):
            qkv = normal((qkv_rows, c.width), 1.0 / math.sqrt(c.width))
            # Query and key 1.8x Xavier: scores of std ~3 after the 1/sqrt(head_dim) scale, peaked not one-hot.
            qkv[: (c.heads + c.kv_heads) * c.head_dim] *= 1.8
            self.layers.append({
                "qkv": qkv,
                "output": normal((c.width, c.heads * c.head_dim), 0.7 / math.sqrt(c.heads * c.head_dim)),
                "gate": normal((c.mlp, c.width), 1.0 / math.sqrt(c.width)),
                "up": normal((c.mlp, c.width), 1.0 / math.sqrt(c.width)),
                "down": normal((c.width, c.mlp), 0.7 / math.sqrt(c.mlp)),
                "norm1": (1.0 + rng.normal(0.0, 0.1, c.width)).astype(np.float32),
                "norm2": (1.0 + rng.normal(0.0, 0.1, c.width)).astype(np.float32),
            })
            if c.gemma:  # query / key norms over a head, post-attention and post-MLP norms over the width
                self.layers[-1].update({
                    "q_norm": (1.0 + rng.normal(0.0, 0.1, c.head_dim)).astype(np.float32),
                    "k_norm": (1.0 + rng.normal(0.0, 0.1, c.head_dim)).astype(np.float32),
                    "post_attention": (1.0 + rng.normal(0.0, 0.1, c.width)).astype(np.float32),
                    "post_mlp": (1.0 + rng.normal(0.0, 0.1, c.width)).astype(np.float32),
                })
        self.final_norm = (1.0 + rng.normal(0.0, 0.1, c.width)).astype(np.float32)
        # Quantize each weight once so both signatures (and the LM head and the embedding) share the same bytes.
        self.quantized: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def int8(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if id(w) not in self.quantized:
            self.quantized[id(w)] = _symmetric_int8(w)
        return self.quantized[id(w)]


class _Signature:
    """One signature's subgraph: `tokens` of length T at `input_pos`, through every layer."""

    def __init__(self, root: ModelBuilder, mb: ModelBuilder, c: DecoderConfig, w: _Weights, tokens: int) -> None:
        self.root, self.mb, self.c, self.w, self.t = root, mb, c, w, tokens
        self.constants: dict[tuple, int] = {}

    # -- small helpers -------------------------------------------------------------------------------------------
    def const(self, name: str, value: np.ndarray) -> int:
        """A constant tensor, one per distinct value and name within the subgraph (as the converter dedups)."""
        value = np.asarray(value)
        key = (name, value.dtype.str, value.shape, value.tobytes())
        if key not in self.constants:
            self.constants[key] = self.mb.const(name, value)
        return self.constants[key]

    def ints(self, values: list[int] | tuple[int, ...]) -> int:
        return self.const("arith.constant", np.array(values, np.int32))

    def op(self, code: str, inputs: list[int], shape: Shape, options: dict | None = None, dtype: type = np.float32,
           version: int = 1) -> int:
        out = self.mb.op(code, inputs, shape, options, dtype=dtype, version=version)
        assert isinstance(out, int)
        return out

    def reshape(self, x: int, shape: Shape, dtype: type = np.float32) -> int:
        return self.op("RESHAPE", [x, self.ints(shape)], shape, dtype=dtype)

    def transpose(self, x: int, perm: tuple[int, ...], shape: Shape) -> int:
        return self.op("TRANSPOSE", [x, self.ints(perm)], shape)

    def slice(self, x: int, begin: tuple[int, ...], size: tuple[int, ...], dtype: type = np.float32) -> int:
        return self.op("SLICE", [x, self.ints(begin), self.ints(size)], size, dtype=dtype)

    def dense(self, x: int, weight: np.ndarray, name: str) -> int:
        """FULLY_CONNECTED without bias, keeping the leading dims: hybrid int8 or f32 weights."""
        shape = self.mb.tensors[x].shape
        if self.c.weights == "int8":
            q, scale = self.w.int8(weight)
            quant = Quantization(scale, np.zeros(scale.size, np.int64), axis=0)
            wt = self.mb.const(f"{name}/weights", q, np.int8, quantization=quant)
        else:
            wt = self.mb.const(f"{name}/weights", weight)
        return self.op("FULLY_CONNECTED", [x, wt, -1], (*shape[:-1], weight.shape[0]),
                       {"keep_num_dims": True, "asymmetric_quantize_inputs": False}, version=5)

    def table(self) -> int:
        if self.c.embedding_type == "int8":
            q, scale = self.w.int8(self.w.embedding)
            return self.mb.const("embedding/table", q, np.int8,
                                 quantization=Quantization(scale, np.zeros(scale.size, np.int64), axis=0))
        return self.mb.const("embedding/table", self.w.embedding)

    # -- composites ----------------------------------------------------------------------------------------------
    def rms_norm(self, x: int, weight: np.ndarray, name: str) -> int:
        shape = self.mb.tensors[x].shape
        sub = ModelBuilder(f"odml.rms_norm.impl_{len(self.root.subgraphs)}")
        xi, wi = sub.input("x", shape), sub.input("weight", weight.shape)
        row = shape[:-1]
        sq = sub.op("MUL", [xi, xi], shape)
        axis = sub.const("axis", np.array([len(shape) - 1], np.int32))
        if int(np.prod(row)) == 1:  # litert-torch's one-row form: keep_dims, no RESHAPE
            mean = sub.op("MEAN", [sq, axis], (*row, 1), {"keep_dims": True})
            var = sub.op("ADD", [mean, sub.const("epsilon", np.full((*row, 1), self.c.epsilon, np.float32))],
                         (*row, 1))
        else:
            mean = sub.op("MEAN", [sq, axis], row, {"keep_dims": False})
            var = sub.op("ADD", [mean, sub.const("epsilon", np.array(self.c.epsilon, np.float32))], row)
            var = sub.op("RESHAPE", [var, sub.const("shape", np.array((*row, 1), np.int32))], (*row, 1))
        inv = sub.op("RSQRT", [var], (*row, 1))
        y = sub.op("MUL", [sub.op("MUL", [xi, inv], shape), wi], shape)
        sub.output(y)
        return self.mb.composite("odml.rms_norm", [x, self.mb.const(f"{name}/weight", weight)], shape, sub,
                                 {"epsilon": self.c.epsilon}, owner=self.root)

    def attention(self, q: int, k_cache: int, v_cache: int, mask: int) -> int:
        """odml.scaled_dot_product_attention(q [1, T, H, D], caches, mask [1, 1, T, C]) -> [1, T, H, D]."""
        c, t = self.c, self.t
        h, kv, g, d, n = c.heads, c.kv_heads, c.groups, c.head_dim, c.cache
        scale = 1.0 / math.sqrt(d)
        sub = ModelBuilder(f"odml.scaled_dot_product_attention.impl_{len(self.root.subgraphs)}")
        shapes = [self.mb.tensors[i].shape for i in (q, k_cache, v_cache, mask)]
        qi, ki, vi, mi = (sub.input(name, s) for name, s in zip(("q", "k", "v", "mask"), shapes))

        def ints(v: tuple[int, ...]) -> int:
            return sub.const("shape", np.array(v, np.int32))

        def per_head(cache: int, transposed_to: tuple[int, ...] | None, out: tuple[int, ...]) -> int:
            """A cache [1, KV, C, D] (transposed there first when transposed_to says so) broadcast to H heads
            (GQA: RESHAPE, BROADCAST_TO) and reshaped to `out` ([1, H, C, D] or [H, C, D])."""
            heads_first = cache if transposed_to is None else sub.op("TRANSPOSE", [cache, ints(transposed_to)],
                                                                      (1, kv, n, d))
            if g == 1:
                return heads_first
            five = sub.op("RESHAPE", [heads_first, ints((1, kv, 1, n, d))], (1, kv, 1, n, d))
            wide = sub.op("BROADCAST_TO", [five, ints((1, kv, g, n, d))], (1, kv, g, n, d), version=2)
            return sub.op("RESHAPE", [wide, ints(out)], out)

        btnh = c.kv_layout == "btnh"
        keys = per_head(ki, (0, 2, 1, 3) if btnh else None, (1, h, n, d))
        values = per_head(vi, (0, 2, 1, 3) if btnh else (0, 1, 3, 2), (h, n, d))
        root_scale = sub.const("scale", np.array(math.sqrt(scale), np.float32))
        qs = sub.op("MUL", [qi, root_scale], (1, t, h, d))
        kt = sub.op("TRANSPOSE", [sub.op("MUL", [keys, root_scale], (1, h, n, d)), ints((0, 1, 3, 2))], (1, h, d, n))
        if t > 1:
            qh = sub.op("TRANSPOSE", [qs, ints((0, 2, 1, 3))], (1, h, t, d))
            q3 = sub.op("RESHAPE", [qh, ints((h, t, d))], (h, t, d))
        else:
            q3 = sub.op("RESHAPE", [qs, ints((h, t, d))], (h, t, d))
        scores = sub.op("BATCH_MATMUL", [q3,
                                         sub.op("RESHAPE", [kt, ints((h, d, n))], (h, d, n))], (h, t, n),
                        {"adj_x": False, "adj_y": False})
        probs = sub.op("SOFTMAX", [sub.op("ADD", [scores, mi], (1, h, t, n))], (1, h, t, n), {"beta": 1.0})
        ctx = sub.op("BATCH_MATMUL", [sub.op("RESHAPE", [probs, ints((h, t, n))], (h, t, n)),
                                      values if g > 1 else sub.op("RESHAPE", [values, ints((h, n, d))], (h, n, d))],
                     (h, t, d),
                     {"adj_x": False, "adj_y": False})
        if t > 1:
            out = sub.op("TRANSPOSE", [sub.op("RESHAPE", [ctx, ints((1, h, t, d))], (1, h, t, d)),
                                       ints((0, 2, 1, 3))], (1, t, h, d))
        else:
            out = sub.op("RESHAPE", [ctx, ints((1, t, h, d))], (1, t, h, d))
        sub.output(out)
        return self.mb.composite("odml.scaled_dot_product_attention", [q, k_cache, v_cache, mask], (1, t, h, d),
                                 sub, {"scale": scale}, owner=self.root)

    # -- the graph -----------------------------------------------------------------------------------------------
    def rope(self, x: int, heads: int, cos: int, sin: int) -> int:
        """x [1, T, heads, D] (or any shape holding it, reshaped for one token) rotated by halves (x1 cos - x2 sin,
        x2 cos + x1 sin), heads-first in between."""
        t, d = self.t, self.c.head_dim
        half = (1, heads, t, d // 2)
        hf = self.transpose(x, (0, 2, 1, 3), (1, heads, t, d)) if t > 1 else self.reshape(x, (1, heads, t, d))
        x1, x2 = self.slice(hf, (0, 0, 0, 0), half), self.op("SLICE", [hf, self.ints((0, 0, 0, d // 2)),
                                                                     self.ints(half)], half)
        a = self.op("SUB", [self.op("MUL", [x1, cos], half), self.op("MUL", [x2, sin], half)], half)
        b = self.op("ADD", [self.op("MUL", [x2, cos], half), self.op("MUL", [x1, sin], half)], half)
        rotated = self.op("CONCATENATION", [a, b], (1, heads, t, d), {"axis": 3})
        return self.transpose(rotated, (0, 2, 1, 3), (1, t, heads, d)) if t > 1 else \
            self.reshape(rotated, (1, t, heads, d))

    def build(self, prefix: str, with_logits: bool) -> tuple[dict[str, int], dict[str, int]]:
        mb, c, t = self.mb, self.c, self.t
        kv, d, n = c.kv_heads, c.head_dim, c.cache
        tokens = mb.input(f"{prefix}_tokens", (1, t), np.int32)
        input_pos = mb.input(f"{prefix}_input_pos", (t,), np.int32)
        k_shape, v_shape = ((1, n, kv, d), (1, n, kv, d)) if c.kv_layout == "btnh" else ((1, kv, n, d), (1, kv, d, n))
        caches = [(mb.input(f"{prefix}_kv_cache_k_{i}", k_shape), mb.input(f"{prefix}_kv_cache_v_{i}", v_shape))
                  for i in range(c.layers)]

        ids = self.reshape(tokens, (t,), np.int32)
        x = self.reshape(self.op("EMBEDDING_LOOKUP", [ids, self.table()], (t, c.width)), (1, t, c.width))
        if c.gemma:  # Gemma scales the looked-up rows by sqrt(width)
            x = self.op("MUL", [x, self.const("embedding_scale", np.array(math.sqrt(c.width), np.float32))],
                        (1, t, c.width))
        # Rotary angles: positions times the inverse frequencies.
        pos_f = self.op("CAST", [self.reshape(input_pos, (1, t, 1), np.int32)], (1, t, 1))
        inv_freq = c.rope_base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        angles = self.op("MUL", [pos_f, self.const("inv_freq", inv_freq.astype(np.float32).reshape(1, 1, d // 2))],
                         (1, t, d // 2))
        cos, sin = self.op("COS", [angles], (1, t, d // 2)), self.op("SIN", [angles], (1, t, d // 2))
        # The causal mask: rows of a constant table gathered by position, NaN where the position is out of range.
        zero, limit = self.const("zero", np.array(0, np.int32)), self.const("cache", np.array(n, np.int32))
        negative = self.op("LESS", [input_pos, zero], (t,), dtype=np.bool_)
        wrapped = self.op("ADD", [input_pos, limit], (t,), dtype=np.int32)
        pos = self.reshape(self.op("SELECT", [negative, wrapped, input_pos], (t,), dtype=np.int32), (t, 1), np.int32)
        in_range = self.op("LOGICAL_AND", [self.op("GREATER_EQUAL", [pos, zero], (t, 1), dtype=np.bool_),
                                           self.op("LESS_EQUAL", [pos, self.const("last", np.array(n - 1, np.int32))],
                                                   (t, 1), dtype=np.bool_)], (t, 1), dtype=np.bool_)
        valid = self.op("REDUCE_ALL", [in_range, self.ints((1,))], (t,), {"keep_dims": False}, dtype=np.bool_)
        table = np.where(np.arange(n)[None, :] <= np.arange(n)[:, None], 0.0, MASK_MIN).astype(np.float32)
        rows = self.op("GATHER_ND", [self.const("mask_table", table.reshape(n, 1, 1, n)), pos], (t, 1, 1, n))
        mask = self.op("SELECT_V2", [self.reshape(valid, (1, 1, t, 1), np.bool_),
                                     self.reshape(rows, (1, 1, t, n)) if t > 1 else rows,
                                     self.const("nan", np.array(np.nan, np.float32))], (1, 1, t, n))
        # Where the new rows go in the cache: PACK(0, input_pos[0], 0, 0) (BTNH) or the sequence axis' place.
        first = self.slice(input_pos, (0,), (1,), np.int32) if t > 1 else input_pos
        scalar = self.op("RESHAPE", [first, self.const("scalar_shape", np.zeros(0, np.int32))], (), dtype=np.int32)
        zero_i = self.const("index_zero", np.array(0, np.int32))

        def index(axis: int) -> int:
            parts = [scalar if a == axis else zero_i for a in range(4)]
            return self.op("PACK", parts, (4,), {"values_count": 4, "axis": 0}, dtype=np.int32)

        k_index = index(1) if c.kv_layout == "btnh" else index(2)
        v_index = k_index if c.kv_layout == "btnh" else index(3)

        outputs: dict[str, int] = {}
        g_width = c.groups + 2
        for i, (layer, (k_cache, v_cache)) in enumerate(zip(self.w.layers, caches)):
            h = self.rms_norm(x, layer["norm1"], f"layer{i}/norm1")
            qkv = self.reshape(self.dense(h, layer["qkv"], f"layer{i}/qkv"), (1, t, kv, g_width * d))
            k = self.op("SLICE", [qkv, self.ints((0, 0, 0, c.groups * d)), self.ints((1, t, kv, d))], (1, t, kv, d))
            v = self.op("SLICE", [qkv, self.ints((0, 0, 0, (c.groups + 1) * d)), self.ints((1, t, kv, d))],
                        (1, t, kv, d))
            if c.gemma:
                k = self.rms_norm(k, layer["k_norm"], f"layer{i}/k_norm")
            k = self.rope(k, kv, cos, sin)
            if c.kv_layout == "transposed":
                k = self.transpose(k, (0, 2, 1, 3), (1, kv, t, d))
                v = self.transpose(v, (0, 2, 3, 1), (1, kv, d, t))
            k_new = self.op("DYNAMIC_UPDATE_SLICE", [k_cache, k, k_index], k_shape)
            v_new = self.op("DYNAMIC_UPDATE_SLICE", [v_cache, v, v_index], v_shape)
            outputs[f"kv_cache_k_{i}"], outputs[f"kv_cache_v_{i}"] = k_new, v_new
            if i == c.layers - 1 and not with_logits:
                break  # the converter drops what no output reads: prefill ends with the last cache write
            q = self.slice(qkv, (0, 0, 0, 0), (1, t, kv, c.groups * d))
            if c.gemma:  # the query norm over each head
                q = self.rms_norm(self.reshape(q, (1, t, c.heads, d)), layer["q_norm"], f"layer{i}/q_norm")
            q = self.rope(self.reshape(q, (1, t, c.heads, d)) if t > 1 and not c.gemma else q, c.heads, cos, sin)
            ctx = self.reshape(self.attention(q, k_new, v_new, mask), (1, t, c.heads * d))
            attended = self.dense(ctx, layer["output"], f"layer{i}/output")
            if c.gemma:
                attended = self.rms_norm(attended, layer["post_attention"], f"layer{i}/post_attention_norm")
            x = self.op("ADD", [x, attended], (1, t, c.width))
            h = self.rms_norm(x, layer["norm2"], f"layer{i}/norm2")
            gate = self.dense(h, layer["gate"], f"layer{i}/gate")
            if c.gemma:
                act = self.op("GELU", [gate], (1, t, c.mlp), {"approximate": True})
            else:
                act = self.op("MUL", [gate, self.op("LOGISTIC", [gate], (1, t, c.mlp))], (1, t, c.mlp))
            up = self.dense(h, layer["up"], f"layer{i}/up")
            down = self.dense(self.op("MUL", [act, up], (1, t, c.mlp)), layer["down"], f"layer{i}/down")
            if c.gemma:
                down = self.rms_norm(down, layer["post_mlp"], f"layer{i}/post_mlp_norm")
            x = self.op("ADD", [x, down], (1, t, c.width))
        if with_logits:
            h = self.rms_norm(x, self.w.final_norm, "final_norm")
            outputs["logits"] = self.dense(h, self.w.embedding, "lm_head") if c.weights == "int8" or \
                c.embedding_type == "f32" else self._f32_head(h)
        inputs = {"tokens": tokens, "input_pos": input_pos}
        for i, (k_cache, v_cache) in enumerate(caches):
            inputs[f"kv_cache_k_{i}"], inputs[f"kv_cache_v_{i}"] = k_cache, v_cache
        for name, tensor in outputs.items():
            mb.tensors[tensor].name = f"{prefix}_{name}" if name == "logits" else f"{prefix}_{name}_output"
        mb.outputs.extend(outputs.values())
        return inputs, outputs

    def _f32_head(self, h: int) -> int:
        """f32 FCs with an int8 embedding: the head reads the dequantized table (untied bytes, same values)."""
        q, scale = self.w.int8(self.w.embedding)
        weight = (q.astype(np.float32) * scale[:, None]).astype(np.float32)
        shape = self.mb.tensors[h].shape
        return self.op("FULLY_CONNECTED", [h, self.mb.const("lm_head/weights", weight), -1],
                       (*shape[:-1], self.c.vocab), {"keep_num_dims": True}, version=5)


def decoder(config: DecoderConfig | None = None, seed: int = 0, **overrides: object) -> bytes:
    """A litert-torch-style decoder (see the module docstring) of `config`'s size (fields may be overridden by
    keyword), seeded weights. Signatures `prefill_{config.prefill}` and `decode`."""
    c = dataclasses.replace(config or DecoderConfig(), **overrides)  # type: ignore[arg-type]
    w = _Weights(c, seed)
    root = ModelBuilder(c.prefill_signature)
    decode = ModelBuilder("decode")
    # Subgraph 0 prefill, 1 decode, then the composites' decompositions in the order they are written.
    decode_index = root.add_subgraph(decode)
    prefill_io = _Signature(root, root, c, w, c.prefill).build(c.prefill_signature, with_logits=False)
    decode_io = _Signature(root, decode, c, w, 1).build("decode", with_logits=True)
    root.signature(c.prefill_signature, 0, *prefill_io)
    root.signature("decode", decode_index, *decode_io)
    model = root.to_model()
    model.description = f"gpuengine.zoo decoder (random weights, seed={seed}): {c}"
    from ..model.builder import write_model

    return write_model(model)


def decoder_tiny(seed: int = 0) -> bytes:
    """2 layers, width 64, 3 query heads sharing 1 KV head of 64, int8 weights and embedding, vocab 256,
    cache 32, prefill 8."""
    return decoder(DecoderConfig(), seed)


def decoder_tiny_f32(seed: int = 0) -> bytes:
    """decoder_tiny with f32 weights and embedding."""
    return decoder(DecoderConfig(weights="f32"), seed)


def decoder_smollm_shape(seed: int = 0) -> bytes:
    """SmolLM-135M's layer shape (width 576, 9 heads in 3 KV groups of 64, MLP 1536, vocab 49152, cache 256,
    prefill 32, int8) with 2 layers: a real-size model for the CLI and benchmarks (about 40 MB)."""
    return decoder(DecoderConfig(layers=2, width=576, heads=9, kv_heads=3, head_dim=64, mlp=1536, vocab=49152,
                                 cache=256, prefill=32), seed)
