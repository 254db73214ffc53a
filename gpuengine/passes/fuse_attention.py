"""Fuse scaled dot-product attention into one ATTENTION op (lowering/kernels/attention.py): one dispatch instead of
three, and the [M, N] score and probability matrices are never written.

Pattern: S = BATCH_MATMUL(Q, K) (adj_y: K stored [N, D]; else [D, N]), optionally S' = MUL(S, c) or DIV(S, c) with c
a constant scalar, optionally S'' = ADD(S', mask) (a mask of rank >= 2 broadcasting to the scores), P = SOFTMAX (any
beta), O = BATCH_MATMUL(P, V) without adjoints on P or V; S, S' and P read by the next op alone and no graph
outputs; leading 1s added or dropped on the way (by the mask ADD's broadcast, or a RESHAPE before ·V folded as the
second matmul's view) are allowed. The matmuls' layout views (passes/fold_matmul_layout.py, which runs first) carry
over.
"""

from __future__ import annotations

import numpy as np

from ..model.ir import Graph, Op, Options
from ..model.ops import ATTENTION, K_ADJ, KV_GROUP, MASK_SCALE, OUT_VIEW, SCALE, SOURCE_OPS
from ..model.ops import ViewStep as Step
from ..model.quantization import is_quantized
from . import kernel_support


def fuse_attention(graph: Graph) -> Graph:
    graph = graph.copy()
    changed = True
    while changed:
        changed = False
        readers = graph.consumers()
        for i in range(len(graph.ops)):
            found = _match(graph, i, readers)
            if found is None:
                continue
            fused, members = found
            reason = _quantized_step(graph, members) or kernel_support.check(fused, graph)
            if reason is not None:  # the decomposed ops stay; inspect says why
                remark = f"{ATTENTION} not fused at {graph.tensors[fused.outputs[0]].name!r}: {reason}"
                if remark not in graph.remarks:
                    graph.remarks.append(remark)
                continue
            last = members[-1]
            graph.ops = [fused if j == last else o for j, o in enumerate(graph.ops) if j == last or j not in members]
            changed = True
            break
    _explain_unmatched(graph)
    return graph


def _explain_unmatched(graph: Graph) -> None:
    """A remark for each attention-like chain left unfused without one: a SOFTMAX between two BATCH_MATMULs that the
    pattern did not take (it runs decomposed, correctly; inspect says what stopped the match)."""
    producers, readers = graph.producers(), graph.consumers()
    for op in graph.ops:
        if op.code != "SOFTMAX":
            continue
        after = [graph.ops[j] for j in readers.get(op.outputs[0], [])]
        if len(after) != 1 or after[0].code != "BATCH_MATMUL":
            continue
        named = {repr(graph.tensors[t].name) for t in (op.outputs[0], after[0].outputs[0])}
        if any(r.startswith(f"{ATTENTION} not fused") and any(n in r for n in named) for r in graph.remarks):
            continue  # the match found it and said why the kernel refused it
        chain, t = [], op.inputs[0]
        while t in producers and graph.ops[producers[t]].code in ("RESHAPE", "ADD", "MUL", "DIV") and len(chain) < 6:
            chain.append(graph.ops[producers[t]].code)
            t = graph.ops[producers[t]].inputs[0]
        if t not in producers or graph.ops[producers[t]].code != "BATCH_MATMUL":
            continue
        reasons = [f"RESHAPE between the scores and the SOFTMAX ({' <- '.join(['SOFTMAX', *chain])})"
                   ] if "RESHAPE" in chain else []
        reasons += ["the second BATCH_MATMUL reads V transposed (adj_y)"] if after[0].opt("adj_y") else []
        reason = "; ".join(reasons) or "the chain's operands or readers do not fit the pattern"
        remark = f"{ATTENTION} not fused at {graph.tensors[after[0].outputs[0]].name!r}: {reason}"
        if remark not in graph.remarks:
            graph.remarks.append(remark)


def _quantized_step(graph: Graph, members: list[int]) -> str | None:
    """Why an int8 chain stays unfused: LiteRT rounds the scores and probabilities to their int8 grids between the
    ops (SOFTMAX's output to 1/256), which one float ATTENTION kernel would skip."""
    for j in members[:-1]:
        for t in graph.ops[j].outputs:
            if is_quantized(graph.tensors[t]):
                return f"{graph.ops[j].code} output {graph.tensors[t].name!r} is quantized (LiteRT rounds it)"
    return None


