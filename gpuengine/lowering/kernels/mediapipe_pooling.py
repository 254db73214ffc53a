"""MediaPipe custom ops MaxPoolingWithArgmax2D and MaxUnpooling2D (segmentation encoders/decoders).

Semantics follow mediapipe/util/tflite/operations/max_pool_argmax.cc and max_unpooling.cc. Both ops take a
raw TfLitePoolParams struct as custom options: little-endian int32 padding (1 = SAME, 2 = VALID), stride_w,
stride_h, filter_w, filter_h, activation (TfLiteFusedActivation), then optional computed padding we ignore.
All tensors are float32 (the indices too), so nothing special crosses the CPU boundary.
  * MaxPoolingWithArgmax2D: outputs the clamped max and, per element, f32(fy * filter_w + fx) + 0.1 where
    (fy, fx) is the first maximum's offset in the (unclamped) window; strict `>` keeps the first one.
  * MaxUnpooling2D: output [B, H * filter_h, W * filter_w, C] of zeros, where each input element writes its
    value at its window origin + the offset decoded from i32(index); later writes (raster order) win,
    out-of-range ones are dropped. The activation is parsed but never applied (as in MediaPipe).
The GPU runs the unpooling as a gather, which is exact only when the indices are bounded; so it requires the
indices to come straight from a MaxPoolingWithArgmax2D in the graph (always the case in MediaPipe models).
"""

from __future__ import annotations

import struct

from ...model.ir import Graph, Op
from ..codegen import literal
from ..layout import slices
from .base import Binding, Code, KernelSpec, Lowering
from .common import bhwc, float_tensors
from .pooling import pool_spec
from .reduce import FLT_MAX

ARGMAX, UNPOOL = "MaxPoolingWithArgmax2D", "MaxUnpooling2D"
# TfLiteFusedActivation -> clamp (CalculateActivationRange: TANH / SIGN_BIT / SIGMOID clamp nothing)
_CLAMPS = {0: None, 1: "value = max(value, vec4<f32>(0.0));",
           2: "value = clamp(value, vec4<f32>(-1.0), vec4<f32>(1.0));",
           3: "value = clamp(value, vec4<f32>(0.0), vec4<f32>(6.0));", 4: None, 5: None, 6: None}


def pool_params(op: Op) -> dict[str, int] | str:
    """The TfLitePoolParams custom options, or why they cannot be read."""
    data = op.custom_options or b""
    if len(data) < 24:
        return f"custom options of {len(data)} bytes, expected a TfLitePoolParams struct (>= 24 bytes)"
    padding, sw, sh, fw, fh, act = struct.unpack_from("<6i", data, 0)
    if padding not in (1, 2):
        return f"padding {padding} is neither SAME (1) nor VALID (2)"
    if min(sw, sh, fw, fh) < 1:
        return f"filter {fh}x{fw} / stride {sh}x{sw} must be positive"
    if act not in _CLAMPS:
        return f"activation {act} is unknown"
    return {"padding": padding, "stride_w": sw, "stride_h": sh, "filter_w": fw, "filter_h": fh,
            "activation": act}


def _argmax_steps(fw: int, c: int) -> tuple[str, str, str]:
    """pool.wgsl statements: the max (`value`, fused clamp in the epilogue) and, per lane, the window offset of
    the first maximum as f32(fy * FW + fx) + 0.1 (relative to the unclamped window, as MediaPipe's CPU kernel),
    with the padding lanes of the last slice zero."""
    return (f"var best = vec4<f32>({literal(-FLT_MAX)}); var arg = vec4<f32>(0.0);",
            f"let better = v > best; best = select(best, v, better); "
            f"arg = select(arg, vec4<f32>(f32(fy * {fw} + fx)), better);",
            f"let lanes = vec4<u32>(os * 4u) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>({c}u); "
            "indices[oi] = D4(select(vec4<f32>(0.0), arg + vec4<f32>(0.1), lanes)); var value = best;")


