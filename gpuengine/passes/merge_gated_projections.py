"""Merge a gated MLP's gate and up projections and their SiLU or GELU gating into one FULLY_CONNECTED (one dispatch).

Language models write `silu(x @ Wg) * (x @ Wu)` as two FULLY_CONNECTED ops of one input, LOGISTIC(g), MUL(g, ·)
and MUL(·, u): three dispatches after epilogue fusion (the two projections, then the gating tree reading both). The
merged op reads x once: its weights stack Wg and Wu interleaved by output slice (slice s of the gate, then slice s
of the up projection), a tile computes both slices and its epilogue stores (g * sigmoid(g)) * u
(lowering/kernels/fully_connected.py, option `gated`). The products are the same ops LiteRT evaluates, in the same
order; a hybrid (int8-weight) pair quantizes the one input row once, as LiteRT quantizes it identically for both.

Only when: both projections read the same run-time float tensor, have no activation, the same weight shape
[O, I] with O a multiple of 4 and the same weight kind (float32, or symmetric int8 per channel); g is read only by
the LOGISTIC and the first MUL, the LOGISTIC only by that MUL, which only the second MUL reads, with u; no
intermediate is a graph output; every shape equal (no broadcasting). And the kernel must accept the merged op.
Gemma writes `gelu_tanh(x @ Wg) * (x @ Wu)`: GELU (its `approximate` option picks tanh or erf) then MUL, merged
the same way with the store computing the elementwise kernel's GELU expression.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..model.ir import Graph, Op, Quantization
from ..model.quantization import INT4, int8_values, pack_int4
from . import kernel_support
from .graph_utils import new_const, with_fields

GATED = "gated"  # FULLY_CONNECTED option: "SILU" | "GELU_TANH" | "GELU" -> act(gate) * up of interleaved weights


def merge_gated_projections(graph: Graph) -> Graph:
    graph = graph.copy()
    changed = True
    while changed:
        changed = False
        readers = graph.consumers()
        for i, op in enumerate(graph.ops):
            match = _match(graph, i, op, readers) or _match_gelu(graph, i, op, readers)
            if match is not None and _merge(graph, *match):
                changed = True
                break
    return graph


def _match_gelu(graph: Graph, i: int, op: Op, readers: dict[int, list[int]]) -> tuple | None:
    """(gate FC, up FC, GELU, None, MUL, kind) when op i is the GELU of `gelu(x @ Wg) * (x @ Wu)` (Gemma's MLP)."""
    if op.code != "GELU" or len(op.inputs) != 1 or len(op.outputs) != 1:
        return None
    g, gated = op.inputs[0], op.outputs[0]
    outputs = set(graph.outputs)
    if g in outputs or gated in outputs or readers.get(g, []) != [i] or len(readers.get(gated, [])) != 1:
        return None
    m2 = readers[gated][0]
    kind = "GELU_TANH" if op.opt("approximate", False) else "GELU"
    found = _projections(graph, g, gated, m2, readers)
    return None if found is None else (found[0], found[1], i, None, m2, kind)


def _projections(graph: Graph, g: int, gated: int, m2: int, readers: dict[int, list[int]]) -> tuple[int, int] | None:
    """(gate FC, up FC) op indices when MUL m2 multiplies `gated` (made from g) by u and g, u are two plain
    FULLY_CONNECTEDs of one run-time float input with equal weight shapes (rows a multiple of 4), f32 throughout."""
    outputs = set(graph.outputs)
    mul2 = graph.ops[m2]
    if mul2.code != "MUL" or gated not in mul2.inputs or len(mul2.inputs) != 2 or not _plain(mul2):
        return None
    u = mul2.inputs[1 - mul2.inputs.index(gated)]
    if u in outputs or readers.get(u, []) != [m2] or u == gated:
        return None
    producers = {t: k for k, o in enumerate(graph.ops) for t in o.outputs}
    fg, fu = producers.get(g), producers.get(u)
    if fg is None or fu is None:
        return None
    gate, up = graph.ops[fg], graph.ops[fu]
    for fc in (gate, up):
        if fc.code != "FULLY_CONNECTED" or len(fc.inputs) < 2 or not _plain(fc) or fc.opt(GATED):
            return None
    if gate.inputs[0] != up.inputs[0] or graph.tensors[gate.inputs[0]].data is not None:
        return None
    if bool(gate.opt("keep_num_dims", False)) != bool(up.opt("keep_num_dims", False)):
        return None
    shapes = {tuple(graph.tensors[t].shape) for t in (g, gated, u, mul2.outputs[0])}
    wg, wu = graph.tensors[gate.inputs[1]], graph.tensors[up.inputs[1]]
    if len(shapes) != 1 or wg.shape != wu.shape or len(wg.shape) != 2 or wg.shape[0] % 4:
        return None
    if any(graph.tensors[t].dtype != np.float32 or graph.tensors[t].quantization is not None
           for t in (g, gated, u, mul2.outputs[0])):
        return None
    return fg, fu


def _plain(op: Op) -> bool:
    return int(op.opt("fused_activation_function", 0) or 0) == 0


def _match(graph: Graph, i: int, op: Op, readers: dict[int, list[int]]) -> tuple | None:
    """(gate FC, up FC, LOGISTIC, first MUL, second MUL, "SILU") when op i is the LOGISTIC of the pattern."""
    if op.code != "LOGISTIC" or len(op.inputs) != 1 or len(op.outputs) != 1:
        return None
    g, s = op.inputs[0], op.outputs[0]
    outputs = set(graph.outputs)
    if g in outputs or s in outputs or len(readers.get(s, [])) != 1:
        return None
    m1 = readers[s][0]
    mul1 = graph.ops[m1]
    if mul1.code != "MUL" or sorted(mul1.inputs) != sorted([g, s]) or not _plain(mul1):
        return None
    if sorted(readers.get(g, [])) != sorted([i, m1]) or mul1.outputs[0] in outputs:
        return None
    gated = mul1.outputs[0]
    if len(readers.get(gated, [])) != 1 or graph.tensors[s].dtype != np.float32 or graph.tensors[s].quantization:
        return None
    m2 = readers[gated][0]
    found = _projections(graph, g, gated, m2, readers)
    return None if found is None else (found[0], found[1], i, m1, m2, "SILU")


def _weights(graph: Graph, fc: Op) -> tuple[np.ndarray, np.ndarray | None, int] | None:
    """(values, scales, block size) of an int8 / int4 symmetric weight matrix (scales per row [O], or per block
    [O, blocks] with the block size), (float32 values, None, 0) of a float one."""
    w = graph.tensors[fc.inputs[1]]
    q = int8_values(w)
    if q is not None and w.quantization.blockwise:
        return q, w.quantization.block_scales, w.quantization.block_size
    if q is not None:
        scale = np.broadcast_to(np.asarray(w.quantization.scale, np.float32).reshape(-1), (w.shape[0],))
        return q, scale.astype(np.float32), 0
    if w.data is not None and w.dtype == np.float32 and w.quantization is None:
        return np.asarray(w.data, np.float32), None, 0
    return None


def interleave(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """Rows of gate and up interleaved by 4 (one output slice of each in turn): [O, ...] x 2 -> [2O, ...]."""
    o = gate.shape[0]
    rest = gate.shape[1:]
    return np.stack([gate.reshape(o // 4, 4, *rest), up.reshape(o // 4, 4, *rest)], axis=1).reshape(2 * o, *rest)


def _bias(graph: Graph, fc: Op, o: int) -> np.ndarray | None:
    if len(fc.inputs) < 3 or fc.inputs[2] < 0:
        return None
    b = graph.tensors[fc.inputs[2]]
    if b.data is None or b.dtype != np.float32 or b.quantization is not None:
        raise ValueError("bias")
    return np.asarray(b.data, np.float32).reshape(o)


def _merge(graph: Graph, fg: int, fu: int, logistic: int, m1: int | None, m2: int, kind: str) -> bool:
    gate, up = graph.ops[fg], graph.ops[fu]
    wg, wu = _weights(graph, gate), _weights(graph, up)
    if wg is None or wu is None or (wg[1] is None) != (wu[1] is None) or wg[2] != wu[2]:
        return False
    o = wg[0].shape[0]
    try:
        bg, bu = _bias(graph, gate, o), _bias(graph, up, o)
    except ValueError:
        return False
    tensors_before = len(graph.tensors)
    name = graph.tensors[gate.outputs[0]].name
    w_t = new_const(graph, gate.inputs[1], interleave(wg[0], wu[0]), f"{name}/gated_weights")
    if wg[1] is not None:
        scales = interleave(wg[1], wu[1])
        quant = (Quantization(scale=np.zeros(0, np.float32), zero_point=np.zeros(0, np.int64), block_size=wg[2],
                              block_scales=scales) if wg[2]
                 else Quantization(scale=scales, zero_point=np.zeros(2 * o, np.int64), axis=0))
        graph.tensors[w_t] = dataclasses.replace(graph.tensors[w_t], quantization=quant)
        if all(graph.tensors[fc.inputs[1]].type_code == INT4 for fc in (gate, up)):  # stays int4: 8 a u32 on the GPU
            graph.tensors[w_t] = dataclasses.replace(graph.tensors[w_t], type_code=INT4,
                                                     data=pack_int4(graph.tensors[w_t].data))
    inputs = [gate.inputs[0], w_t]
    if bg is not None or bu is not None:
        zero = np.zeros(o, np.float32)
        inputs.append(new_const(graph, gate.inputs[1], interleave(bg if bg is not None else zero,
                                                                  bu if bu is not None else zero),
                                f"{name}/gated_bias"))
    merged = with_fields(gate, inputs, **{GATED: kind})
    merged = dataclasses.replace(merged, outputs=[graph.ops[m2].outputs[0]])
    if kernel_support.check(merged, graph) is not None:
        del graph.tensors[tensors_before:]
        return False
    gone = {fg, fu, logistic} | ({m1} if m1 is not None else set())
    graph.ops = [merged if k == m2 else op for k, op in enumerate(graph.ops) if k not in gone]
    return True