def _sole_reader(graph: Graph, t: int, readers: dict[int, list[int]]) -> int | None:
    ops = readers.get(t, [])
    return ops[0] if len(ops) == 1 and t not in graph.outputs else None


def _advance(graph: Graph, op: Op, j: int, members: list[int], readers: dict[int, list[int]]) -> int | None:
    """Take op (at j) into the chain and step to the sole reader of its output (None: none, or several)."""
    members.append(j)
    return _sole_reader(graph, op.outputs[0], readers)


def _match(graph: Graph, i: int, readers: dict[int, list[int]]) -> tuple[Op, list[int]] | None:
    first = graph.ops[i]
    if first.code != "BATCH_MATMUL" or first.opt("adj_x"):
        return None
    # scores written through a view: only RESHAPEs keeping the last axis (a regrouping of rows, checked below)
    regrouped = bool(first.opt(OUT_VIEW))
    if regrouped and not all(step.kind == "RESHAPE" and step.in_shape[-1] == step.out_shape[-1]
                             for step in first.opt(OUT_VIEW)):
        return None
    scale = 1.0
    members = [i]
    j = _sole_reader(graph, first.outputs[0], readers)
    if j is None:
        return None
    op = graph.ops[j]
    if op.code in ("MUL", "DIV") and int(op.opt("fused_activation_function", 0) or 0) == 0:
        other = [t for t in op.inputs if t != first.outputs[0]]
        data = graph.tensors[other[0]].data if len(other) == 1 and other[0] >= 0 else None
        if data is None or np.asarray(data).size != 1 or (op.code == "DIV" and op.inputs[1] != other[0]):
            return None
        c = float(np.asarray(data, np.float64).reshape(-1)[0])
        if c == 0 or not np.isfinite(c):
            return None
        scale = c if op.code == "MUL" else 1.0 / c
        j = _advance(graph, op, j, members, readers)
        if j is None:
            return None
        op = graph.ops[j]
    mask = -1  # RESHAPEs of the scores that keep their last axis (litert-torch's transposed-cache layout) next
    while op.code == "RESHAPE" and _keeps_last(graph, op):
        regrouped = True
        j = _advance(graph, op, j, members, readers)
        if j is None:
            return None
        op = graph.ops[j]
    if op.code == "ADD" and int(op.opt("fused_activation_function", 0) or 0) == 0 and len(op.inputs) == 2:
        scores = graph.ops[members[-1]].outputs[0]
        others = [t for t in op.inputs if t != scores]
        if len(others) != 1 or others[0] < 0 or _strip(graph.tensors[op.outputs[0]].shape) != _strip(
                graph.tensors[scores].shape):
            return None
        mask = others[0]
        masked_shape = tuple(graph.tensors[op.outputs[0]].shape)
        j = _advance(graph, op, j, members, readers)
        if j is None:
            return None
        op = graph.ops[j]
    while op.code == "RESHAPE" and _keeps_last(graph, op):
        regrouped = True
        j = _advance(graph, op, j, members, readers)
        if j is None:
            return None
        op = graph.ops[j]
    out_view = first.opt(OUT_VIEW)
    raw = tuple(out_view[0].in_shape) if out_view else tuple(graph.tensors[first.outputs[0]].shape)
    head_form = None  # (query heads per KV head, Q's shape before the regrouping)
    if regrouped and mask >= 0 and any(d != 1 for d in graph.tensors[mask].shape[:-1]):
        # a mask varying per row (prefill's causal mask) is added per query head and row: attend in that form
        head_form = _head_form(first, masked_shape, tuple(graph.tensors[mask].shape), raw)
        if head_form is None:
            return None
    if regrouped and _strip(graph.tensors[op.outputs[0]].shape) != _strip(raw):
        return None  # the probabilities must be grouped as the scores were, for P.V to pair them with V's batches
    if op.code != "SOFTMAX" or op.inputs[0] != graph.ops[members[-1]].outputs[0]:
        return None
    beta = float(op.opt("beta", 1.0) or 1.0)
    scale *= beta
    members.append(j)
    j = _sole_reader(graph, op.outputs[0], readers)
    if j is None:
        return None
    second = graph.ops[j]
    if (second.code != "BATCH_MATMUL" or second.inputs[0] != op.outputs[0] or second.opt("adj_x")
            or not _unit_reshapes(second.opt("view_a") or ())):
        return None
    view_v = second.opt("view_b")
    if second.opt("adj_y"):  # V stored [..., D, N] (litert-torch's BNHT cache): read it through a TRANSPOSE view
        stored = tuple(view_v[-1].out_shape) if view_v else tuple(graph.tensors[second.inputs[1]].shape)
        if len(stored) < 2:
            return None
        perm = (*range(len(stored) - 2), len(stored) - 1, len(stored) - 2)
        view_v = (*(view_v or ()), Step("TRANSPOSE", stored, tuple(stored[p] for p in perm), perm))
    members.append(j)
    fields = {"view_q": first.opt("view_a"), "view_k": first.opt("view_b"), "view_v": view_v,
              OUT_VIEW: second.opt(OUT_VIEW), K_ADJ: bool(first.opt("adj_y")), SCALE: scale,
              SOURCE_OPS: tuple(graph.ops[k].code for k in members)}
    if head_form is not None:  # Q read before its regrouping; the output regrouped back as the model's P.V wrote it
        group, q_shape = head_form
        out_raw = tuple(graph.tensors[second.outputs[0]].shape) if not second.opt(OUT_VIEW) else tuple(
            second.opt(OUT_VIEW)[0].in_shape)
        heads_out = (*q_shape[:-1], out_raw[-1])
        fields.update({"view_q": None, KV_GROUP: group,
                       OUT_VIEW: (Step("RESHAPE", heads_out, out_raw), *(second.opt(OUT_VIEW) or ()))})
    if mask >= 0:
        fields[MASK_SCALE] = beta
    fused = Op(index=second.index, code=ATTENTION,
               inputs=[first.inputs[0], first.inputs[1], second.inputs[1], *([mask] if mask >= 0 else [])],
               outputs=list(second.outputs), options=Options("AttentionOptions", fields))
    return fused, members


