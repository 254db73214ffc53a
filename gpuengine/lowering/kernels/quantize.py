"""QUANTIZE and DEQUANTIZE of run-time tensors (constant ones are folded at load, passes/fold_constants.py).

On the GPU a quantized tensor holds its real values as floats (model/quantization.py is_quantized), so:
* QUANTIZE (float -> int8/uint8, or requantizing int8 -> int8): a copy whose epilogue rounds to the output's grid
  (fusion.requantize adds it, as for any kernel writing a quantized tensor);
* DEQUANTIZE (int8/uint8 -> float): the values are already real: the output shares the input's storage.
"""

from __future__ import annotations

import numpy as np

from ...model.ir import Graph, Op
from ...model.quantization import is_quantized
from .base import Alias, Lowering
from .common import float_tensors
from .elementwise import elementwise_spec


class QuantizeKernel:
    ops = ("QUANTIZE", "DEQUANTIZE")

    def supports(self, op: Op, graph: Graph) -> str | None:
        if len(op.inputs) != 1 or len(op.outputs) != 1 or op.inputs[0] < 0:
            return "expects 1 input and 1 output"
        reason = float_tensors(op, graph)
        if reason:
            return reason
        x, out = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
        if x.data is not None:
            return "a constant input is folded at load"
        if tuple(x.shape) != tuple(out.shape):
            return f"input shape {x.shape} differs from output shape {out.shape}"
        if op.code == "QUANTIZE" and not is_quantized(out):
            return f"output {out.name!r} is not a per-tensor quantized int8/uint8/int16 tensor"
        if op.code == "DEQUANTIZE" and (not is_quantized(x) or out.dtype != np.float32):
            return "dequantizes a per-tensor quantized run-time tensor to float32 only"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        if op.code == "DEQUANTIZE":
            return [Alias(op.outputs[0], op.inputs[0])]
        shape = graph.tensors[op.inputs[0]].shape
        return [elementwise_spec(op, graph, [("a", op.inputs[0], shape)], "a")]


KERNEL = QuantizeKernel()
