"""AVERAGE_POOL_2D and MAX_POOL_2D on PHWC4: one output vec4 per invocation, windows clamped to the input.

TFLite semantics: implicit SAME padding never contributes (the average divides by the count of valid
elements, max ignores it), and the fused activation is applied as a clamp range (CalculateActivationRange):
TANH / SIGN_BIT pooling activations clamp nothing. The padding numbers are parameters of `pool_spec`, so a
pass that knows better padding (e.g. a merged PAD) can call it directly. A window that covers the whole input
with a large extent (global pooling) lowers to the workgroup-parallel reduction instead.
"""

from __future__ import annotations

from ...model.ir import Graph, Op
from ..layout import slices
from .base import Binding, Code, KernelSpec, Lowering
from .common import activation, bhwc, float_tensors
from .reduce import FLT_MAX, reduce_variants

# op -> (declare the accumulator, fold `v` into it, set `value`): the statements pool.wgsl runs
_KINDS = {
    "AVERAGE_POOL_2D": ("var acc = vec4<f32>(0.0);", "acc = acc + v;", "var value = acc / count;"),
    "MAX_POOL_2D": (f"var acc = vec4<f32>({-FLT_MAX});", "acc = max(acc, v);", "var value = acc;"),
}
_GLOBAL = {"AVERAGE_POOL_2D": "MEAN", "MAX_POOL_2D": "REDUCE_MAX"}


def out_size_and_pad(size: int, filt: int, stride: int, padding: int) -> tuple[int, int]:
    """TFLite's output size and leading padding for padding 0 = SAME, 1 = VALID (dilation 1)."""
    out = (size + stride - 1) // stride if padding == 0 else (size - filt + stride) // stride
    return out, max(((out - 1) * stride + filt - size) // 2, 0)


def clamp_activation(code: int, op: Op) -> list[Code] | str:
    """Pooling applies fused activations as a clamp range: NONE/RELU/RELU_N1_TO_1/RELU6 clamp, TANH and
    SIGN_BIT clamp nothing (TFLite CalculateActivationRange)."""
    if code in (0, 1, 2, 3):
        return activation(op)
    if code in (4, 5):
        return []
    return f"fused activation {code} is not supported"


Shape4 = tuple[int, int, int, int]


def pool_spec(steps: tuple[str, str, str], src: int, dst: int, in_bhwc: Shape4, out_bhwc: Shape4,
              filt: tuple[int, int], stride: tuple[int, int], pad: tuple[int, int], epilogue: list[Code],
              label: str, side_outputs: tuple[Binding, ...] = ()) -> KernelSpec:
    """One pooling dispatch. steps: the (init, accumulate, finish) statements of pool.wgsl; pad = (top, left)
    implicit padding, excluded from the window; side_outputs: extra writable bindings `finish` stores to."""
    b, h, w, c = in_bhwc
    _, oh, ow, _ = out_bhwc
    init, accumulate, finish = steps
    baked = {"S": slices(c), "H": oh, "W": ow, "IN_H": h, "IN_W": w, "FH": filt[0], "FW": filt[1],
             "STRIDE_H": stride[0], "STRIDE_W": stride[1], "PAD_T": pad[0], "PAD_L": pad[1],
             "INIT": Code(init), "ACCUMULATE": Code(accumulate), "FINISH": Code(finish)}
    bindings = [Binding("src", tensor=src), Binding("dst", tensor=dst, writable=True), *side_outputs]
    return KernelSpec("pool", baked, bindings, grid=(ow, oh, b * slices(c)), epilogue=epilogue, out_channels=c,
                      label=label)


class PoolingKernel:
    ops = tuple(_KINDS)

    def supports(self, op: Op, graph: Graph) -> str | None:
        if len(op.inputs) != 1 or len(op.outputs) != 1:
            return "expects 1 input and 1 output"
        reason = float_tensors(op, graph)
        if reason:
            return reason
        shape = graph.tensors[op.inputs[0]].shape
        if len(shape) != 4:
            return f"input has rank {len(shape)}, pooling needs rank 4"
        act = clamp_activation(int(op.opt("fused_activation_function", 0) or 0), op)
        if isinstance(act, str):
            return act
        padding = int(op.opt("padding", 0) or 0)
        if padding not in (0, 1):
            return f"padding {padding} is not SAME or VALID"
        fh, fw = int(op.opt("filter_height", 1)), int(op.opt("filter_width", 1))
        sh, sw = int(op.opt("stride_h", 1)), int(op.opt("stride_w", 1))
        if min(fh, fw, sh, sw) < 1:
            return f"filter {fh}x{fw} / stride {sh}x{sw} must be positive"
        b, h, w, c = shape
        want = (b, out_size_and_pad(h, fh, sh, padding)[0], out_size_and_pad(w, fw, sw, padding)[0], c)
        got = graph.tensors[op.outputs[0]].shape
        if tuple(got) != want:
            return f"output shape {got} differs from the pooled shape {want}"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        src, dst = op.inputs[0], op.outputs[0]
        b, h, w, c = bhwc(graph, src)
        fh, fw = int(op.opt("filter_height", 1)), int(op.opt("filter_width", 1))
        sh, sw = int(op.opt("stride_h", 1)), int(op.opt("stride_w", 1))
        padding = int(op.opt("padding", 0) or 0)
        oh, pad_t = out_size_and_pad(h, fh, sh, padding)
        ow, pad_l = out_size_and_pad(w, fw, sw, padding)
        epilogue = clamp_activation(int(op.opt("fused_activation_function", 0) or 0), op)
        assert not isinstance(epilogue, str), epilogue
        covers_all = oh == ow == 1 and fh - pad_t >= h and fw - pad_l >= w
        if covers_all:  # global pooling: a reduction, which a big GPU splits over many invocations per output
            return [reduce_variants(_GLOBAL[op.code], src, dst, (b, h, w, c), [1, 2], True, epilogue, op.code)]
        return [pool_spec(_KINDS[op.code], src, dst, (b, h, w, c), (b, oh, ow, c), (fh, fw), (sh, sw),
                          (pad_t, pad_l), epilogue, op.code)]


KERNEL = PoolingKernel()