def _head_form(first: Op, masked_shape: tuple[int, ...], mask_shape: tuple[int, ...],
               raw: tuple[int, ...]) -> tuple[int, tuple] | None:
    """(group, Q's shape [B, Hq, T, D]) when the first matmul reads Q through one RESHAPE [B, Hq, T, D] ->
    [B, Hkv, G*T, D] (litert-torch's transposed cache: a KV head's query heads as its rows), so the scores
    [B, Hkv, G*T, N] regrouped as [B, Hq, T, N] are the masked shape: attention per query head with G per KV head.
    The masked shape may split B*Hq otherwise ([Hkv, G, T, N]) when the mask is the same for all of them."""
    view = first.opt("view_a")
    if not view or len(view) != 1 or view[0].kind != "RESHAPE":
        return None
    q0, q1 = tuple(view[0].in_shape), tuple(view[0].out_shape)
    if len(q0) != 4 or len(q1) != 4 or q0[0] != q1[0] or q0[-1] != q1[-1] or q1[1] == 0 or q0[1] % q1[1]:
        return None
    group = q0[1] // q1[1]
    if q1[2] != group * q0[2] or len(masked_shape) < 2 or tuple(masked_shape[-2:]) != (q0[2], raw[-1]):
        return None
    if tuple(masked_shape) != (*q0[:-1], raw[-1]) and (
            int(np.prod(masked_shape[:-2])) != q0[0] * q0[1] or any(d != 1 for d in mask_shape[:-2])):
        return None
    return group, q0


def _keeps_last(graph: Graph, op: Op) -> bool:
    """A RESHAPE that regroups rows only: its last axis (the keys) unchanged."""
    a, b = graph.tensors[op.inputs[0]].shape, graph.tensors[op.outputs[0]].shape
    return bool(a) and bool(b) and a[-1] == b[-1]


def _strip(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape without its leading 1s (converters add and drop them around the mask ADD and the SOFTMAX)."""
    shape = tuple(shape)
    while len(shape) > 1 and shape[0] == 1:
        shape = shape[1:]
    return shape


def _unit_reshapes(steps: tuple) -> bool:
    """A view of the probabilities that only adds or drops leading 1s (the kernel never materializes them)."""
    return all(step.kind == "RESHAPE" and _strip(step.in_shape) == _strip(step.out_shape) for step in steps)
