"""CONV_2D: a general kernel plus two specialized variants, chosen from the op's parameters at build time.

* conv2d:       any kernel size, stride, dilation, padding (and groups, by densifying the weights).
* conv2d_1x1:   1x1, stride 1, no padding: a plain GEMM over the H*W pixels; the only variant that loads its
                input through a prologue (kernels/prologue.py).
* conv2d_first: inputs of 1..4 channels (one input slice, typical first layers): every tap unrolled.

Weights [O, KH, KW, I] are re-laid out once at build into 4x4 blocks, one mat4x4 per (out_slice, ky, kx,
in_slice) with column j = the 4 output channels' weights for input channel 4*in_slice + j, so a tap is
`acc += w * src` (mat4x4 * vec4).

Each variant is offered in several decompositions (kernels/tiling.py): an invocation computes a tile of XT
adjacent outputs x ST output slices (register tiling: one weight load feeds XT outputs, one input load ST
slices), and `split` invocations may share a tile's input slices and add their partial sums. A big GPU wants
small tiles and deep splits for the 7x7-pixel, 960-channel convs at the end of a MobileNet (a few hundred
outputs, each a long reduction); a CPU adapter wants the largest tiles. latency/policy.py chooses.

Padding is a parameter of ConvGeometry (pad_top / pad_left), not of the op, so a PAD merged into the conv by
a later pass only changes those two numbers (reads outside the input are zero in every variant).

The helpers at the top (padding, weight blocks, bias vectors, tiles) are shared with the depthwise and
transpose-conv modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...model.ir import Graph, Op
from ...model.ops import SAME, VALID, out_size
from .. import codegen
from ..layout import slices
from . import tiling
from .base import Binding, Code, Decomposition, KernelSpec, Lowering, Variants
from .common import (
    CLAMPED_ACTIVATIONS,
    MULTIPLY_BY_QUANTIZED_MULTIPLIER,
    Int8Requant,
    activation,
    activation_supported,
    bhwc,
    const_f32,
    float_tensors,
    is_const,
    requant_binding,
    requant_code,
    weights_requant,
)
from .prologue import input_reader, prologue_reason


def pad_before(padding: int, size: int, k: int, stride: int, dil: int, out: int) -> int:
    """TFLite's ComputePaddingWithOffset: total = max((out-1)*stride + eff_k - in, 0), before = total // 2."""
    if padding == VALID:
        return 0
    eff = (k - 1) * dil + 1
    return max((out - 1) * stride + eff - size, 0) // 2


def weight_blocks(w: np.ndarray, so_pad: int) -> np.ndarray:
    """[O, KH, KW, I] -> flat f32 mat4x4 blocks [so_pad][KH][KW][SI]:
    column j, row l = W[4os+l, ky, kx, 4is+j]."""
    o, kh, kw, i = w.shape
    si = slices(i)
    padded = np.zeros((so_pad * 4, kh, kw, si * 4), np.float32)
    padded[:o, :, :, :i] = w
    blocks = padded.reshape(so_pad, 4, kh, kw, si, 4).transpose(0, 2, 3, 4, 5, 1)
    return np.ascontiguousarray(blocks).reshape(-1)


def bias_values(graph: Graph, op: Op, index: int) -> np.ndarray | None:
    """The optional bias input's values, or None when absent (-1 or missing)."""
    t = op.inputs[index] if len(op.inputs) > index else -1
    return const_f32(graph, t).reshape(-1) if t >= 0 else None


def bias_vec4(bias: np.ndarray | None, channels: int, so_pad: int) -> np.ndarray:
    """Bias as one vec4 per output slice, so_pad slices (zeros when absent and in padding lanes)."""
    out = np.zeros(so_pad * 4, np.float32)
    if bias is not None:
        out[:channels] = bias[:channels]
    return out


def lines(items: list[str], indent: int) -> Code:
    return Code(("\n" + " " * indent).join(items))


