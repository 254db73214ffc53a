"""FULLY_CONNECTED and BATCH_MATMUL.

FULLY_CONNECTED: input flattened to [R, I] as TFLite does (row-major over the logical shape), weights [O, I]
constant. A row is P = I / C whole input pixels of C channels (C = the input's last dim), so it is read as
vec4 slices straight from PHWC4; weights are re-laid out once into mat4x4 blocks [out_slice][in_slice][pixel].
A tile is RT rows x ST output slices; `split` invocations may share a tile's SI*P weight blocks (kernels/
tiling.py): a classifier head (one row, 1280 -> 1000) is far too few tiles to fill a GPU at one invocation
each, so a big GPU splits each row 64 or more ways, while a CPU adapter takes 4 rows x 2 slices unsplit.

Hybrid FULLY_CONNECTED (float input, symmetric int8 or int4 weights per channel): the weights stay packed 4 per
u32, int4 8 per u32 (kernels/packed_int8.py), and each input row is quantized as LiteRT's XNNPACK quantizes it, the
products summed in i32 (shaders/fully_connected_int8.wgsl, `_hybrid_build`); or, marked HYBRID_ARITHMETIC = "float"
(engine option hybrid_arithmetic, passes/hybrid_arithmetic.py), the same shader unpacks the weights in registers
and multiplies the float rows as they are, f32 sums: the float64 answer up to f32 rounding instead of LiteRT's
numbers. Internal options set by passes: `gated` (gate and up weights interleaved by slice, the store computes
act(gate) * up, act = SiLU or GELU) and `norm` (an RMS_NORM of the input computed in the kernel's prologue:
float and hybrid FCs alike, its sums in f32 in fp16 mode too).
Where every tile reads the same rows (one row tile: a decode step's row), a hybrid FC is also offered `staged`
(Decomposition.staged): the whole workgroup makes the row passes once (norms, range), the quantized words (float
arithmetic: the normalized values) go to workgroup memory, and the dot loop reads them from there.
Weights larger than one storage binding are bound as row chunks.

Fully int8 FULLY_CONNECTED and BATCH_MATMUL (`int8_requant`): operands read as the integers q - zero point, integer
weights and bias, f32 sums that stay exact (checked at build), then LiteRT's integer output stage in the epilogue
(kernels/common.py MULTIPLY_BY_QUANTIZED_MULTIPLIER): LiteRT's int8 results exactly, where one float rounding
was a step off on ~0.2-0.4% of the elements.

BATCH_MATMUL: [..., M, K] x [..., K, N] (adj_x / adj_y transpose the last two axes), rank 2..4 with numpy
batch broadcasting. In PHWC4 the last axis is the channel axis, so K (or N) lands on vec4 lanes; a constant
operand is transposed at build so the kernel only sees adjacency on runtime tensors. One output vec4 per
tile; `split` invocations may share its K/4 steps. An operand may be read, and the output written, through a
layout view (passes/fold_matmul_layout.py, kernels/layout_view.py): the RESHAPE / TRANSPOSE ops of a multi-head
split and merge cost no dispatch.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ...model.ir import Graph, Op
from ...model.ops import GATED_OPTION, HYBRID_ARITHMETIC, KV_EPILOGUE, NORM, OUT_VIEW, RESIDUAL_NORM, SCATTER_PAIRS
from ...model.ops import MATMUL_VIEWS as VIEW_OPTIONS
from ...model.quantization import is_hybrid
from .. import codegen
from ..layout import slices, to_bhwc, to_phwc4
from . import kv_epilogue, layout_view, packed_int8, tiling
from .base import Binding, Code, Decomposition, KernelSpec, Lowering, Variants
from .common import (
    EXACT_LIMIT,
    MULTIPLY_BY_QUANTIZED_MULTIPLIER,
    Int8Requant,
    activation,
    activation_supported,
    bhwc,
    const_f32,
    float_tensors,
    int8_tensors,
    is_const,
    quantize_multiplier,
    quantized_span,
    requant_binding,
    requant_code,
    weights_requant,
)
from .conv2d import acc_init, accumulators, bias_vec4, lines, mat_taps
from .elementwise import _GELU_EXACT, _GELU_TANH
from .elementwise import _LOGISTIC as ELEMENTWISE_LOGISTIC
from .wgsl_math import helpers_for

HYBRID = "int8 weights, activations quantized per row as LiteRT (XNNPACK: asymmetric int8, i32 sums)"
HYBRID_FLOAT = "int8 weights dequantized in registers, float activations, f32 sums (hybrid_arithmetic=float)"


def _out_store(so: int, oh: int, ow: int, rows: int) -> dict[str, int]:
    """The numbers of `store(v, r, os)` (shaders/include/fully_connected/store.wgsl): output rows, slices, shape."""
    return {"OUT_ROWS": rows, "OUT_SLICES": so, "OUT_PLANE": oh * ow, "OUT_H": oh, "OUT_W": ow}


def _src_index(ic: int, plane: int) -> Code:
    """`src_index(q, sl)`'s expression: vec4 index of input pixel q (flattened b, y, x) in slice sl."""
    si = slices(ic)
    if plane == 1:
        return Code(f"q * {si}u + sl")
    return Code(f"q / {plane}u * {si * plane}u + sl * {plane}u + q % {plane}u")


def fc_blocks(w: np.ndarray, ic: int, so_pad: int) -> np.ndarray:
    """[O, P*C] -> flat f32 mat4x4 blocks [so_pad][SI][P]: column j / row l = W[4os + l, p*C + 4is + j]."""
    o, i = w.shape
    p = i // ic
    si = slices(ic)
    padded = np.zeros((so_pad * 4, p, si * 4), np.float32)
    padded[:o, :, :ic] = w.reshape(o, p, ic)
    blocks = padded.reshape(so_pad, 4, p, si, 4).transpose(0, 3, 2, 4, 1)
    return np.ascontiguousarray(blocks).reshape(-1)