def _pad(stride: int, in_size: int, filt: int, out_size: int) -> int:
    """tflite::ComputePadding with dilation 1."""
    return max(((out_size - 1) * stride + filt - in_size) // 2, 0)


def argmax_shape(p: dict[str, int], shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    b, h, w, c = shape

    def out(size: int, filt: int, stride: int) -> int:
        return (size + stride - 1) // stride if p["padding"] == 1 else (size - filt + stride) // stride
    return (b, out(h, p["filter_h"], p["stride_h"]), out(w, p["filter_w"], p["stride_w"]), c)


class MediaPipePoolingKernel:
    ops = (ARGMAX, UNPOOL)

    def supports(self, op: Op, graph: Graph) -> str | None:
        p = pool_params(op)
        if isinstance(p, str):
            return p
        arity = (1, 2) if op.code == ARGMAX else (2, 1)
        if (len(op.inputs), len(op.outputs)) != arity:
            return f"expects {arity[0]} input(s) and {arity[1]} output(s)"
        reason = float_tensors(op, graph)
        if reason:
            return reason
        shape = graph.tensors[op.inputs[0]].shape
        if len(shape) != 4:
            return f"input has rank {len(shape)}, expected 4"
        outs = [tuple(graph.tensors[t].shape) for t in op.outputs]
        if op.code == ARGMAX:
            want = argmax_shape(p, shape)
            if outs != [want, want]:
                return f"output shapes {outs} differ from the pooled shape {want}"
            return None
        if tuple(graph.tensors[op.inputs[1]].shape) != tuple(shape):
            return "values and indices shapes differ"
        b, h, w, c = shape
        want = (b, h * p["filter_h"], w * p["filter_w"], c)
        if outs != [want]:
            return f"output shape {outs[0]} differs from the unpooled shape {want}"
        if self._index_bound(op, graph) is None:
            return ("indices do not come from a MaxPoolingWithArgmax2D op, so they may be unbounded; the GPU "
                    "gather needs bounded indices")
        return None

    @staticmethod
    def _index_bound(op: Op, graph: Graph) -> int | None:
        """Largest index value the unpooling can see (producer's window size - 1), or None if unknown."""
        producer = graph.producers().get(op.inputs[1])
        if producer is None:
            return None
        prod = graph.ops[producer]
        if prod.code != ARGMAX or prod.outputs.index(op.inputs[1]) != 1:
            return None
        p = pool_params(prod)
        return None if isinstance(p, str) else p["filter_h"] * p["filter_w"] - 1

    def build(self, op: Op, graph: Graph) -> Lowering:
        p = pool_params(op)
        assert not isinstance(p, str), p
        b, h, w, c = bhwc(graph, op.inputs[0])
        _, oh, ow, _ = bhwc(graph, op.outputs[0])
        if op.code == ARGMAX:  # pool.wgsl; fused epilogues apply to the max (dst), not to the indices
            clamp = _CLAMPS[p["activation"]]
            pad = (_pad(p["stride_h"], h, p["filter_h"], oh), _pad(p["stride_w"], w, p["filter_w"], ow))
            return [pool_spec(_argmax_steps(p["filter_w"], c), op.inputs[0], op.outputs[0], (b, h, w, c),
                              (b, oh, ow, c), (p["filter_h"], p["filter_w"]), (p["stride_h"], p["stride_w"]), pad,
                              [Code(clamp)] if clamp else [], op.code,
                              side_outputs=(Binding("indices", tensor=op.outputs[1], writable=True),))]
        bound = self._index_bound(op, graph)
        assert bound is not None
        fw = p["filter_w"]
        params = {"S": slices(c), "H": oh, "W": ow, "IN_H": h, "IN_W": w, "FW": fw, "STRIDE_H": p["stride_h"],
                  "STRIDE_W": p["stride_w"], "PAD_T": _pad(p["stride_h"], oh, p["filter_h"], h),
                  "PAD_L": _pad(p["stride_w"], ow, fw, w),
                  "MAX_DY": bound // fw, "MAX_DX": min(fw - 1, bound)}
        bindings = [Binding("src", tensor=op.inputs[0]), Binding("indices", tensor=op.inputs[1]),
                    Binding("dst", tensor=op.outputs[0], writable=True)]
        return [KernelSpec("max_unpool", params, bindings, grid=(ow, oh, b * slices(c)), out_channels=c,
                           label=op.code)]


KERNEL = MediaPipePoolingKernel()
