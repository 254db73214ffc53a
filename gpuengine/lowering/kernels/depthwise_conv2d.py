"""DEPTHWISE_CONV_2D: a general kernel plus a fully unrolled 3x3 kernel for stride 1 and stride 2.

TFLite semantics: output channel oc = ic * M + m reads input channel oc // M (M = depth multiplier, taken
from the shapes: out_c / in_c) with weight [0, ky, kx, oc]. Weights are re-laid out once into one vec4 per
(out_slice, ky, kx), so a tap is `acc += w * src` on whole slices. With M == 1 an output slice reads the
same input slice; otherwise lanes are gathered (splatted when M % 4 == 0: a slice then has one source).

* depthwise:     any kernel, stride, dilation, multiplier; XT adjacent output columns per invocation.
* depthwise_3x3: 3x3, dilation 1, stride 1 or 2, M == 1: every tap unrolled, each input column of the
                 2-output window loaded once (4 columns for stride 1, 5 for stride 2, instead of 6).
Both come as decompositions of 2 or 1 output columns per invocation (kernels/tiling.py): a big GPU takes the
single column when the layer is too small to fill it otherwise.

A fully int8 depthwise conv (int8_requant) reads its input as the integers q - zero point, sums integer products in
f32 (exact) and requantizes as LiteRT's builtin kernel (the Q31 multiplier per channel, the shift's ties up).
"""

from __future__ import annotations

import numpy as np

from ...model.ir import Graph, Op
from .. import codegen
from ..layout import slices
from . import tiling
from .base import Binding, Code, Decomposition, KernelSpec, Lowering, Variants
from .common import (
    CLAMPED_ACTIVATIONS,
    Int8Requant,
    activation,
    bhwc,
    const_f32,
    requant_code,
    weights_requant,
)
from .conv2d import (
    INT8_EXACT,
    ConvGeometry,
    bias_values,
    bias_vec4,
    check_spatial,
    column_reads,
    common_checks,
    conv_family_spec,
    conv_family_variants,
    conv_int8_extras,
    geometry,
    lines,
    tap_input,
    tap_zero,
)


def tap_weights(w: np.ndarray, oc: int) -> np.ndarray:
    """[1, KH, KW, OC] -> flat f32 vec4s [SO][KH][KW] (padding lanes zero)."""
    _, kh, kw, _ = w.shape
    so = slices(oc)
    padded = np.zeros((kh, kw, so * 4), np.float32)
    padded[..., :oc] = w.reshape(kh, kw, -1)[..., :oc]
    return np.ascontiguousarray(padded.reshape(kh, kw, so, 4).transpose(2, 0, 1, 3)).reshape(-1)


def load_fn(g: ConvGeometry, mult: int) -> Code:
    """`load(ob, iy, ix, os)`: the input vec4 feeding output slice os at pixel (iy, ix), in storage precision."""
    plane = g.ih * g.iw
    numbers = {"IN_VOLUME": g.si * plane, "IW": g.iw, "PLANE": plane, "MULT": mult, "IC_LAST": g.ic - 1}
    piece = ("depthwise/load.wgsl" if mult == 1 else "depthwise/load_multiplier4.wgsl" if mult % 4 == 0
             else "depthwise/load_lanes.wgsl")
    return Code(codegen.fill(piece, numbers) + "\n")


class DepthwiseConv2DKernel:
    ops = ("DEPTHWISE_CONV_2D",)

    def supports(self, op: Op, graph: Graph) -> str | None:
        reason = common_checks(op, graph)
        if reason:
            return reason
        shape = graph.tensors[op.inputs[1]].shape
        ic = bhwc(graph, op.inputs[0])[3]
        oc = bhwc(graph, op.outputs[0])[3]
        if shape[0] != 1 or shape[3] != oc or oc % ic:
            return f"weights {shape} do not fit input channels {ic} and output channels {oc}"
        bias = op.inputs[2] if len(op.inputs) > 2 else -1
        if bias >= 0 and graph.tensors[bias].size != oc:
            return "bias size does not match output channels"
        return check_spatial(op, graph, shape[1], shape[2])

    def integer_requantize(self, op: Op, graph: Graph) -> Code | None:
        """A fully int8 depthwise conv (int8_requant) sums exact integers: its output stage is LiteRT's."""
        rq = int8_requant(op, graph)
        return requant_code(op, rq, graph.tensors[op.outputs[0]]) if rq is not None else None

    def build(self, op: Op, graph: Graph) -> Lowering:
        g = geometry(op, graph)
        rq = int8_requant(op, graph)
        w = const_f32(graph, op.inputs[1]) if rq is None else rq.weights
        bias = bias_values(graph, op, 2) if rq is None else rq.bias
        assert w is not None
        epilogue = activation(op) if rq is None else []  # exact int8: the activation is the output stage's clamp
        return [depthwise_variants(g, w, bias, op.inputs[0], op.outputs[0], epilogue, op.code, rq)]


