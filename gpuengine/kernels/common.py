"""Small helpers every kernel module shares: shapes, support checks, activations, operand reads."""

from __future__ import annotations

import numpy as np

from ..codegen import literal
from ..layout import slices, to_bhwc, to_phwc4
from ..model.ir import Graph, Op
from .base import Binding, Code

# TFLite ActivationFunctionType -> epilogue applied to `value`.
_ACTIVATIONS = {
    0: None,
    1: "value = max(value, vec4<f32>(0.0));",
    2: "value = clamp(value, vec4<f32>(-1.0), vec4<f32>(1.0));",
    3: "value = clamp(value, vec4<f32>(0.0), vec4<f32>(6.0));",
    4: "value = tanh(clamp(value, vec4<f32>(-20.0), vec4<f32>(20.0)));",
}


def bhwc(graph: Graph, t: int) -> tuple[int, int, int, int]:
    return to_bhwc(graph.tensors[t].shape)


def activation(op: Op) -> list[Code]:
    code = int(op.opt("fused_activation_function", 0) or 0)
    line = _ACTIVATIONS.get(code)
    return [Code(line)] if line else []


def activation_supported(op: Op) -> str | None:
    code = int(op.opt("fused_activation_function", 0) or 0)
    return None if code in _ACTIVATIONS else f"fused activation {code} is not supported"


def is_const(graph: Graph, t: int) -> bool:
    return t >= 0 and graph.tensors[t].data is not None


def float_tensors(op: Op, graph: Graph, inputs: list[int] | None = None) -> str | None:
    """GPU tensors are float32 and rank <= 4: check the non-constant tensors an op reads and writes."""
    ins = op.inputs if inputs is None else [op.inputs[i] for i in inputs if i < len(op.inputs)]
    for t in [*ins, *op.outputs]:
        if t < 0:
            continue
        tensor = graph.tensors[t]
        if len(tensor.shape) > 4:
            return f"tensor {tensor.name!r} has rank {len(tensor.shape)} (> 4)"
        if tensor.data is None and tensor.dtype != np.float32:
            return f"tensor {tensor.name!r} is {tensor.dtype}, only float32 runs on the GPU"
        if tensor.data is not None and tensor.dtype not in (np.float32, np.int32, np.int64):
            return f"constant {tensor.name!r} is {tensor.dtype}"
    return None


def const_f32(graph: Graph, t: int) -> np.ndarray:
    return np.asarray(graph.tensors[t].data, dtype=np.float32)


def operand(graph: Graph, t: int, out_shape: tuple[int, int, int, int], name: str,
            shape: tuple[int, ...] | None = None) -> tuple[Code, list[Binding]]:
    """A WGSL function `read_<name>(b, y, x, s) -> vec4<f32>` reading tensor t broadcast to out_shape.

    Scalars constants are baked as literals; other constants are bound as PHWC4 data; tensors bound as is.
    """
    tensor = graph.tensors[t]
    src_shape = to_bhwc(shape if shape is not None else tensor.shape)
    fn = f"fn read_{name}(b: u32, y: u32, x: u32, s: u32) -> vec4<f32> {{\n"
    if tensor.data is not None and tensor.size == 1:
        value = float(np.asarray(tensor.data, np.float32).reshape(-1)[0])
        return Code(fn + f"  return vec4<f32>({literal(value)});\n}}\n"), []
    b_, h_, w_, c_ = src_shape
    idx_b = "b" if b_ > 1 else "0u"
    idx_y = "y" if h_ > 1 else "0u"
    idx_x = "x" if w_ > 1 else "0u"
    splat = c_ == 1 and out_shape[3] > 1
    idx_s = "0u" if (splat or slices(c_) == 1) else "s"
    index = f"(({idx_b} * {slices(c_)}u + {idx_s}) * {h_}u + {idx_y}) * {w_}u + {idx_x}"
    var = f"in_{name}"
    body = f"  let v = {var}[{index}];\n" + ("  return vec4<f32>(v.x);\n" if splat else "  return v;\n")
    if tensor.data is not None:
        binding = Binding(var, data=to_phwc4(np.asarray(tensor.data, np.float32).reshape(src_shape)))
    else:
        binding = Binding(var, tensor=t)
    return Code(fn + body + "}\n"), [binding]


def broadcastable(a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...]) -> bool:
    try:
        return tuple(np.broadcast_shapes(a, b)) == tuple(out)
    except ValueError:
        return False