class FullyConnectedKernel:
    ops = ("FULLY_CONNECTED", "BATCH_MATMUL")

    def supports(self, op: Op, graph: Graph) -> str | None:
        if op.code == "BATCH_MATMUL":
            return _bmm_supports(op, graph)
        if op.opt(KV_EPILOGUE):  # a KV cache write in its store (kernels/kv_epilogue.py)
            return kv_epilogue.supports(op, graph, self)
        if len(op.inputs) < 2 or len(op.outputs) != 1 and not (op.opt(RESIDUAL_NORM) and len(op.outputs) == 2):
            return "expects input, weights[, bias] and 1 output (2 with a residual prologue writing its row)"
        reason = float_tensors(op, graph) or activation_supported(op)
        if reason:
            return reason
        x, w = op.inputs[0], op.inputs[1]
        if int(op.opt("weights_format", 0) or 0) != 0:
            return "shuffled weights format is not supported"
        if is_const(graph, x):
            return "constant input tensors are not supported"
        if not is_const(graph, w) or len(graph.tensors[w].shape) != 2:
            return "weights must be a constant [O, I] matrix"
        o, i = graph.tensors[w].shape
        bias = op.inputs[2] if len(op.inputs) > 2 else -1
        if bias >= 0 and (not is_const(graph, bias) or graph.tensors[bias].size != o):
            return "bias must be a constant with one value per output"
        total = graph.tensors[x].size
        ic = bhwc(graph, x)[3]
        if i < 1 or total % i:
            return f"input of {total} elements does not flatten to rows of {i}"
        if i % ic:
            return f"rows of {i} do not hold whole pixels of the input's {ic} channels"
        rb, rh, rw, oc = bhwc(graph, op.outputs[0])
        if op.opt(NORM) and (i != ic or not _float_rows(op, graph)):
            return "a normalization prologue needs float input and output and rows of one pixel"
        reason = _residual_check(op, graph)
        if reason:
            return reason
        if op.opt("gated"):
            if op.opt("gated") not in GATE_ACTIVATIONS or o % 8 or activation(op):
                return (f"a gated projection takes {', '.join(GATE_ACTIVATIONS)}, 2 x 4k weight rows (gate and up "
                        "interleaved), no activation")
            o //= 2
        if oc != o or rb * rh * rw != total // i:
            return f"output shape {graph.tensors[op.outputs[0]].shape} does not match {total // i} rows x {o}"
        return None

    def integer_requantize(self, op: Op, graph: Graph) -> Code | None:
        """A fully int8 FC / BATCH_MATMUL (int8_requant) sums exact integers: its output stage is LiteRT's."""
        rq = int8_requant(op, graph)
        return requant_code(op, rq, graph.tensors[op.outputs[0]]) if rq is not None else None

    def build(self, op: Op, graph: Graph) -> Lowering:
        if op.code == "BATCH_MATMUL":
            return [_bmm_build(op, graph)]
        if op.opt(KV_EPILOGUE):
            return kv_epilogue.build(op, graph, self)
        if is_hybrid(op, graph):
            return [_hybrid_build(op, graph)]
        x, out = op.inputs[0], op.outputs[0]
        rq = int8_requant(op, graph)
        w = rq.weights if rq is not None else const_f32(graph, op.inputs[1])
        o, i = w.shape
        ib, ih, iw, ic = bhwc(graph, x)
        rb, rh, rw, _ = bhwc(graph, out)
        rows, p, si, so = rb * rh * rw, i // ic, slices(ic), slices(o)
        bias_t = op.inputs[2] if len(op.inputs) > 2 else -1
        bias = rq.bias if rq is not None else const_f32(graph, bias_t).reshape(-1) if bias_t >= 0 else None
        depth = si * p  # weight blocks per output slice: the reduction the split divides
        gated = bool(op.opt("gated"))
        norm = op.opt(NORM)
        fixed = {"SI": si, "P": p, "SO": so, "K": depth, "SRC_INDEX": _src_index(ic, ih * iw),
                 **_out_store(so // 2 if gated else so, rh, rw, rows)}

        def count(tile: tuple[int, int]) -> int:
            return -(-rows // tile[0]) * -(-so // tile[1])

        def make(d: Decomposition) -> KernelSpec:
            rt, st = d.tile
            sg = -(-so // st)
            src = [f"src[src_index(min(r0 + {t}u, {rows - 1}u) * {p}u + px, sl)]" for t in range(rt)]
            # a norm prologue: its sums and the normalized values in f32 (fp16 mode too), stored precision after
            src, norm_code, norm_bindings = _norm_prologue(op, graph, [f"vec4<f32>({v})" for v in src], d, ic) \
                if norm else (src, Code(""), [])
            taps = [f"let w_{j} = weights_block(os0 + {j}u, q);" for j in range(st)]
            if rq is None:
                taps = [f"let s_{t} = S4({v});" for t, v in enumerate(src)] + taps + mat_taps(d.tile)
            else:  # integers: q - zero point of the input, int8 weights; products and sums in f32, exact
                inverse = codegen.literal(rq.inverse_scales[0])
                taps = [f"let s_{t} = round(vec4<f32>({v}) * {inverse});" for t, v in enumerate(src)] + taps
                taps += [f"acc_{j}_{t} += mat4x4<f32>(w_{j}) * s_{t};" for j in range(st) for t in range(rt)]
            store = _stores([[f"acc_{j}_{t}" for t in range(rt)] for j in range(st)], gated, op)
            shared, dispatch = tiling.split_params(d, count(d.tile), accumulators(d.tile))
            if norm:  # the prologue's reduction used the lanes first
                shared["REDUCE"] = codegen.lane_reduce(accumulators(d.tile), d, first=False)
            # the same constants whatever the tile, so signatures choosing other tiles share them: weights unpadded
            # (the reader clamps the last tile's rows; their results are not stored), bias padded to the widest tile
            blocks = fc_blocks(w, ic, so).reshape(so, depth * 16)
            reader, weight_bindings = packed_int8.chunked_rows("weights_block", "weights", blocks, "SM", 16, 1)
            bindings = [
                Binding("src", tensor=x),
                *weight_bindings,
                *[b for b in norm_bindings if not b.writable],
                Binding("bias", data=bias_vec4(bias, o, -(-so // WIDEST_TILE) * WIDEST_TILE),
                        element="S4" if rq is None else "vec4<f32>"),
                *([requant_binding(rq, o, sg * st)] if rq is not None and rq.multipliers.size > 1 else []),
                Binding("dst", tensor=out, writable=True),
                *[b for b in norm_bindings if b.writable],  # the residual row a prologue writes
            ]
            params = {**fixed, **shared, "RT": rt, "ST": st, "RTILES": -(-rows // rt), "SG": sg,
                      "WEIGHTS_FN": reader, "NORM": norm_code, "ACC_INIT": acc_init(d.tile), "TAPS": lines(taps, 4),
                      "STORE": lines(store, 4)}
            return KernelSpec("fully_connected", params, bindings, grid=(count(d.tile) * d.split, 1, 1),
                              workgroup=(d.invocations_per_workgroup, 1, 1), dispatch=dispatch,
                              epilogue=activation(op), out_channels=o // 2 if gated else o,
                              functions=gate_fns(op.opt(GATED_OPTION)) if gated
                              else [MULTIPLY_BY_QUANTIZED_MULTIPLIER] if rq else [],
                              label=f"{_prologue_label(op)}"
                                    f"{op.code} {rows}x{i}->{_outputs(o, op.opt(GATED_OPTION))}"
                                    f"{f': {INT8_EXACT}' if rq else ''} "
                                    f"[{d.describe()}]")

        def step(tile: tuple[int, int]) -> float:
            """A mat4x4 step; a norm prologue adds its pass's load and each value's scale and offset per row."""
            return tiling.mat_step(tile) + (3 * tile[0] * tiling.LOAD if norm else 0.0) \
                + (4 * tile[0] * tiling.LOAD if op.opt(RESIDUAL_NORM) else 0.0)

        tiles = _tiles(rows, so, gated or bool(op.opt(SCATTER_PAIRS)), wide=bool(norm))
        numbers = {"rows": rows, "SI": si, "P": p, "SO": so, "plane": ih * iw, **({"gated": 1} if gated else {}),
                   **({"scatter": 1} if op.opt(SCATTER_PAIRS) else {}),
                   **({"norm": 1} if norm else {}), **({"residual": 1} if op.opt(RESIDUAL_NORM) else {})}
        return [tiling.variants("fully_connected", numbers, tiles, depth, count, step, make, rows * i * o)]


# -- gated projections (passes/merge_gated_projections.py): gate and up weights interleaved by output slice ----

# act(gate) * up with the elementwise kernel's own expressions (LOGISTIC, GELU exact / tanh); helpers apart, so codegen
# emits each one once. The `gated` option names the activation: SiLU (LLaMA-style), GELU_TANH (Gemma), GELU.
GATE_ACTIVATIONS = {"SILU": f"a * {ELEMENTWISE_LOGISTIC}", "GELU_TANH": _GELU_TANH, "GELU": _GELU_EXACT}


def gate_fns(kind: str) -> list[Code]:
    """The WGSL function `gate(a, up)` = act(a) * up of a gated projection, and the helpers it calls."""
    expr = GATE_ACTIVATIONS[kind]
    return [Code(codegen.fill("fully_connected/gate.wgsl", {"ACTIVATION": Code(expr)}) + "\n"),
            *(Code(h) for h in helpers_for(expr))]


WIDEST_TILE = 8  # output slices of the widest tile _tiles offers


def _tiles(rows: int, so: int, gated: bool, wide: bool = False) -> list[tuple[int, int]]:
    """Tile shapes (rows, output slices); a gated projection's tile holds pairs of a gate slice and its up slice.
    wide: also 4 and 8 slices, where each tile first makes a pass of its own over its rows (a normalization
    prologue), so that more outputs share that pass."""
    widths = (8, 4, 2, 1) if wide else (2, 1)
    return [(rt, st) for rt in (4, 2, 1) for st in widths if (rt == 1 or rows >= rt) and (st == 1 or so >= st)
            and (not gated or st % 2 == 0)]


def _stores(values: list[list[str]], gated: bool, op: Op | None = None) -> list[str]:
    """`store` calls of a tile's values[j][t] (output slice os0 + j, row r0 + t); gated: slice os0 / 2 + j / 2 gets
    act(gate) * up of the tile's slices j and j + 1 (LiteRT's LOGISTIC, MUL, MUL or GELU, MUL); a projection
    carrying a KV cache write (SCATTER_PAIRS): each pair of slices scattered (kernels/kv_epilogue.py)."""
    if op is not None and op.opt(SCATTER_PAIRS):
        return kv_epilogue.scatter_stores(values)
    if gated:
        return [f"store(gate({values[j][t]}, {values[j + 1][t]}), r0 + {t}u, os0 / 2u + {j // 2}u);"
                for j in range(0, len(values), 2) for t in range(len(values[j]))]
    return [f"store({v}, r0 + {t}u, os0 + {j}u);" for j, row in enumerate(values) for t, v in enumerate(row)]


def _float_rows(op: Op, graph: Graph) -> bool:
    """The FC reads and writes plain f32 tensors (a norm prologue computes on the real values)."""
    x, out = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
    return all(t.dtype == np.float32 and t.quantization is None for t in (x, out))


def _outputs(o: int, gated: str | None) -> str:
    return f"{o // 2} ({gated.lower()}(gate) * up of {o} interleaved rows)" if gated else str(o)


# -- a row normalization read as the projection's prologue (passes/fuse_norm_into_projection.py) --------------


def _norm_prologue(op: Op, graph: Graph, raw: list[str], d: Decomposition, channels: int, staged: int = 0,
                   ) -> tuple[list[str], Code, list[Binding]]:
    """The input rows as the FC reads them (each `raw` vec4 expression normalized, when the op has a NORM), the
    code computing each row's normalizer first (a pass over the row, its split combined), and its bindings. The
    normalization is RMS_NORM's own expression (kernels/normalization.py). staged: the workgroup's invocation
    count when all of them make the passes together (Decomposition.staged), the residual row written by
    workgroup 0 only."""
    norm = op.opt(NORM)
    if not norm:
        return raw, Code(""), []
    scale_t, offset_t, eps, eps_outside, _ = norm
    s = slices(channels)

    def padded(t: int) -> np.ndarray:
        out = np.zeros(s * 4, np.float32)
        out[:channels] = const_f32(graph, t).reshape(-1)
        return out

    residual = op.opt(RESIDUAL_NORM)
    start, stride = ("li", staged) if staged else ("k", d.split)

    def reduce(names: list[str], first: bool) -> str:  # staged: the residual's part of row_partials first
        return _workgroup_reduce(names, d, int(bool(residual) and not first)) if staged \
            else codegen.lane_reduce(names, d, first=first)

    affine = [padded(scale_t), padded(offset_t)]
    code: list[str] = []
    writes: list[str] = []
    outputs: list[Binding] = []
    if residual:  # the row is x + RMS_NORM(o): o's normalizer first (its own pass), the row written where asked
        position, r_scale, r_offset, r_eps, r_outside, _ = residual
        rows = graph.tensors[op.inputs[0]].size // channels
        o_raw = [r.replace("src[", "res_o[", 1) for r in raw]
        code += [f"var rsq_{t} = vec4<f32>(0.0);" for t in range(len(raw))]
        code += [f"for (var q = {start}; q < {s}u; q += {stride}u) {{", "  let px = 0u;", "  let sl = q;"]
        code += [line for t, r in enumerate(o_raw) for line in (f"  let o_{t} = {r};", f"  rsq_{t} += o_{t} * o_{t};")]
        code += ["}", reduce([f"rsq_{t}" for t in range(len(raw))], True)]
        code += [f"let rinv_{t} = {_inverse_rms(f'rsq_{t}', channels, r_eps, r_outside)};" for t in range(len(raw))]
        raw = [f"({r} + ({o} * rinv_{t} * norm_affine[{2 * s}u + sl] + norm_affine[{3 * s}u + sl]))"
               for t, (r, o) in enumerate(zip(raw, o_raw))]
        affine += [padded(r_scale), padded(r_offset)]
        bindings_in = [Binding("res_o", tensor=op.inputs[position])]
        if len(op.outputs) > 1:
            outputs = [Binding("res_h", tensor=op.outputs[1], writable=True)]
            first_tile = "wid.x == 0u && wid.y == 0u" if staged else "os0 == 0u"
            writes = [f"  if ({first_tile} && r0 + {t}u < {rows}u) {{ res_h[{_index_of(r)}] = D4(v_{t}); }}"
                      for t, r in enumerate(o_raw)]
    else:
        bindings_in = []
    code += [f"var nsq_{t} = vec4<f32>(0.0);" for t in range(len(raw))]
    code.append(f"for (var q = {start}; q < {s}u; q += {stride}u) {{")
    code.append("  let px = 0u;")
    code.append("  let sl = q;")
    code += [line for t, r in enumerate(raw) for line in (f"  let v_{t} = {r};", f"  nsq_{t} += v_{t} * v_{t};")]
    code += writes
    code.append("}")
    code.append(reduce([f"nsq_{t}" for t in range(len(raw))], not residual))
    code += [f"let ninv_{t} = {_inverse_rms(f'nsq_{t}', channels, eps, eps_outside)};" for t in range(len(raw))]
    # scale and offset in one binding (one storage buffer fewer: kernels/kv_epilogue.py appends its table too)
    src = [f"(({r} - vec4<f32>(0.0)) * ninv_{t} * norm_affine[sl] + norm_affine[{s}u + sl])" for t, r in enumerate(raw)]
    bindings = [Binding("norm_affine", data=np.concatenate(affine), element="vec4<f32>"), *bindings_in, *outputs]
    return src, Code("\n  ".join(code)), bindings


def _workgroup_reduce(names: list[str], d: Decomposition, part: int, combine: str = "{a} + {b}") -> str:
    """Combine each vec4 variable in `names` over all invocations (a power of two) of d's workgroup through part
    `part` of `row_partials` (each row reduction its own part: no barrier protects an earlier one's reads): a tree,
    a barrier a level; or with subgroups a butterfly in each subgroup, then each invocation combines the
    subgroups' results. Afterwards every invocation holds the totals."""
    n, invocations = len(names), d.invocations_per_workgroup
    base = part * _row_partials(d)
    comb = combine.format
    if d.subgroup:  # subgroups of at least 4 invocations, the workgroup's power of two whole ones or part of one
        out = [f"for (var o = min({invocations}u, sg_size) / 2u; o > 0u; o = o >> 1u) {{",
               *[f"  {v} = {comb(a=v, b=f'subgroupShuffleXor({v}, o)')};" for v in names], "}",
               "if (sg_lane == 0u) {",
               *[f"  row_partials[{base}u + sg_id * {n}u + {i}u] = {v};" for i, v in enumerate(names)], "}",
               "workgroupBarrier();", *[f"{v} = row_partials[{base + i}u];" for i, v in enumerate(names)],
               f"for (var j = 1u; j < max({invocations}u / sg_size, 1u); j++) {{",
               *[f"  {v} = {comb(a=v, b=f'row_partials[{base}u + j * {n}u + {i}u]')};" for i, v in enumerate(names)],
               "}"]
        return "\n  ".join(out)
    at = f"row_partials[{base}u + li * {n}u + {{i}}u]"
    out = [*[f"{at.format(i=i)} = {v};" for i, v in enumerate(names)], "workgroupBarrier();",
           f"for (var h = {invocations // 2}u; h > 0u; h = h >> 1u) {{", "  if (li < h) {"]
    out += [f"    {at.format(i=i)} = "
            + comb(a=at.format(i=i), b=f"row_partials[{base}u + (li + h) * {n}u + {i}u]") + ";" for i in range(n)]
    out += ["  }", "  workgroupBarrier();", "}", *[f"{v} = row_partials[{base + i}u];" for i, v in enumerate(names)]]
    return "\n  ".join(out)


def _prologue_label(op: Op) -> str:
    """What the prologue computes, for the dispatch's label: the residual row (x + RMS_NORM(o)) and its norm."""
    norm, residual = op.opt(NORM), op.opt(RESIDUAL_NORM)
    return (f"{residual[5]} + " if residual else "") + (f"{norm[4]} + " if norm else "")


def _inverse_rms(sums: str, channels: int, eps: float, eps_outside: bool) -> str:
    """RMS_NORM's normalizer of a row whose squares sum (a vec4 of lane sums) to `sums`."""
    mean = f"({sums}.x + {sums}.y + {sums}.z + {sums}.w) / {codegen.literal(float(channels))}"
    eps_code = codegen.literal(float(eps))
    return f"1.0 / (sqrt({mean}) + {eps_code})" if eps_outside else f"inverseSqrt({mean} + {eps_code})"


def _index_of(read: str) -> str:
    """The index expression of a prologue's read `vec4<f32>(name[INDEX])`."""
    return read[read.index("[") + 1:read.rindex("]")]


def _residual_check(op: Op, graph: Graph) -> str | None:
    """Why op's RESIDUAL_NORM cannot be its prologue (None: it can): a NORM prologue, o and the written row of x's
    shape, float, its constants of one value a channel."""
    residual = op.opt(RESIDUAL_NORM)
    if not residual:
        return None
    position, scale, offset = residual[:3]
    if not op.opt(NORM) or len(op.inputs) <= position or op.inputs[position] < 0 or len(op.outputs) > 2:
        return "a residual prologue needs a norm prologue, its row operand and at most the row as a second output"
    x = graph.tensors[op.inputs[0]]
    others = [graph.tensors[op.inputs[position]], *(graph.tensors[t] for t in op.outputs[1:])]
    if any(t.shape != x.shape or t.dtype != np.float32 or t.quantization or t.data is not None for t in others):
        return "the residual row's operands must be run-time float tensors of the input's shape"
    width = x.shape[-1] if x.shape else 1
    if any(graph.tensors[t].data is None or graph.tensors[t].size != width for t in (scale, offset)):
        return "the residual norm's scale and offset must be constants of one value a channel"
    return None


# -- hybrid FULLY_CONNECTED: float input, int8 weights kept int8 ----------------------------------------


def hybrid_in_float(op: Op) -> bool:
    """A hybrid FC marked to compute in float (engine option hybrid_arithmetic="float")."""
    return op.opt(HYBRID_ARITHMETIC) == "float"


def _hybrid_label(packed: packed_int8.PackedRows, symmetric: bool, in_float: bool) -> str:
    """What the kernel computes: the weights' width and blocks, and the arithmetic."""
    if in_float:
        label = HYBRID_FLOAT
    elif symmetric:
        label = HYBRID.replace("(XNNPACK: asymmetric int8", "(builtin kernel: symmetric int8", 1)
    else:
        label = HYBRID
    width = "int8 weights" if packed.bits == 8 else "int4 weights (8 a u32)"
    if packed.block:
        width += f" in blocks of {packed.block} (f16 scales)"
    return label.replace("int8 weights", width, 1)


def _hybrid_build(op: Op, graph: Graph) -> Variants:
    """Integer arithmetic (the default): XNNPACK's dynamically quantized FC (qd8-f32-qc8w), which LiteRT's default
    CPU delegate runs: per input row, rmin = min(0, min x), rmax = max(0, max x), scale = 255 / (rmax - rmin), a
    zero point nudged to an integer, q = clamp(round(x * scale) + zp) (ties to even); the output is
    (sum q*w - zp * sum w) / scale * w_scale + bias with the sums in i32 (dot4I8Packed).
    Float arithmetic (HYBRID_ARITHMETIC = "float"): the output is (sum x * w) * w_scale + bias, x as it is, the int8
    weights unpacked in registers and the sums in f32 (in fp16 mode too): the float64 answer x · dequant(W) up to
    f32 rounding, where the integer arithmetic adds the row quantization's error."""
    x, out = op.inputs[0], op.outputs[0]
    o, i = graph.tensors[op.inputs[1]].shape
    ib, ih, iw, ic = bhwc(graph, x)
    rb, rh, rw, _ = bhwc(graph, out)
    rows, p, si, so = rb * rh * rw, i // ic, slices(ic), slices(o)
    gated = bool(op.opt("gated"))
    norm = op.opt(NORM)
    in_float = hybrid_in_float(op)
    norm_label = _prologue_label(op)
    packed = packed_int8.pack_rows(graph.tensors[op.inputs[1]], ic)
    # LiteRT's XNNPACK takes int4 rows of even length only; an odd one runs its builtin kernel, which quantizes
    # each input row symmetrically (measured: all three LiteRT kernel sets agree)
    symmetric = packed.bits == 4 and not packed.block and i % 2 == 1
    words = p * si  # the reduction: u32 words (4 input channels) per row
    # rows of whole vec4<u32>s may be read 4 int8 words (16 weights; int4: 8 words, 32 weights) a load
    # (Decomposition.wide): a quarter (an eighth) of the weight loads, in as many fewer steps (fewer invocations can
    # share them: the latency model chooses)
    per_load = 8 if packed.bits == 4 else 4
    quads = not packed.block and words % per_load == 0
    reader, weight_bindings = packed_int8.chunked_reader("weights", packed)
    quad_reader, quad_bindings = (packed_int8.chunked_rows("weights_quad", "weights", packed.words, "vec4<u32>", 4)
                                  if quads else (reader, weight_bindings))
    if quads and packed.bits == 4:
        quad_reader = Code(quad_reader + INT4_NIBBLES)
    bias_t = op.inputs[2] if len(op.inputs) > 2 else -1
    bias = const_f32(graph, bias_t).reshape(-1) if bias_t >= 0 else None
    fixed = {"SI": si, "P": p, "SO": so, "SRC_INDEX": _src_index(ic, ih * iw),
             **_out_store(so // 2 if gated else so, rh, rw, rows)}

    def count(tile: tuple[int, int]) -> int:
        return -(-rows // tile[0]) * -(-so // tile[1])

    def make(d: Decomposition) -> KernelSpec:
        rt, st = d.tile
        sg = -(-so // st)
        so_pad = sg * st
        # per output slice: channel scales, row sums of the weights (for the input's zero point) and bias
        channel = np.zeros((3, so_pad * 4), np.float32)
        channel[0, :o] = packed.scale
        channel[1, :o] = packed.row_sums
        channel[2] = bias_vec4(bias, o, so_pad)
        raw = [f"vec4<f32>(src[src_index(min(r0 + {t}u, {rows - 1}u) * {p}u + px, sl)])" for t in range(rt)]
        staged = d.invocations_per_workgroup if d.staged else 0
        src, norm_code, norm_bindings = _norm_prologue(op, graph, raw, d, ic, staged)
        accs = accumulators(d.tile)
        shared, dispatch = tiling.split_params(d, count(d.tile), accs)
        if staged:  # the rows' reductions and their quantized words or normalized values (staged_memory counts them)
            row_words = (f"row_f: array<vec4<f32>, {rt * words}" if in_float else f"row_q: array<vec4<u32>, "
                         f"{rt * words // 4}" if d.wide else f"row_q: array<u32, {rt * words}")
            shared["LANE_MEMORY"] = Code(f"{shared['LANE_MEMORY']}\nvar<workgroup> row_partials: array<vec4<f32>, "
                                         f"{_row_partials(d) * passes}>;\nvar<workgroup> {row_words}>;")
        if in_float:
            row_ranges, to_float = Code(""), []
            init = [f"var acc_{j}_{t} = vec4<f32>(0.0);" for j in range(st) for t in range(rt)]
            taps = [f"let x_{t} = {src[t]};" for t in range(rt)]
            if staged:  # the normalized rows stored once by the workgroup, then read one vec4 a word
                row_ranges = Code(lines([f"for (var q = li; q < {words}u; q += {staged}u) {{", f"  let px = q / {si}u;",
                                         f"  let sl = q % {si}u;",
                                         *[f"  row_f[{t * words}u + q] = {src[t]};" for t in range(rt)], "}",
                                         "workgroupBarrier();"], 2))
                taps = [f"let x_{t} = row_f[{t * words}u + px * {si}u + sl];" for t in range(rt)]
            if packed.block:  # each weight times its block's scale (the channel scales are then 1)
                init += _block_state(st)
                taps += _block_switch(packed.block, ic, st)
            for j in range(st):
                for c in range(4):
                    w = f"vec4<f32>(unpack4xI8(weights_word((os0 + {j}u) * 4u + {c}u, q)))"
                    taps.append(f"let w_{j}_{c} = {w}{f' * bs_{j}[{c}]' if packed.block else ''};")
                taps += [f"acc_{j}_{t} += vec4<f32>(" + ", ".join(f"dot(x_{t}, w_{j}_{c})" for c in range(4))
                         + ");" for t in range(rt)]
            values = [[f"(acc_{j}_{t} * channel[os0 + {j}u] + channel[{2 * so_pad}u + os0 + {j}u])"
                       for t in range(rt)] for j in range(st)]
            shared["REDUCE"] = codegen.lane_reduce(accs, d, first=not norm)
        else:
            row_ranges, init, taps, to_float, values = _integer_rows(src, d, st, so_pad, norm, words, si,
                                                                     symmetric, packed.block, ic, staged, d.wide,
                                                                     bool(op.opt(RESIDUAL_NORM)))
            shared["REDUCE"] = codegen.lane_reduce(accs, d, first=False)
        taps = _word_taps(taps, st, si, d.wide, rt if staged and not in_float else 0, words, per_load)
        shared.update({"K": words // per_load if d.wide else words, "WEIGHTS_FN": quad_reader if d.wide else reader})
        store = _stores(values, gated, op)
        bindings = [Binding("src", tensor=x), *(quad_bindings if d.wide else weight_bindings),
                    *[b for b in norm_bindings if not b.writable],
                    Binding("channel", data=channel.reshape(-1), element="vec4<f32>"),
                    Binding("dst", tensor=out, writable=True),
                    *[b for b in norm_bindings if b.writable]]  # the residual row a prologue writes
        params = {**fixed, **shared, "RT": rt, "ST": st, "RTILES": -(-rows // rt), "SG": sg,
                  "NORM": norm_code, "ROW_RANGES": row_ranges, "ACC_INIT": lines(init, 2), "TAPS": lines(taps, 4),
                  "TO_FLOAT": lines(to_float, 2), "STORE": lines(store, 4)}
        return KernelSpec("fully_connected_int8", params, bindings, grid=(count(d.tile) * d.split, 1, 1),
                          workgroup=(d.invocations_per_workgroup, 1, 1), dispatch=dispatch,
                          epilogue=activation(op), out_channels=o // 2 if gated else o,
                          functions=gate_fns(op.opt(GATED_OPTION)) if gated else [],
                          label=f"{norm_label}{op.code} {rows}x{i}->{_outputs(o, op.opt(GATED_OPTION))}: "
                                f"{_hybrid_label(packed, symmetric, in_float)} [{d.describe()}]")

    # per input vec4: the range and quantizing passes, or one float pass; a norm: its own pass, and each pass reads
    # the value, its scale and its offset
    # a residual prologue (x + RMS_NORM(o)): each value read also reads o, its scale and offset, and one more pass
    residual = bool(op.opt(RESIDUAL_NORM))
    # staged: the row reductions (the range of integer arithmetic's rows, the norms)
    passes = (0 if in_float else 1) + (1 if norm else 0) + (1 if residual else 0)
    row_loads = (1 if in_float else 2) * (3 if norm else 1) * (2 if residual else 1) + (1 if norm else 0) \
        + (1 if residual else 0)

    def step(tile: tuple[int, int], wide: bool = False) -> float:
        """One word of the reduction: the row loads and 4 weight words per slice, then integer arithmetic's row
        quantization (8 a row) and dot4I8Packed (4 a row and slice), or float arithmetic's unpacking (8 a slice)
        and vec4 dot products (16 FMAs a row and slice). Wide: 4 words (int4: 8), one vec4<u32> load a channel."""
        rt, st = tile
        per_word = row_loads * rt * tiling.LOAD + (st * 8 + rt * st * 16 if in_float else rt * 8 + rt * st * 4)
        return (per_load if wide else 1) * per_word + st * 4 * tiling.LOAD

    tiles = _tiles(rows, so, gated or bool(op.opt(SCATTER_PAIRS)), wide=bool(norm))
    # int4 forms cost differently: their own tuning-cache entries (int8 keys unchanged)
    int4_numbers = {"bits": 4, "block": packed.block, "symmetric": int(symmetric)} if packed.bits == 4 else {}
    variants = tiling.variants("fully_connected_int8", {"rows": rows, "SI": si, "P": p, "SO": so, "plane": ih * iw,
                                                        "chunks": len(weight_bindings), "gated": int(gated),
                                                        "norm": int(bool(norm)), **int4_numbers,
                                                        **({"residual": 1} if residual else {}),
                                                        **({"scatter": 1} if op.opt(SCATTER_PAIRS) else {}),
                                                        **({"float": 1} if in_float else {})},
                               tiles, words, count, step, make, rows * i * o)
    if quads:
        wide = [dataclasses.replace(d, wide=True) for d in tiling.decompositions(tiles, words // per_load, count)]
        variants.candidates += wide
    word_work = variants.work
    # the staged form where every tile shares the rows (one row tile) and they fit workgroup memory
    variants.candidates += [dataclasses.replace(d, staged=True) for d in variants.candidates
                            if staged_offered(d, rows, words, in_float, passes)]

    def staged_step(tile: tuple[int, int], wide: bool) -> float:
        """A step of the staged dot loop: each row's word(s) from workgroup memory (integer arithmetic, wide: a
        vec4<u32> per 4 words; float: a vec4 a word), the ST slices' weight words, then dot4I8Packed (4 a row and
        slice and word) or the float arithmetic's unpacking (8 a slice) and vec4 dot products (16 a row and slice)."""
        rt, st = tile
        words_a_step = per_load if wide else 1
        if in_float:
            return words_a_step * (rt * tiling.LOAD + st * 8 + rt * st * 16) + st * 4 * tiling.LOAD
        return rt * tiling.LOAD * (per_load // 4 if wide else 1) + st * 4 * tiling.LOAD + words_a_step * rt * st * 4

    def work(d: Decomposition) -> float:
        rt, st = d.tile
        steps = math.ceil((words // per_load if d.wide else words) / d.split)
        if d.staged:  # every invocation: its share of the row passes (as the unstaged loop's row loads and
            # quantizing, plus storing the word or value), the workgroup-wide reductions and the staging barrier
            wg = d.invocations_per_workgroup
            share = math.ceil(words / wg) * rt * ((row_loads + 1) * tiling.LOAD + (0 if in_float else 8))
            reductions = passes * _row_reduction_cost(d) + tiling.SHARED_LEVEL
            return (share + reductions + steps * staged_step(d.tile, d.wide)
                    + tiling.reduction_cost(d, rt * st) + tiling.OVERHEAD)
        if not d.wide:
            return word_work(d)
        return steps * step(d.tile, True) + tiling.reduction_cost(d, rt * st) + tiling.OVERHEAD

    def barriers(d: Decomposition) -> int | None:
        """Staged: each row reduction's barriers (_workgroup_reduce), the staging barrier, then the split's own
        tree after a barrier (the lanes' array follows the row reductions), or its one crossing subgroups."""
        if not d.staged:
            return None
        levels = int(math.log2(d.invocations_per_workgroup))
        split_tree = (int(math.log2(d.split)) + 3 if not d.subgroup else 2) if d.split > 1 else 0
        return passes * (1 if d.subgroup else levels + 1) + 1 + split_tree

    def shuffles(d: Decomposition) -> int | None:
        """Staged with subgroups: each row reduction's butterfly (as many levels as the workgroup's, as the
        split's are counted), then the split's."""
        if not d.staged:
            return None
        levels = int(math.log2(d.invocations_per_workgroup))
        return (passes * levels * d.tile[0] + int(math.log2(d.split)) * d.tile[0] * d.tile[1]) if d.subgroup else 0

    variants.work, variants.barriers, variants.shuffles = work, barriers, shuffles
    return variants


def _row_reduction_cost(d: Decomposition) -> float:
    """Work of one row reduction of a staged FC (_workgroup_reduce) over the workgroup: a tree through workgroup
    memory, or a subgroup butterfly (levels counted as if one subgroup spanned the workgroup) and the subgroups'
    results combined through workgroup memory (a level of the tree)."""
    rt, wg = d.tile[0], d.invocations_per_workgroup
    if d.subgroup:
        return math.log2(wg) * rt * tiling.SHUFFLE + tiling.SHARED_LEVEL + 2 * tiling.LOAD * rt
    return tiling.reduction_cost(Decomposition((rt, 1), wg, 1), rt)


def staged_memory(d: Decomposition, words: int, passes: int, word_bytes: int = 4) -> int:
    """Bytes of workgroup memory of a staged hybrid FC (Decomposition.staged): the split's lanes array
    (codegen.lane_placeholders), the row reductions' array (a part for each of `passes`) and the rows' quantized
    words (word_bytes 4), or normalized values (16: float arithmetic)."""
    rt, st = d.tile
    wg = d.invocations_per_workgroup
    lanes = 0 if d.split == 1 else max(1, wg // (4 if d.subgroup else 1) * rt * st) * 16
    return lanes + _row_partials(d) * passes * 16 + rt * words * word_bytes


def _row_partials(d: Decomposition) -> int:
    """vec4s of a staged FC's row reductions: one per invocation and row, or per subgroup (>= 4 invocations)."""
    return max(1, d.invocations_per_workgroup // (4 if d.subgroup else 1)) * d.tile[0]


def staged_offered(d: Decomposition, rows: int, words: int, in_float: bool, passes: int) -> bool:
    """Whether a hybrid FC offers d staged: every row in one row tile (so every tile of every workgroup reads the
    same rows), workgroups of a power of two, and the staged memory within WebGPU's default 16 KiB; float
    arithmetic (its rows staged as normalized f32 vec4s) only with a norm prologue (`passes` > 0: a plain row read
    from workgroup memory saves nothing)."""
    wg = d.invocations_per_workgroup
    return (rows <= d.tile[0] and wg & (wg - 1) == 0 and passes > 0
            and staged_memory(d, words, passes, 16 if in_float else 4) <= tiling.LANE_MEMORY_VEC4 * 16)


def _word_taps(taps: list[str], st: int, si: int, quads: bool, staged_rows: int = 0, row_words: int = 0,
               per_load: int = 4) -> list[str]:
    """The loop body over word q of the rows: px, sl and the taps; with quads, q counts vec4<u32>s of weights (of
    `per_load` int8 words: 4, or 8 of int4 weights): each of the ST slices' 4 channels loaded once (wq_j_c), then
    the taps of its words (unrolled), word e from lane e (int4: its nibbles e % 2 of lane e / 2, weights_nibbles).
    staged_rows: rows read from workgroup memory (of `row_words` words each), with quads 4 words a load too."""
    head = [f"let px = q / {si}u;", f"let sl = q % {si}u;"]
    if not quads:
        return head + taps
    loads = [f"let wq_{j}_{c} = weights_quad((os0 + {j}u) * 4u + {c}u, q);" for j in range(st) for c in range(4)]
    loads += [f"let xq4_{t}_{h} = row_q[{t * row_words // 4}u + q * {per_load // 4}u + {h}u];"
              for t in range(staged_rows) for h in range(per_load // 4)]
    words = []
    for e in range(per_load):  # unrolled: no dynamic index into the loaded vectors
        lane = "xyzw"[e // (per_load // 4)]
        inner = [f"let qw = q * {per_load}u + {e}u;", f"let px = qw / {si}u;", f"let sl = qw % {si}u;"]
        for tap in taps:
            for j in range(st):
                for c in range(4):
                    word = f"wq_{j}_{c}.{lane}"
                    word = word if per_load == 4 else f"weights_nibbles({word}, {e % 2 * 4}u)"
                    tap = tap.replace(f"weights_word((os0 + {j}u) * 4u + {c}u, q)", word)
            for t in range(staged_rows):
                tap = tap.replace(staged_word(t, row_words), f"xq4_{t}_{e // 4}.{'xyzw'[e % 4]}")
            inner.append(tap)
        words.append("{\n      " + "\n      ".join(inner) + "\n    }")
    return [*loads, *words]


# int4 weights read 8 to a u32: int8 word (nibbles at `shift`, 0 or 4, sign-extended to bytes), as packed/int4_word.wgsl
INT4_NIBBLES = """fn weights_nibbles(v: u32, shift: u32) -> u32 {
  let b = (v >> shift) & 0x0F0F0F0Fu;
  return b | ((b & 0x08080808u) * 0x1Eu);
}
"""


def _block_state(st: int) -> list[str]:
    """Blockwise weights: the block the scales were loaded for and the ST slices' 4 channel scales in it."""
    return ["var blk = 0xFFFFFFFFu;", *[f"var bs_{j} = vec4<f32>(0.0);" for j in range(st)]]


def _block_switch(block: int, ic: int, st: int, before: list[str] = ()) -> list[str]:
    """Taps that, when the word at (px, sl) enters another block, run `before` and load that block's scales."""
    loads = [f"bs_{j} = vec4<f32>(" + ", ".join(f"weights_block_scale((os0 + {j}u) * 4u + {c}u, b)"
                                                for c in range(4)) + ");" for j in range(st)]
    return [f"let b = (px * {ic}u + sl * 4u) / {block}u;",
            "if (b != blk) {\n      " + "\n      ".join([*before, *loads, "blk = b;"]) + "\n    }"]


def _range_part(norm: tuple | None, residual: bool) -> int:
    """The range's part of a staged FC's row_partials: after the residual norm's and the norm's."""
    return (1 if norm else 0) + (1 if residual else 0)


def staged_word(t: int, words: int) -> str:
    """Row t's word q in workgroup memory, as a staged tap reads it (_word_taps reads 4 words a load instead)."""
    return f"row_q[{t * words}u + q]"


def _integer_rows(src: list[str], d: Decomposition, st: int, so_pad: int, norm: tuple | None, words: int,
                  si: int, symmetric: bool, block: int, ic: int, staged: int = 0, wide: bool = False,
                  staged_residual: bool = False
                  ) -> tuple[Code, list[str], list[str], list[str], list[list[str]]]:
    """The integer arithmetic's code for rows `src` (vec4 expressions of px, sl; `words` per row, `si` a pixel of
    `ic` channels): the pass finding each row's range and quantization parameters (XNNPACK's asymmetric rule, or
    the builtin kernel's symmetric one), the accumulators' initial values (the zero point times the weights' row
    sums), the taps (rows quantized, packed, dot4I8Packed; blockwise weights (XNNPACK's qb4w): a block's products
    summed in i32, then times the block's scales into f32 sums), their conversion to f32 and the values stored.
    staged (Decomposition.staged; the workgroup's invocation count): the workgroup's invocations find the range
    together and quantize the rows once into `row_q` (workgroup memory; `wide`: vec4<u32>s of 4 words), which
    the taps then read: the same integers, one load a word."""
    rt = len(src)
    ranges = [f"range_{t}" for t in range(rt)]
    start, stride = ("li", staged) if staged else ("k", d.split)
    range_pass = [f"var range_{t} = vec4<f32>(0.0);" for t in range(rt)]
    range_pass += [f"for (var q = {start}; q < {words}u; q += {stride}u) {{", f"  let px = q / {si}u;",
                   f"  let sl = q % {si}u;"]
    range_pass += [f"  range_{t} = min(range_{t}, lanes_min_negmax({src[t]}));" for t in range(rt)]
    range_pass += ["}", _workgroup_reduce(ranges, d, _range_part(norm, staged_residual), "min({a}, {b})") if staged
                   else codegen.lane_reduce(ranges, d, "min({a}, {b})", first=not norm)]
    for t in range(rt):
        range_pass += [f"let rmin_{t} = min(range_{t}.x, 0.0);", f"let rmax_{t} = max(-range_{t}.y, 0.0);"]
        if symmetric:  # tensor_utils::SymmetricQuantizeFloats: scale max|x| / 127, no zero point
            range_pass += [
                f"let ra_{t} = max(-rmin_{t}, rmax_{t});",
                f"let qs_{t} = select(127.0 / ra_{t}, 1.0, ra_{t} == 0.0);",
                f"let zp_{t} = 0.0;",
                f"let inv_{t} = select(ra_{t} / 127.0, 1.0, ra_{t} == 0.0);",
            ]
            continue
        range_pass += [
            f"let qs_{t} = select(255.0 / (rmax_{t} - rmin_{t}), 1.0, rmin_{t} == rmax_{t});",
            f"let zf_{t} = select(127.0 - rmax_{t} * qs_{t}, -128.0 - rmin_{t} * qs_{t}, "
            f"(-128.0 + rmin_{t} * qs_{t}) + (127.0 + rmax_{t} * qs_{t}) > 0.0);",
            f"let zp_{t} = round(clamp(zf_{t}, -128.0, 127.0));",
            f"let inv_{t} = 1.0 / qs_{t};",
        ]
    acc_type = "vec4<f32>" if block else "vec4<i32>"
    zp = "zp_{t}" if block else "i32(zp_{t})"
    init = []
    for j in range(st):
        init.append(f"let wsum_{j} = {acc_type}(channel[{so_pad}u + os0 + {j}u]);")
        init += [f"var iacc_{j}_{t} = select({acc_type}(0), -{zp.format(t=t)} * wsum_{j}, k == 0u);"
                 for t in range(rt)]
    flush = [f"iacc_{j}_{t} += vec4<f32>(bacc_{j}_{t}) * bs_{j};" for j in range(st) for t in range(rt)]
    if symmetric:  # std::round: ties away from zero
        taps = [f"let xs_{t} = {src[t]} * qs_{t};\n    let xq_{t} = pack4xI8(vec4<i32>(clamp(sign(xs_{t}) * "
                f"floor(abs(xs_{t}) + 0.5), vec4<f32>(-127.0), vec4<f32>(127.0))));" for t in range(rt)]
    else:
        taps = [f"let xq_{t} = pack4xI8(vec4<i32>(clamp(round({src[t]} * qs_{t}), vec4<f32>(-128.0 - zp_{t}), "
                f"vec4<f32>(127.0 - zp_{t})) + zp_{t}));" for t in range(rt)]
    if staged:  # the rows quantized once, by the whole workgroup; the taps read the words
        stores = [f"row_q[{t * words // 4}u + q / 4u][q % 4u] = xq_{t};" if wide
                  else f"row_q[{t * words}u + q] = xq_{t};" for t in range(rt)]
        range_pass += [f"for (var q = li; q < {words}u; q += {staged}u) {{", f"  let px = q / {si}u;",
                       f"  let sl = q % {si}u;", *[f"  {tap}" for tap in taps], *[f"  {w}" for w in stores], "}",
                       "workgroupBarrier();"]
        taps = [f"let xq_{t} = {staged_word(t, words)};" for t in range(rt)]
    if block:
        init += _block_state(st)
        init += [f"var bacc_{j}_{t} = vec4<i32>(0);" for j in range(st) for t in range(rt)]
        resets = [f"bacc_{j}_{t} = vec4<i32>(0);" for j in range(st) for t in range(rt)]
        taps += _block_switch(block, ic, st, [*flush, *resets])
    for j in range(st):
        taps += [f"let w_{j}_{c} = weights_word((os0 + {j}u) * 4u + {c}u, q);" for c in range(4)]
        taps += [f"{'bacc' if block else 'iacc'}_{j}_{t} += vec4<i32>("
                 + ", ".join(f"dot4I8Packed(xq_{t}, w_{j}_{c})" for c in range(4)) + ");" for t in range(rt)]
    to_float = (flush if block else []) + [f"var acc_{j}_{t} = vec4<f32>(iacc_{j}_{t});"
                                           for j in range(st) for t in range(rt)]
    values = [[f"(acc_{j}_{t} * inv_{t} * channel[os0 + {j}u] + channel[{2 * so_pad}u + os0 + {j}u])"
               for t in range(rt)] for j in range(st)]
    return lines(range_pass, 2), init, taps, to_float, values


# -- BATCH_MATMUL --------------------------------------------------------------------------------


def batch2(shape: tuple[int, ...]) -> tuple[int, int]:
    """The batch dims of a rank 2..4 matrix shape, right-aligned and padded to two."""
    dims = (1, 1, *shape[:-2])
    return dims[-2], dims[-1]


def _bmm_supports(op: Op, graph: Graph) -> str | None:
    if len(op.inputs) != 2 or len(op.outputs) != 1:
        return "expects 2 inputs and 1 output"
    reason = float_tensors(op, graph)
    if reason:
        return reason
    a, b = (graph.tensors[t] for t in op.inputs)
    if a.data is not None and b.data is not None:
        return "both inputs constant"
    for key in (*VIEW_OPTIONS, OUT_VIEW):
        steps = op.opt(key)
        reason = steps and (layout_view.check(steps) or (key != OUT_VIEW and graph.tensors[
            op.inputs[VIEW_OPTIONS.index(key)]].data is not None and "view of a constant"))
        if reason:
            return reason
    (ashape, bshape), oshape = (logical_shape(op, graph, i) for i in (0, 1)), logical_out_shape(op, graph)
    if any(not 2 <= len(s) <= 4 for s in (ashape, bshape, oshape)):
        return "inputs and output must have rank 2..4"
    if a.data is not None and a.dtype != np.float32 or b.data is not None and b.dtype != np.float32:
        return "constant operands must be float32"
    adj_x, adj_y = bool(op.opt("adj_x", False)), bool(op.opt("adj_y", False))
    m, k = ashape[-2:][::-1] if adj_x else ashape[-2:]
    k2, n = bshape[-2:][::-1] if adj_y else bshape[-2:]
    if k != k2:
        return f"inner dimensions differ ({k} vs {k2})"
    try:
        batch = np.broadcast_shapes(tuple(ashape[:-2]), tuple(bshape[:-2]))
    except ValueError:
        return f"batch dims of {ashape} and {bshape} do not broadcast"
    if tuple(oshape) != (*batch, m, n):
        return f"output shape {oshape} is not {(*batch, m, n)}"
    try:
        if op.opt(OUT_VIEW) and out_index(op.opt(OUT_VIEW)) is None:
            return "the output view does not keep 4 adjacent channels together"
        for i, key in enumerate(VIEW_OPTIONS):
            if op.opt(key):
                layout_view.reader(op.opt(key), "v", READER_PARAMS[len(logical_shape(op, graph, i))])
    except ValueError as e:
        return f"layout view: {e}"
    return None


# Option fields passes/fold_matmul_layout.py sets (model/ops.py MATMUL_VIEWS, OUT_VIEW): layout_view Steps from the
# stored input (or the logical output)
READER_PARAMS = {2: ("row",), 3: ("i1", "row"), 4: ("i0", "i1", "row")}  # operand reader coordinates by logical rank


def logical_shape(op: Op, graph: Graph, i: int) -> tuple[int, ...]:
    """The matmul's operand i as the op sees it: the stored tensor's shape, or its view's."""
    steps = op.opt(VIEW_OPTIONS[i])
    return tuple(steps[-1].out_shape) if steps else tuple(graph.tensors[op.inputs[i]].shape)


def logical_out_shape(op: Op, graph: Graph) -> tuple[int, ...]:
    steps = op.opt(OUT_VIEW)
    return tuple(steps[0].in_shape) if steps else tuple(graph.tensors[op.outputs[0]].shape)


def out_index(steps: tuple) -> str | None:
    return layout_view.writer_index(steps, READER_PARAMS[len(steps[0].in_shape)][:-1] + ("m",))


def output_locator(graph: Graph, out: int, oshape: tuple[int, ...], steps: tuple | None, sep: str) -> str:
    """WGSL defining ob, oy, ox, os, oi (the epilogue's names) of the vec4 (i0, i1, m, ns) of the logical output
    [..., M, N] in the tensor `out` written: directly, or through the output view's vec4 index."""
    _, oh, ow, oc = to_bhwc(tuple(graph.tensors[out].shape))
    so = slices(oc)
    if steps:  # write where the layout ops after the matmul would have put the vec4; decode its coordinates
        plane = oh * ow
        lines = [f"let oi = {out_index(steps)};", f"let ox = oi % {ow}u;", f"let oy = oi / {ow}u % {oh}u;",
                 f"let os = oi / {plane}u % {so}u;", f"let ob = oi / {plane * so}u;"]
    else:
        loc = {2: ("m", "0u", "0u"), 3: ("i1", "0u", "m"), 4: ("i0", "i1", "m")}[len(oshape)]
        lines = [f"let ob = {loc[0]};", f"let oy = {loc[1]};", f"let ox = {loc[2]};", "let os = ns;",
                 f"let oi = ((ob * {so}u + os) * {oh}u + oy) * {ow}u + ox;"]
    return sep.join(lines)


def operand_reader(graph: Graph, t: int, adj: bool, name: str, view: tuple | None = None,
                   inverse_scale: float | None = None) -> tuple[Code, Binding, tuple[int, ...], bool]:
    """`name_at(i0, i1, row, sl)`: stored vec4 (row, slice) of the operand for output batch (i0, i1).

    A constant operand is transposed here when adjoint, so only runtime tensors keep `adj`. A runtime operand may
    be read through a layout view (kernels/layout_view.py) of the tensor t. inverse_scale: an int8 operand read as
    its integers q - zero point (round(real / scale))."""
    if inverse_scale is not None:
        fn, binding, shape, adj = operand_reader(graph, t, adj, name, view)
        raw = fn.replace(f"fn {name}_at(", f"fn {name}_real(", 1)
        rounded = codegen.fill("matmul/operand_int8.wgsl", {"NAME": Code(name), "INVERSE_SCALE": inverse_scale})
        return Code(raw + rounded + "\n"), binding, shape, adj
    tensor = graph.tensors[t]
    shape = tuple(tensor.shape)
    if view:
        shape = tuple(view[-1].out_shape)
        body, element, _ = layout_view.reader(view, name, READER_PARAMS[len(shape)])
        fn = codegen.fill("matmul/operand_view.wgsl", {"NAME": Code(name), "READ": Code(body)}) + "\n"
        return Code(fn), Binding(name, tensor=t, element=element), shape, adj
    if tensor.data is not None:
        data = const_f32(graph, t)
        if adj:
            data = np.swapaxes(data, -1, -2)
            shape, adj = data.shape, False
        binding = Binding(name, data=to_phwc4(data))
    else:
        binding = Binding(name, tensor=t)
    rows, ch = shape[-2], shape[-1]
    s = slices(ch)
    d0, d1 = batch2(shape)
    i0 = "i0" if d0 > 1 else "0u"
    i1 = "i1" if d1 > 1 else "0u"
    if len(shape) == 2:
        index = f"row * {s}u + sl"
    elif len(shape) == 3:
        index = f"({i1} * {s}u + sl) * {rows}u + row"
    else:
        index = f"(({i0} * {s}u + sl) * {d1}u + {i1}) * {rows}u + row"
    fn = codegen.fill("matmul/operand.wgsl", {"NAME": Code(name), "INDEX": Code(index)}) + "\n"
    return Code(fn), binding, shape, adj


def _bmm_build(op: Op, graph: Graph) -> Variants:
    out = op.outputs[0]
    oshape = logical_out_shape(op, graph)
    rq = int8_requant(op, graph)
    fa, ba, ashape, adj_x = operand_reader(graph, op.inputs[0], bool(op.opt("adj_x", False)), "xa", op.opt("view_a"),
                                           rq.inverse_scales[0] if rq else None)
    fb, bb, bshape, adj_y = operand_reader(graph, op.inputs[1], bool(op.opt("adj_y", False)), "yb", op.opt("view_b"),
                                           rq.inverse_scales[1] if rq else None)
    m, n = oshape[-2:]
    k = ashape[-2] if adj_x else ashape[-1]
    ks, so = slices(k), slices(n)
    b0, b1 = batch2(oshape)
    # a = X[m, 4*k4 .. 4*k4+3] as a vec4
    if adj_x:  # X stored [K, M]: lane j is row 4*k4 + j, channel m
        a_lanes = ", ".join(
            f"select(0.0, xa_at(i0, i1, min(k4 * 4u + {j}u, {k - 1}u), m / 4u)[m % 4u], "
            f"k4 * 4u + {j}u < {k}u)"
            for j in range(4)
        )
        a_expr = f"vec4<f32>({a_lanes})"
    else:
        a_expr = "xa_at(i0, i1, m, k4)"
    # bm: column j = Y[4*k4 + j, 4*n4 .. 4*n4+3]
    if adj_y:  # Y stored [N, K]: row n holds Y[:, n] along lanes
        rows = ", ".join(
            f"select(vec4<f32>(0.0), yb_at(i0, i1, min(ns * 4u + {lane}u, {n - 1}u), k4), "
            f"ns * 4u + {lane}u < {n}u)"
            for lane in range(4)
        )
        b_expr = f"transpose(mat4x4<f32>({rows}))"
    else:
        cols = ", ".join(
            f"select(vec4<f32>(0.0), yb_at(i0, i1, min(k4 * 4u + {j}u, {k - 1}u), ns), k4 * 4u + {j}u < {k}u)"
            for j in range(4)
        )
        b_expr = f"mat4x4<f32>({cols})"
    oc_ = to_bhwc(tuple(graph.tensors[out].shape))[3]
    locate = output_locator(graph, out, oshape, op.opt(OUT_VIEW), "\n    ")
    fixed = {
        "NS": so,
        "KS": ks,
        "M": m,
        "B1": b1,
        "BATCH_LAST": b0 * b1 - 1,
        "READERS": Code(fa + fb),
        "A_EXPR": Code(a_expr),
        "B_EXPR": Code(b_expr),
        "LOCATE": Code(locate),
    }
    tiles = m * so * b0 * b1
    views = "+".join(k.split("_")[1] for k in (*VIEW_OPTIONS, OUT_VIEW) if op.opt(k))
    label = (f"BATCH_MATMUL {ashape}x{bshape}{' adj_x' if adj_x else ''}{' adj_y' if adj_y else ''}"
             f"{f' (views {views})' if views else ''}{f': {INT8_EXACT}' if rq else ''}")

    def make(d: Decomposition) -> KernelSpec:
        shared, dispatch = tiling.split_params(d, tiles, ["acc"])
        return KernelSpec("batch_matmul", {**fixed, **shared}, [ba, bb, Binding("dst", tensor=out, writable=True)],
                          grid=(tiles * d.split, 1, 1), workgroup=(d.invocations_per_workgroup, 1, 1),
                          dispatch=dispatch, out_channels=oc_, label=f"{label} [{d.describe()}]",
                          functions=[MULTIPLY_BY_QUANTIZED_MULTIPLIER] if rq else [])

    numbers = {k: v for k, v in fixed.items() if isinstance(v, int)}
    return tiling.variants("batch_matmul", numbers, [(1, 1)], ks, lambda _: tiles, lambda _: tiling.mat_step((4, 1)),
                           make, b0 * b1 * m * n * k, [a_expr, b_expr, fa, fb])


# -- fully int8 FULLY_CONNECTED / BATCH_MATMUL: LiteRT's integer output stage ---------------------------------

INT8_EXACT = "int8 x int8 -> int8: exact integer sums, LiteRT's output stage"


def int8_requant(op: Op, graph: Graph) -> Int8Requant | None:
    """LiteRT's integer computation of a fully int8 FC (int8 input and output, symmetric int8 weights per tensor or
    per output channel, int32 bias, no activation or RELU) or BATCH_MATMUL (int8 x int8 -> int8, run-time operands),
    where f32 sums stay exact; None otherwise (the op then computes in float and rounds once, fake_quant)."""
    out = graph.tensors[op.outputs[0]]
    if op.code == "BATCH_MATMUL":
        a, b = (graph.tensors[t] for t in op.inputs[:2])
        if not int8_tensors(a, b, out):
            return None
        k = logical_shape(op, graph, 0)[-2 if op.opt("adj_x") else -1]
        if k * quantized_span(a) * quantized_span(b) >= EXACT_LIMIT:
            return None
        multiplier, shift = quantize_multiplier(float(a.quantization.scale[0]) * float(b.quantization.scale[0])  # type: ignore
                                                / float(out.quantization.scale[0]))  # type: ignore[union-attr]
        return Int8Requant(np.array([multiplier], np.int64), np.array([shift], np.int64),
                           (1.0 / float(a.quantization.scale[0]), 1.0 / float(b.quantization.scale[0])))  # type: ignore
    if op.opt("gated") or op.opt(NORM):
        return None
    return weights_requant(op, graph)


KERNEL = FullyConnectedKernel()