@dataclass
class ConvGeometry:
    """Everything a conv dispatch bakes.

    pad_top/pad_left may be any non-negative numbers (explicit padding)."""

    batch: int
    ih: int
    iw: int
    ic: int
    oh: int
    ow: int
    oc: int
    kh: int
    kw: int
    sh: int = 1
    sw: int = 1
    dh: int = 1
    dw: int = 1
    pad_top: int = 0
    pad_left: int = 0

    @property
    def si(self) -> int:
        return slices(self.ic)

    @property
    def so(self) -> int:
        return slices(self.oc)

    def params(self) -> dict[str, int]:
        """The numbers every conv-family template may bake (each uses the ones it needs)."""
        return {"KH": self.kh, "KW": self.kw, "SH": self.sh, "SW": self.sw, "DH": self.dh, "DW": self.dw,
                "PT": self.pad_top, "PL": self.pad_left, "IH": self.ih, "IW": self.iw, "SI": self.si,
                "PLANE": self.ih * self.iw, "SO": self.so, "OH": self.oh, "OW": self.ow}

    def spec(self, shader: str, params: dict, bindings: list[Binding], grid: tuple[int, int, int],
             epilogue: list[Code], label: str, **fields: object) -> KernelSpec:
        """A conv-family dispatch: the geometry's numbers baked alongside the variant's own."""
        return KernelSpec(shader, {**self.params(), **params}, bindings, grid=grid, epilogue=epilogue,
                          out_channels=self.oc, label=label, **fields)  # type: ignore[arg-type]


def conv_options(op: Op) -> tuple[int, int, int, int, int]:
    """(padding, stride_h, stride_w, dilation_h, dilation_w) with TFLite's defaults."""
    return (
        int(op.opt("padding", SAME) or 0),
        int(op.opt("stride_h", 1) or 0),
        int(op.opt("stride_w", 1) or 0),
        int(op.opt("dilation_h_factor", 1) or 1),
        int(op.opt("dilation_w_factor", 1) or 1),
    )


def spatial(op: Op, graph: Graph, kh: int, kw: int) -> tuple[int, int, int, int]:
    """(pad_top, pad_left, out_h, out_w) as TFLite computes them; `explicit_padding` (top, bottom, left,
    right), set by the PAD-merging pass on VALID convs, pads the input before the VALID conv."""
    padding, sh, sw, dh, dw = conv_options(op)
    _, ih, iw, _ = bhwc(graph, op.inputs[0])
    explicit = op.opt("explicit_padding")
    if explicit is not None:
        top, bottom, left, right = (int(v) for v in explicit)
        return (
            top,
            left,
            out_size(VALID, ih + top + bottom, kh, sh, dh),
            out_size(VALID, iw + left + right, kw, sw, dw),
        )
    oh, ow = out_size(padding, ih, kh, sh, dh), out_size(padding, iw, kw, sw, dw)
    return pad_before(padding, ih, kh, sh, dh, oh), pad_before(padding, iw, kw, sw, dw, ow), oh, ow


def geometry(op: Op, graph: Graph) -> ConvGeometry:
    b, ih, iw, ic = bhwc(graph, op.inputs[0])
    _, oh, ow, oc = bhwc(graph, op.outputs[0])
    _, kh, kw, _ = graph.tensors[op.inputs[1]].shape
    _, sh, sw, dh, dw = conv_options(op)
    pt, pl, _, _ = spatial(op, graph, kh, kw)
    return ConvGeometry(b, ih, iw, ic, oh, ow, oc, kh, kw, sh, sw, dh, dw, pt, pl)


def check_spatial(op: Op, graph: Graph, kh: int, kw: int) -> str | None:
    """Stride/dilation sanity and the TFLite output size for the op's padding mode."""
    padding, sh, sw, dh, dw = conv_options(op)
    if min(sh, sw, dh, dw) < 1:
        return f"stride ({sh}, {sw}) and dilation ({dh}, {dw}) must be >= 1"
    if padding not in (SAME, VALID):
        return f"padding mode {padding} is not supported"
    explicit = op.opt("explicit_padding")
    if explicit is not None and (len(explicit) != 4 or min(int(v) for v in explicit) < 0):
        return f"explicit padding {explicit} must be 4 non-negative numbers"
    b = bhwc(graph, op.inputs[0])[0]
    ob, oh, ow, _ = bhwc(graph, op.outputs[0])
    _, _, want_h, want_w = spatial(op, graph, kh, kw)
    if (ob, oh, ow) != (b, want_h, want_w) or min(want_h, want_w) < 1:
        shape = graph.tensors[op.outputs[0]].shape
        return f"output shape {shape} does not match the expected {(b, want_h, want_w)}"
    return None


