"""ATTENTION: an internal op (passes/fuse_attention.py) for BATCH_MATMUL(Q, K^T) -> [MUL scale] -> [ADD mask] ->
SOFTMAX -> BATCH_MATMUL(·, V) in one dispatch.

Inputs q, k, v[, mask]; option `k_adj`: K is stored [..., N, D] (the first matmul's adj_y) rather than [..., D, N];
`scale`: the MUL's constant times SOFTMAX's beta (`mask_scale`: beta, for the mask); layout views of the operands
and the output as the matmuls had them (kernels/layout_view.py, passes/fold_matmul_layout.py), so the head split and
merge cost nothing either. A tile is one query row: an online softmax over the keys (running maximum and sum)
accumulating the weighted values, so the [M, N] score matrix is never written and no row length is too long. `split`
invocations may share a row's keys (every split-th key each) and merge their softmax states through workgroup memory
(kernels/tiling.py decompositions): a big GPU gets B*H*M*split invocations instead of B*H*M.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..codegen import literal
from ..layout import slices, to_bhwc
from ..model.ir import Graph, Op
from . import layout_view, tiling
from .base import Binding, Code, Decomposition, KernelSpec, Lowering
from .common import float_tensors
from .fully_connected import READER_PARAMS, batch2, operand_reader, out_index, output_locator
from .reduce import FLT_MAX

ATTENTION = "ATTENTION"
VIEWS = ("view_q", "view_k", "view_v")
OUT_VIEW = "view_out"
K_ADJ = "k_adj"
SCALE = "scale"
MASK_SCALE = "mask_scale"  # with a 4th input (an additive mask): logits = scale * QK^T + mask_scale * mask
SOURCE_OPS = "source_ops"  # the model's op codes the pass replaced (named by inspect's labels)
MAX_DEPTH = 128  # channels of a query / value row held in registers


def logical(op: Op, graph: Graph, i: int) -> tuple[int, ...]:
    steps = op.opt(VIEWS[i])
    return tuple(steps[-1].out_shape) if steps else tuple(graph.tensors[op.inputs[i]].shape)


def logical_out(op: Op, graph: Graph) -> tuple[int, ...]:
    steps = op.opt(OUT_VIEW)
    return tuple(steps[0].in_shape) if steps else tuple(graph.tensors[op.outputs[0]].shape)


def _strip(shape: tuple[int, ...]) -> tuple[int, ...]:
    shape = tuple(shape)
    while len(shape) > 1 and shape[0] == 1:
        shape = shape[1:]
    return shape


class AttentionKernel:
    ops = (ATTENTION,)
    internal_ops = (ATTENTION,)  # made by a pass, never read from a model

    def supports(self, op: Op, graph: Graph) -> str | None:
        if len(op.inputs) not in (3, 4) or len(op.outputs) != 1:
            return f"{ATTENTION} expects q, k, v[, mask] and 1 output"
        reason = float_tensors(op, graph)
        if reason:
            return reason
        for key in (*VIEWS, OUT_VIEW):
            if op.opt(key) and layout_view.check(op.opt(key)):
                return layout_view.check(op.opt(key))
        q, k, v, out = (*(logical(op, graph, i) for i in range(3)), logical_out(op, graph))
        if any(not 2 <= len(s) <= 4 for s in (q, k, v, out)):
            return "operands and output must have rank 2..4"
        if graph.tensors[op.inputs[0]].data is not None:
            return "constant queries"
        m, d = q[-2:]
        n, dk = k[-2:] if op.opt(K_ADJ) else k[-2:][::-1]
        nv, dv = v[-2:]
        if dk != d or nv != n:
            return f"shapes do not chain: q {q}, k {k}, v {v}"
        try:
            batch = np.broadcast_shapes(q[:-2], k[:-2], v[:-2])
        except ValueError:
            return "batch dims do not broadcast"
        if tuple(out) != (*batch, m, dv):
            return f"output shape {out} is not {(*batch, m, dv)}"
        if d > MAX_DEPTH or dv > MAX_DEPTH:
            return f"rows of {max(d, dv)} channels (at most {MAX_DEPTH})"
        scale = op.opt(SCALE)
        if not isinstance(scale, float) or not np.isfinite(scale):
            return "scale must be a finite float"
        if len(op.inputs) == 4:
            mask = tuple(graph.tensors[op.inputs[3]].shape)
            mask_scale = op.opt(MASK_SCALE)
            if not isinstance(mask_scale, float) or not np.isfinite(mask_scale):
                return "mask_scale must be a finite float"
            scores = (*batch, m, n)
            try:  # leading 1s of the mask beyond the scores' rank are no batch
                if not 2 <= len(mask) <= 4 or _strip(np.broadcast_shapes(mask, scores)) != _strip(scores):
                    return f"mask {mask} does not broadcast to the scores {scores}"
            except ValueError:
                return f"mask {mask} does not broadcast to the scores {scores}"
        try:
            if op.opt(OUT_VIEW) and out_index(op.opt(OUT_VIEW)) is None:
                return "the output view does not keep 4 adjacent channels together"
            for i, key in enumerate(VIEWS):
                if op.opt(key):
                    layout_view.reader(op.opt(key), "v", READER_PARAMS[len(logical(op, graph, i))])
        except ValueError as e:
            return f"layout view: {e}"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        out = op.outputs[0]
        oshape = logical_out(op, graph)
        fq, bq, qshape, _ = operand_reader(graph, op.inputs[0], False, "xq", op.opt("view_q"))
        # the K reader: a constant K stored [D, N] is transposed at build, so it reads [N, D] (adj) afterwards
        fk, bk, kshape, k_not_adj = operand_reader(graph, op.inputs[1], not op.opt(K_ADJ), "xk", op.opt("view_k"))
        fv, bv, vshape, _ = operand_reader(graph, op.inputs[2], False, "yv", op.opt("view_v"))
        m, d = qshape[-2:]
        n = kshape[-1] if k_not_adj else kshape[-2]
        dv = vshape[-1]
        ds, vs = slices(d), slices(dv)
        b0, b1 = batch2(oshape)
        if k_not_adj:  # K stored [D, N]: lane j of slice s is K[4s + j, n]
            def key(s: int) -> str:
                lanes = ", ".join(f"xk_at(i0, i1, {min(4 * s + j, d - 1)}u, n / 4u)[n % 4u]" for j in range(4))
                return f"vec4<f32>({lanes})"
        else:
            def key(s: int) -> str:
                return f"xk_at(i0, i1, n, {s}u)"
        score = f"({' + '.join(f'dot(q_{s}, {key(s)})' for s in range(ds))}) * {literal(float(op.opt(SCALE)))}"
        readers = fq + fk + fv
        mask_bindings = []
        if len(op.inputs) == 4:
            mshape = tuple(graph.tensors[op.inputs[3]].shape)
            fm, bm, _, _ = operand_reader(graph, op.inputs[3], False, "am", None)
            row = "m" if len(mshape) >= 2 and mshape[-2] > 1 else "0u"
            lane = "n / 4u, n % 4u" if mshape[-1] > 1 else "0u, 0u"
            sl, ln = lane.split(", ")
            score += f" + am_at(i0, i1, {row}, {sl})[{ln}] * {literal(float(op.opt(MASK_SCALE)))}"
            readers += fm
            mask_bindings = [bm]
        oc_ = to_bhwc(tuple(graph.tensors[out].shape))[3]
        locate = output_locator(graph, out, oshape, op.opt(OUT_VIEW), "\n  ")
        tiles = b0 * b1 * m
        fixed = {
            "READERS": Code(readers), "LOCATE": Code(locate), "TILES": tiles, "M": m, "B1": b1, "N": n,
            "LOWEST": Code(literal(-FLT_MAX)),
            "LOAD_Q": Code("\n  ".join(f"let q_{s} = xq_at(i0, i1, m, {s}u);" for s in range(ds))),
            "ACC_INIT": Code("\n  ".join(f"var acc_{s} = vec4<f32>(0.0);" for s in range(vs))),
            "SCORE": Code(score),
            "ACC_UPDATE": Code("\n    ".join(f"acc_{s} = acc_{s} * corr + p * yv_at(i0, i1, n, {s}u);"
                                             for s in range(vs))),
            "STORES": Code("\n    ".join(f"store(acc_{s} / total, i0, i1, m, {s}u);" for s in range(vs))),
        }
        views = "+".join(k.split("_")[1] for k in (*VIEWS, OUT_VIEW) if op.opt(k))
        source = f"({'+'.join(op.opt(SOURCE_OPS))})" if op.opt(SOURCE_OPS) else ""
        label = f"{ATTENTION}{source} {qshape}x{kshape}x{vshape}{f' (views {views})' if views else ''}"
        bindings = [bq, bk, bv, *mask_bindings, Binding("dst", tensor=out, writable=True)]

        def make(dec: Decomposition) -> KernelSpec:
            shared, dispatch = tiling.split_params(dec, tiles, [])
            invocations = dec.invocations_per_workgroup
            partials, combine = "", ""
            if dec.split > 1:  # each of the split invocations took every split-th key: merge their softmax states
                partials = (f"var<workgroup> part_acc: array<vec4<f32>, {invocations * vs}>;\n"
                            f"var<workgroup> part_ml: array<vec2<f32>, {invocations}>;")
                store = [f"part_acc[pos * {vs}u + {s}u] = acc_{s};" for s in range(vs)]
                merge = [f"acc_{s} = acc_{s} * a + part_acc[o * {vs}u + {s}u] * b;" for s in range(vs)]
                combine = "\n  ".join([
                    "part_ml[pos] = vec2<f32>(mx, total);", *store, "workgroupBarrier();", "if (k == 0u) {",
                    f"  for (var j = 1u; j < {dec.split}u; j++) {{", "    let o = pos + j;",
                    "    let other = part_ml[o];", "    let top = max(mx, other.x);",
                    "    let a = exp(mx - top);", "    let b = exp(other.x - top);",
                    "    total = total * a + other.y * b;", *(f"    {line}" for line in merge), "    mx = top;",
                    "  }", "}"])
            params = {**fixed, **shared, "PARTIALS": Code(partials), "COMBINE": Code(combine)}
            fresh = [dataclasses.replace(b) for b in bindings]  # fusion edits a spec's bindings in place
            return KernelSpec("attention", params, fresh, grid=(tiles * dec.split, 1, 1),
                              workgroup=(invocations, 1, 1), dispatch=dispatch, out_channels=oc_,
                              label=f"{label} [{dec.describe()}]")

        step = (ds + vs) * tiling.LOAD + 4 * (ds + vs) + 40  # loads, dot and multiply-adds, two exp
        variants = tiling.variants("attention", {"M": m, "N": n, "D": d, "DV": dv, "B": b0 * b1}, [(1, 1)], n,
                                   lambda _: tiles, lambda _: step, make, tiles * n * (d + dv), [readers, score])
        # the merge goes through workgroup memory, one state per invocation (with subgroups too: there they only
        # place a row's invocations inside one subgroup), within WebGPU's default size
        variants.candidates = [c for c in variants.candidates
                               if c.split == 1 or c.invocations_per_workgroup * (vs + 1) <= tiling.LANE_MEMORY_VEC4]
        return [variants]


KERNEL = AttentionKernel()