def int8_requant(op: Op, graph: Graph) -> Int8Requant | None:
    """LiteRT's integer DEPTHWISE_CONV_2D (int8 input and output, symmetric int8 weights per tensor or per output
    channel, int32 bias, no activation, RELU, RELU_N1_TO_1 or RELU6), where f32 sums stay exact; None otherwise
    (computed in float, rounded once: fake_quant)."""
    return weights_requant(op, graph, channel_axis=3, activations=CLAMPED_ACTIVATIONS)


def _product(w: str, v: str, rq: Int8Requant | None) -> str:
    """w * v accumulated in f32: in storage precision, or for an exact int8 conv (integers) in f32."""
    return f"vec4<f32>({w} * {v})" if rq is None else f"vec4<f32>({w}) * {v}"


def depthwise_variants(
    g: ConvGeometry,
    w: np.ndarray,
    bias: np.ndarray | None,
    src: int,
    dst: int,
    epilogue: list[Code],
    label: str,
    rq: Int8Requant | None = None,
) -> Variants:
    """Pick the kernel for this geometry (pads are parameters, as for CONV_2D); tiles of 2 or 1 output columns,
    never split (a reduction of kh x kw taps). rq: an exact int8 depthwise conv (integer weights and bias)."""
    mult = g.oc // g.ic
    table, fields = conv_int8_extras(rq, g.oc, g.so)
    bindings = [
        Binding("src", tensor=src),
        Binding("weights", data=tap_weights(w, g.oc)),
        Binding("bias", data=bias_vec4(bias, g.oc, g.so), element="S4" if rq is None else "vec4<f32>"),
        *table,
        Binding("dst", tensor=dst, writable=True),
    ]
    if rq is not None:
        label = f"{label} ({INT8_EXACT})"
    unrolled = g.kh == g.kw == 3 and g.dh == g.dw == 1 and g.sh == g.sw and g.sh in (1, 2) and mult == 1
    family = "depthwise_3x3" if unrolled else "depthwise"

    def make(d: Decomposition) -> KernelSpec:
        xt = d.tile[0]
        params = {"LOAD": load_fn(g, mult), "STORE": lines([f"store(acc_0_{t}, ob, oy, ox0 + {t}u, os0);"
                                                            for t in range(xt)], 4)}
        if unrolled:
            s = g.sh
            ncols = (xt - 1) * s + 3
            # S4(...): small weights are baked into the shader as f32 literals (codegen.is_baked)
            taps = [f"let w{k} = S4(weights[os0 * 9u + {k}u]);" for k in range(9)]
            taps += [
                f"let ix{c} = ix_base + {c}; let okx{c} = ix{c} >= 0 && ix{c} < {g.iw}; "
                f"let cx{c} = u32(clamp(ix{c}, 0, {g.iw - 1}));"
                for c in range(ncols)
            ]
            for r in range(3):
                taps.append(
                    f"let iy{r} = iy_base + {r}; let oky{r} = iy{r} >= 0 && iy{r} < {g.ih}; "
                    f"let ry{r} = base + u32(clamp(iy{r}, 0, {g.ih - 1})) * {g.iw}u;"
                )
                taps += [
                    f"let v{r}_{c} = select({tap_zero(rq)}, {tap_input(f'src[ry{r} + cx{c}]', rq)}, "
                    f"oky{r} && okx{c});"
                    for c in range(ncols)
                ]
                taps += [f"acc_0_{t} += {_product(f'w{r * 3 + kx}', f'v{r}_{t * s + kx}', rq)};"
                         for t in range(xt) for kx in range(3)]
            params["TAPS"] = lines(taps, 2)
            return conv_family_spec(g, family, d, params, bindings, epilogue, f"{label} 3x3 s{s}", **fields)
        loads = [f"select({tap_zero(rq)}, {tap_input(f'load(ob, u32(iy), cx_{t}, os0)', rq)}, ok_{t})"
                 for t in range(xt)]
        taps = [f"acc_0_{t} += {_product('w', v, rq)};" for t, v in enumerate(loads)]
        params.update(COLS=column_reads(g, xt), TAPS=lines(taps, 6))
        return conv_family_spec(g, family, d, params, bindings, epilogue, f"{label} {g.kh}x{g.kw} general",
                                **fields)

    macs = g.batch * g.oh * g.ow * g.oc * g.kh * g.kw
    return conv_family_variants(g, family, [(xt, 1) for xt in (2, 1) if xt == 1 or g.ow >= 2], 1, macs, make,
                                code=() if rq is None else (INT8_EXACT,),
                                step_cost=lambda t: t[0] * tiling.LOAD + tiling.LOAD + t[0] * 4)


KERNEL = DepthwiseConv2DKernel()