def common_checks(op: Op, graph: Graph, min_inputs: int = 2) -> str | None:
    """Shared by the conv family: float32 rank-4 activations, constant weights/bias, supported activation."""
    if len(op.inputs) < min_inputs or len(op.outputs) != 1:
        return "unexpected number of inputs/outputs"
    reason = float_tensors(op, graph) or activation_supported(op)
    if reason:
        return reason
    x, w = op.inputs[0], op.inputs[1]
    if is_const(graph, x):
        return "constant input tensors are not supported"
    for t in (x, w, op.outputs[0]):
        if len(graph.tensors[t].shape) != 4:
            return f"tensor {graph.tensors[t].name!r} must have rank 4"
    if not is_const(graph, w):
        return "weights must be constant"
    bias = op.inputs[2] if len(op.inputs) > 2 else -1
    if bias >= 0 and not is_const(graph, bias):
        return "bias must be constant"
    return None


class Conv2DKernel:
    ops = ("CONV_2D",)
    prologue_leaves_from = 3  # after input, weights, bias (kernels/prologue.py)

    def supports(self, op: Op, graph: Graph) -> str | None:
        reason = common_checks(op, graph)
        if reason:
            return reason
        o, kh, kw, fi = graph.tensors[op.inputs[1]].shape
        ic = bhwc(graph, op.inputs[0])[3]
        oc = bhwc(graph, op.outputs[0])[3]
        if o != oc or fi < 1 or ic % fi or o % (ic // fi):
            return (
                f"weights {graph.tensors[op.inputs[1]].shape} do not match input channels {ic} / output {oc}"
            )
        if op.opt("prologue"):
            reason = prologue_reason(op, graph, self.prologue_leaves_from)
            if reason:
                return reason
            if not _is_1x1(geometry(op, graph)):
                return "an input prologue is only fused into 1x1 stride-1 unpadded convs"
        bias = op.inputs[2] if len(op.inputs) > 2 else -1
        if bias >= 0 and graph.tensors[bias].size != oc:
            return "bias size does not match output channels"
        return check_spatial(op, graph, kh, kw)

    def integer_requantize(self, op: Op, graph: Graph) -> Code | None:
        """A fully int8 CONV_2D (int8_requant) sums exact integers: its output stage is LiteRT's."""
        rq = int8_requant(op, graph)
        return requant_code(op, rq, graph.tensors[op.outputs[0]]) if rq is not None else None

    def build(self, op: Op, graph: Graph) -> Lowering:
        g = geometry(op, graph)
        rq = int8_requant(op, graph)
        w = const_f32(graph, op.inputs[1]) if rq is None else rq.weights
        assert w is not None
        macs = g.batch * g.oh * g.ow * g.oc * g.kh * g.kw * w.shape[3]
        w = dense_weights(w, g.ic)
        bias = bias_values(graph, op, 2) if rq is None else rq.bias
        reader = input_reader(op, graph) if op.opt("prologue") else None
        # an exact int8 conv applies its activation as the output stage's clamp (requant_code)
        epilogue = activation(op) if rq is None else []
        return [conv_variants(g, w, bias, op.inputs[0], op.outputs[0], epilogue, op.code, macs, reader=reader,
                              rq=rq)]


INT8_EXACT = "int8: exact integer sums, LiteRT's output stage"


def int8_requant(op: Op, graph: Graph) -> Int8Requant | None:
    """LiteRT's integer CONV_2D (int8 input and output, symmetric int8 weights per tensor or per output channel,
    int32 bias, no activation, RELU, RELU_N1_TO_1 or RELU6; its builtin kernel runs im2col then ruy's GEMM), where
    f32 sums stay exact; None otherwise (computed in float, rounded once: fake_quant). Not with an input prologue
    (a fused elementwise op computes the input in float)."""
    return None if op.opt("prologue") else weights_requant(op, graph, activations=CLAMPED_ACTIVATIONS)


def tap_input(expr: str, rq: Int8Requant | None) -> str:
    """An input vec4 as the taps read it: in storage precision, or for an exact int8 conv (rq) the integers
    q - zero point as f32 (the GPU holds (q - zero point) * scale; padding reads 0, LiteRT's zero point)."""
    return f"S4({expr})" if rq is None else f"round(vec4<f32>({expr}) * {codegen.literal(rq.inverse_scales[0])})"


def tap_zero(rq: Int8Requant | None) -> str:
    return "S4(0.0)" if rq is None else "vec4<f32>(0.0)"


def tap_product(j: int, t: int, rq: Int8Requant | None) -> str:
    """acc_j_t += weight block w_j times input s_t: in storage precision (mat_taps), or for an exact int8 conv
    in f32 (integer products and sums below 2^24: exact)."""
    if rq is None:
        return f"acc_{j}_{t} += vec4<f32>(w_{j} * s_{t});"
    return f"acc_{j}_{t} += mat4x4<f32>(w_{j}) * s_{t};"


def conv_int8_extras(rq: Int8Requant | None, channels: int, so_pad: int) -> tuple[list[Binding], dict[str, object]]:
    """The bindings (per-channel multipliers) and spec fields (the output stage's functions) an exact int8 conv
    adds; nothing for a float one."""
    if rq is None:
        return [], {}
    table = [requant_binding(rq, channels, so_pad)] if rq.multipliers.size > 1 else []
    return table, {"functions": [MULTIPLY_BY_QUANTIZED_MULTIPLIER]}


def _is_1x1(g: ConvGeometry) -> bool:
    return g.kh == g.kw == 1 and g.sh == g.sw == 1 and g.pad_top == g.pad_left == 0 and (g.oh, g.ow) == (g.ih, g.iw)


def dense_weights(w: np.ndarray, ic: int) -> np.ndarray:
    """Grouped conv (filter depth < input channels) as a dense conv with zero cross-group weights."""
    o, kh, kw, fi = w.shape
    if fi == ic:
        return w
    groups = ic // fi
    per = o // groups
    dense = np.zeros((o, kh, kw, ic), np.float32)
    for gi in range(groups):
        dense[gi * per : (gi + 1) * per, :, :, gi * fi : (gi + 1) * fi] = w[gi * per : (gi + 1) * per]
    return dense


# -- decomposed conv-family dispatches -------------------------------------------------------------------------
# A tile is XT adjacent outputs (columns of one row, or pixels of the flattened plane for the 1x1 kernel) x ST
# output slices; its `split` invocations share the input slices (each takes every split-th one) and combine
# their sums (codegen.lane_reduce). `tile_coords` maps the tile index to (ob, oy, ox0 or p0, os0).


def tile_counts(g: ConvGeometry, tile: tuple[int, int], flat: bool) -> tuple[int, int]:
    """(tiles along x or the flattened plane, tiles in all) for an XT x ST tile."""
    xt, st = tile
    nx = -(-(g.oh * g.ow if flat else g.ow) // xt)
    return nx, nx * (1 if flat else g.oh) * -(-g.so // st) * g.batch


def tile_coords(g: ConvGeometry, tile: tuple[int, int], flat: bool) -> Code:
    """WGSL giving a tile's first output: batch ob, row oy (or flat pixel p0), column ox0, slice os0. Tiles past
    the end get a clamped batch, so their reads stay in bounds; their stores are dropped."""
    xt, st = tile
    nx, _ = tile_counts(g, tile, flat)
    sg = -(-g.so // st)
    if flat:
        code = [f"let p0 = tile % {nx}u * {xt}u;", f"let rest = tile / {nx}u;"]
    else:
        code = [f"let ox0 = tile % {nx}u * {xt}u;", f"let oy = tile / {nx}u % {g.oh}u;",
                f"let rest = tile / {nx * g.oh}u;"]
    code += [f"let os0 = rest % {sg}u * {st}u;", f"let ob = min(rest / {sg}u, {g.batch - 1}u);"]
    return lines(code, 2)


def accumulators(tile: tuple[int, int]) -> list[str]:
    return [f"acc_{j}_{t}" for j in range(tile[1]) for t in range(tile[0])]


def mat_taps(tile: tuple[int, int], rq: Int8Requant | None = None) -> list[str]:
    """Every weight block w_j times every input s_t of a tile: multiplied in storage precision (f16 in fp16
    mode: 4-term partial sums), accumulated in f32; exact int8 convs (rq) multiply in f32."""
    return [tap_product(j, t, rq) for j in range(tile[1]) for t in range(tile[0])]


def acc_init(tile: tuple[int, int], bias: str = "vec4<f32>(bias[os0 + {j}u])") -> Code:
    """Accumulators start at the bias on the invocation that stores (k == 0), at zero on the others."""
    return lines([f"var acc_{j}_{t} = select(vec4<f32>(0.0), {bias.format(j=j)}, k == 0u);"
                  for j in range(tile[1]) for t in range(tile[0])], 2)


def conv_family_spec(g: ConvGeometry, shader: str, d: Decomposition, params: dict, bindings: list[Binding],
                     epilogue: list[Code], label: str, flat: bool = False, **fields: object) -> KernelSpec:
    """A decomposed conv-family dispatch: tile mapping, split reduction and workgroup layout baked in."""
    _, tiles = tile_counts(g, d.tile, flat)
    shared, dispatch = tiling.split_params(d, tiles, accumulators(d.tile))
    params = {**shared, "TILE": tile_coords(g, d.tile, flat), "XT": d.tile[0], "ST": d.tile[1],
              "ACC_INIT": acc_init(d.tile), **params}
    return g.spec(shader, params, bindings, (tiles * d.split, 1, 1), epilogue,
                  f"{label} [{d.describe()}]", workgroup=(d.invocations_per_workgroup, 1, 1), dispatch=dispatch,
                  **fields)


def conv_family_variants(g: ConvGeometry, family: str, tiles: list[tuple[int, int]], reduction: int, macs: int,
                         make: Callable[[Decomposition], KernelSpec], flat: bool = False, code: tuple[str, ...] = (),
                         step_cost: Callable[[tuple[int, int]], float] = tiling.mat_step) -> Variants:
    """The Variants of a conv-family dispatch over the given tile shapes: splits over `reduction` input slices,
    each step (one slice of one tap) costing step_cost(tile)."""
    return tiling.variants(family, g.params(), tiles, reduction, lambda t: tile_counts(g, t, flat)[1], step_cost,
                           make, macs, code, repeats=g.kh * g.kw)


def conv_variants(
    g: ConvGeometry,
    w: np.ndarray,
    bias: np.ndarray | None,
    src: int,
    dst: int,
    epilogue: list[Code],
    label: str,
    macs: int,
    reader: tuple[Code, list[Binding], str] | None = None,
    rq: Int8Requant | None = None,
) -> Variants:
    """Pick the kernel for this geometry. w is dense [O, KH, KW, I]; bias [O] or None; reader: the input's load
    function when it has a prologue (kernels/prologue.py; 1x1 only); rq: an exact int8 conv (integer weights and
    bias, int8_requant)."""
    if rq is not None:
        label = f"{label} ({INT8_EXACT})"
    if _is_1x1(g):
        return _conv_1x1(g, w, bias, src, dst, epilogue, label, macs, reader, rq)
    if reader is not None:
        raise ValueError("an input prologue needs the 1x1 kernel")
    if g.si == 1 and g.kh * g.kw <= 49:
        return _conv_first(g, w, bias, src, dst, epilogue, label, macs, rq)
    return _conv_general(g, w, bias, src, dst, epilogue, label, macs, rq)


def column_reads(g: ConvGeometry, xt: int) -> Code:
    """For XT adjacent output columns: the input column (ix_t), whether it lies inside the input (ok_t) and
    the clamped column to read (cx_t); the general conv and depthwise templates provide ix0."""
    return lines([f"let ix_{t} = ix0 + {t * g.sw}; let ok_{t} = ix_{t} >= 0 && ix_{t} < {g.iw}; "
                  f"let cx_{t} = u32(clamp(ix_{t}, 0, {g.iw - 1}));" for t in range(xt)], 6)


def _tile_shapes(outputs: int, so: int, xts: tuple[int, ...] = (4, 2, 1), sts: tuple[int, ...] = (2, 1),
                 ) -> list[tuple[int, int]]:
    """XT x ST tiles that fit `outputs` outputs along x and `so` output slices (1 always fits)."""
    return [(xt, st) for xt in xts for st in sts if (xt == 1 or outputs >= xt) and (st == 1 or so >= st)]


def _bindings(
    g: ConvGeometry, w: np.ndarray, bias: np.ndarray | None, so_pad: int, src: int, dst: int,
    rq: Int8Requant | None = None,
) -> list[Binding]:
    """An exact int8 conv keeps its integer bias in f32 (f16 holds integers only to 2048) and adds its
    per-channel multipliers."""
    table, _ = conv_int8_extras(rq, g.oc, so_pad)
    return [
        Binding("src", tensor=src),
        Binding("weights", data=weight_blocks(w, so_pad), element="SM"),
        Binding("bias", data=bias_vec4(bias, g.oc, so_pad), element="S4" if rq is None else "vec4<f32>"),
        *table,
        Binding("dst", tensor=dst, writable=True),
    ]


def _stores(tile: tuple[int, int], x0: str = "ox0", y: str = "oy") -> Code:
    xt, st = tile
    return lines([f"store(acc_{j}_{t}, ob, {y}, {x0} + {t}u, os0 + {j}u);" for j in range(st) for t in range(xt)],
                 4)


def _so_pad(g: ConvGeometry, st: int) -> int:
    return -(-g.so // st) * st


def _conv_general(g: ConvGeometry, w: np.ndarray, bias: np.ndarray | None, src: int, dst: int, epilogue: list[Code],
                  label: str, macs: int, rq: Int8Requant | None = None) -> Variants:
    wstride = g.kh * g.kw * g.si  # blocks between consecutive output slices

    def make(d: Decomposition) -> KernelSpec:
        xt, st = d.tile
        taps = [f"let s_{t} = select({tap_zero(rq)}, {tap_input(f'src[si + cx_{t}]', rq)}, ok_{t});"
                for t in range(xt)]
        taps += [f"let w_{j} = weights[wi + {j * wstride}u];" for j in range(st)]
        taps += mat_taps(d.tile, rq)
        params = {"COLS": column_reads(g, xt), "TAPS": lines(taps, 8), "STORE": _stores(d.tile),
                  "SPLIT_PLANE": d.split * g.ih * g.iw}
        return conv_family_spec(g, "conv2d", d, params, _bindings(g, w, bias, _so_pad(g, st), src, dst, rq),
                                epilogue, f"{label} {g.kh}x{g.kw} general",
                                **conv_int8_extras(rq, g.oc, _so_pad(g, st))[1])

    return conv_family_variants(g, "conv2d", _tile_shapes(g.ow, g.so), g.si, macs, make, code=_int8_code(rq))


def _conv_1x1(g: ConvGeometry, w: np.ndarray, bias: np.ndarray | None, src: int, dst: int, epilogue: list[Code],
              label: str, macs: int, reader: tuple[Code, list[Binding], str] | None = None,
              rq: Int8Requant | None = None) -> Variants:
    plane = g.oh * g.ow

    def make(d: Decomposition) -> KernelSpec:
        xt, st = d.tile
        pix = [f"let p_{t} = min(p0 + {t}u, {plane - 1}u);" for t in range(xt)]
        if reader is None:
            taps = [f"let s_{t} = {tap_input(f'src[si + p_{t}]', rq)};" for t in range(xt)]
        else:  # fused elementwise ops evaluated as the input is loaded
            taps = [f"let s_{t} = S4(load_src(si + p_{t}, ob, sl));" for t in range(xt)]
        taps += [f"let w_{j} = weights[wi + {j * g.si}u];" for j in range(st)]
        taps += mat_taps(d.tile, rq)
        # pixels past the plane end map to row oh (or beyond): store() drops them by its oy bound
        store = [f"store(acc_{j}_{t}, ob, (p0 + {t}u) / {g.ow}u, (p0 + {t}u) % {g.ow}u, os0 + {j}u);"
                 for j in range(st) for t in range(xt)]
        params = {"PIX": lines(pix, 2), "TAPS": lines(taps, 4), "STORE": lines(store, 4),
                  "SPLIT_PLANE": d.split * plane}
        bindings = _bindings(g, w, bias, _so_pad(g, st), src, dst, rq)
        if reader is not None:
            bindings = [*reader[1], *bindings[1:]]
        fields = conv_int8_extras(rq, g.oc, _so_pad(g, st))[1] or {"functions": [reader[0]] if reader else []}
        return conv_family_spec(g, "conv2d_1x1", d, params, bindings, epilogue,
                                f"{label} 1x1" + (reader[2] if reader else ""), flat=True, **fields)

    return conv_family_variants(g, "conv2d_1x1", _tile_shapes(plane, g.so), g.si, macs, make, flat=True,
                                code=(reader[0],) if reader else _int8_code(rq))


def _conv_first(g: ConvGeometry, w: np.ndarray, bias: np.ndarray | None, src: int, dst: int, epilogue: list[Code],
                label: str, macs: int, rq: Int8Requant | None = None) -> Variants:
    """One input slice: all taps unrolled; each input vec4 feeds XT x ST accumulators (no split: the reduction
    is at most 49 taps of one slice)."""

    def make(d: Decomposition) -> KernelSpec:
        xt, st = d.tile
        taps: list[str] = []
        for ky in range(g.kh):
            taps.append(
                f"let iy_{ky} = iy0 + {ky * g.dh}; let oky_{ky} = iy_{ky} >= 0 && iy_{ky} < {g.ih}; "
                f"let ry_{ky} = base + u32(clamp(iy_{ky}, 0, {g.ih - 1})) * {g.iw}u;"
            )
        for t in range(xt):
            for kx in range(g.kw):
                taps.append(
                    f"let ix_{t}_{kx} = ix0 + {t * g.sw + kx * g.dw}; "
                    f"let okx_{t}_{kx} = ix_{t}_{kx} >= 0 && ix_{t}_{kx} < {g.iw}; "
                    f"let cx_{t}_{kx} = u32(clamp(ix_{t}_{kx}, 0, {g.iw - 1}));"
                )
        for ky in range(g.kh):
            for kx in range(g.kw):
                tap = [
                    f"let s_{t} = select({tap_zero(rq)}, {tap_input(f'src[ry_{ky} + cx_{t}_{kx}]', rq)}, "
                    f"oky_{ky} && okx_{t}_{kx});"
                    for t in range(xt)
                ]
                for j in range(st):
                    tap.append(f"let w_{j} = weights[wi + {(j * g.kh + ky) * g.kw + kx}u];")
                    tap += [tap_product(j, t, rq) for t in range(xt)]
                taps.append("{ " + " ".join(tap) + " }")
        params = {"TAPS": lines(taps, 2), "STORE": _stores(d.tile)}
        return conv_family_spec(g, "conv2d_first", d, params, _bindings(g, w, bias, _so_pad(g, st), src, dst, rq),
                                epilogue, f"{label} {g.kh}x{g.kw} first-layer",
                                **conv_int8_extras(rq, g.oc, _so_pad(g, st))[1])

    return conv_family_variants(g, "conv2d_first", _tile_shapes(g.ow, g.so, (2, 1), (4, 2, 1)), 1, macs, make,
                                code=_int8_code(rq))


def _int8_code(rq: Int8Requant | None) -> tuple[str, ...]:
    """Tuning-cache key code of an exact int8 conv: its taps differ from the float conv's of the same shape."""
    return () if rq is None else (INT8_EXACT,)


KERNEL = Conv2DKernel()
