"""Recognize LayerNorm and RMSNorm written as ops and replace each by one LAYER_NORM / RMS_NORM op (one dispatch).

Converters write a LayerNorm over the last axis as 6-12 ops in many orders: Keras / TF
`x * (rsqrt(var + eps) * gamma) + (beta - mean * (rsqrt(var + eps) * gamma))`, litert-torch
`(x - mean) * rsqrt(var + eps) * w + b`, variance as SQUARED_DIFFERENCE(x, mean) or (x - mean)^2 written as
MUL / SQUARE, the normalizer as RSQRT or SQRT + DIV, epsilon inside or outside the square root. Rather than list
the orders, the pass evaluates the ops reachable from x symbolically: every tensor is a polynomial in x, the
row mean m and the row normalizer r (exponents may be negative: a SQRT of the variance is r^-1) with per-channel
constant coefficients. The symbols appear only at ops that compute exactly them: m at MEAN(x) over the last
axis (keep_dims, or restored by a RESHAPE to [..., 1]); the variance at MEAN over the last axis of exactly
(x - m)^2 (of x^2 for RMSNorm); r at RSQRT(variance + eps), SQRT(variance + eps) or SQRT(variance) + eps, eps a
constant scalar. A tensor y qualifies when its polynomial is g*r*x - g*r*m + b (LayerNorm) or g*r*x + b (RMSNorm)
for per-channel g and b, and every tensor computed on the way to it is read by those ops alone (x may have other
readers). Anything else (another axis, a non-constant or per-channel epsilon, an intermediate read elsewhere, a
variance of something other than x) leaves the ops as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.ir import Graph, Op, Options
from ..model.ops import EPS_OUTSIDE, EPSILON, LAYER_NORM, RMS_NORM, SOURCE_OPS
from . import kernel_support
from .graph_utils import new_const

Monomial = tuple[int, int, int]  # exponents of x, m (row mean), r (row normalizer)
_MAX_EXPONENT = 4  # larger powers are no normalization: stop before polynomials grow
_MAX_REGION = 64  # ops examined from one x


@dataclass
class _Poly:
    """sum of coefficient[channel] * x^a * m^b * r^c; a tensor of x's shape (vector) or of [..., 1] (row)."""

    terms: dict[Monomial, np.ndarray]
    row: bool = False  # holds one value per row: no x in it and no per-channel coefficient

    def add(self, other: _Poly, sign: float = 1.0) -> _Poly:
        terms = dict(self.terms)
        for k, v in other.terms.items():
            terms[k] = terms[k] + sign * v if k in terms else sign * v
        return _Poly({k: v for k, v in terms.items() if np.any(v != 0)}, self.row and other.row)

    def mul(self, other: _Poly) -> _Poly | None:
        terms: dict[Monomial, np.ndarray] = {}
        for k1, v1 in self.terms.items():
            for k2, v2 in other.terms.items():
                k = (k1[0] + k2[0], k1[1] + k2[1], k1[2] + k2[2])
                if max(abs(e) for e in k) > _MAX_EXPONENT:
                    return None
                terms[k] = terms[k] + v1 * v2 if k in terms else v1 * v2
        return _Poly({k: v for k, v in terms.items() if np.any(v != 0)}, self.row and other.row)

    def inverse(self) -> _Poly | None:
        """1 / self for a single monomial in r with a non-zero coefficient."""
        if len(self.terms) != 1:
            return None
        ((a, b, c), v), = self.terms.items()
        if a or b or np.any(v == 0):
            return None
        return _Poly({(0, 0, -c): 1.0 / v}, self.row)

    def is_(self, expected: dict[Monomial, float]) -> bool:
        return set(self.terms) == set(expected) and all(
            np.all(self.terms[k] == v) for k, v in expected.items())


@dataclass
class _Stat:
    """A row statistic that is not yet the normalizer: the variance (+ eps) or its square root."""

    kind: str  # "var", "var+eps", "std"
    epsilon: float = 0.0
    rms: bool = False  # the mean square of x (RMSNorm), not its variance


@dataclass
class _Match:
    root: int  # index of the op computing y
    members: list[int]  # op indices replaced
    gamma: np.ndarray
    beta: np.ndarray
    epsilon: float
    eps_outside: bool
    rms: bool


def fuse_normalization(graph: Graph) -> Graph:
    graph = graph.copy()
    merged = True
    while merged:  # until a sweep merges nothing (each sweep merges every match it meets: one per norm)
        merged = False
        readers = graph.consumers()
        for x in _candidates(graph, readers):
            match = _match(graph, x, readers)
            if match is None:
                continue
            op = _merged_op(graph, x, match)
            if kernel_support.check(op, graph) is not None:
                continue
            members = set(match.members)
            graph.ops = [op if i == match.root else o for i, o in enumerate(graph.ops)
                         if i == match.root or i not in members]
            merged = True
            readers = graph.consumers()  # op indices moved
    return graph


def _candidates(graph: Graph, readers: dict[int, list[int]]) -> list[int]:
    """Run-time float32 tensors read by a MEAN over their last axis (LayerNorm) or by MUL(x, x) / SQUARE(x)."""
    out = []
    for t, ops in readers.items():
        tensor = graph.tensors[t]
        if tensor.data is not None or tensor.dtype != np.float32 or not tensor.shape or min(tensor.shape) < 1:
            continue
        for i in ops:
            op = graph.ops[i]
            if (op.code == "MEAN" and op.inputs[0] == t and _row_mean(graph, op)) or op.code == "SQUARE" or (
                    op.code == "MUL" and op.inputs[:2] == [t, t]):
                out.append(t)
                break
    return out


def _row_mean(graph: Graph, op: Op) -> bool:
    """MEAN over exactly the last axis whose output is [..., 1] (keep_dims) or [...] (restored by a RESHAPE)."""
    if len(op.inputs) < 2 or graph.tensors[op.inputs[1]].data is None:
        return False
    shape = graph.tensors[op.inputs[0]].shape
    axes = {int(a) % len(shape) for a in np.asarray(graph.tensors[op.inputs[1]].data).reshape(-1)}
    return axes == {len(shape) - 1} and graph.tensors[op.outputs[0]].dtype == np.float32


def _const_poly(graph: Graph, t: int, x_shape: tuple[int, ...]) -> _Poly | None:
    """A constant that broadcasts against x as a scalar or a per-channel vector, as a polynomial of degree 0."""
    data = np.asarray(graph.tensors[t].data)
    if data.dtype != np.float32 or len(data.shape) > len(x_shape) or not np.all(np.isfinite(data)):
        return None
    c = x_shape[-1]
    if data.size == 1:
        return _Poly({(0, 0, 0): np.full(c, float(data.reshape(-1)[0]))}, row=True)
    if data.shape[-1] == c and data.size == c:
        return _Poly({(0, 0, 0): data.reshape(-1).astype(np.float64)})
    return None


def _evaluate(graph: Graph, x: int, readers: dict[int, list[int]]) -> tuple[dict[int, _Poly], set[int], dict]:
    """Symbolic values of the tensors computable from x, the ops that computed them, and the epsilon found."""
    shape = graph.tensors[x].shape
    c = shape[-1]
    row_shape = (*shape[:-1], 1)
    values: dict[int, _Poly | _Stat] = {x: _Poly({(1, 0, 0): np.ones(c)})}
    region: set[int] = set()
    info: dict = {}
    pending = sorted(readers.get(x, []))
    seen: set[int] = set()
    while pending and len(region) < _MAX_REGION:
        i = pending.pop(0)
        if i in seen:
            continue
        op = graph.ops[i]
        if len(op.outputs) != 1 or any(t >= 0 and t not in values and graph.tensors[t].data is None
                                       for t in op.inputs):
            continue  # not yet (or never) computable from x
        seen.add(i)
        out = op.outputs[0]
        out_shape = graph.tensors[out].shape
        # A row statistic without its last axis (MEAN without keep_dims, [...]) broadcasts against [..., C] along the
        # wrong axis: only scalar constants may join it (epsilon) until a RESHAPE restores [..., 1].
        squeezed_in = op.code != "RESHAPE" and any(
            t in values and graph.tensors[t].shape == shape[:-1] for t in op.inputs)
        scalars_only = all((t in values and graph.tensors[t].shape == shape[:-1]) or (
            t >= 0 and graph.tensors[t].data is not None and graph.tensors[t].size == 1) for t in op.inputs)
        squeezed = out_shape == shape[:-1] and (op.code == "MEAN" or (squeezed_in and scalars_only))
        if graph.tensors[out].dtype != np.float32 or (out_shape not in (shape, row_shape) and not squeezed):
            continue
        if squeezed_in and not squeezed:
            continue
        value = _step(graph, op, values, shape, info)
        if value is None:
            continue
        if isinstance(value, _Poly) and not value.row and out_shape != shape:
            continue  # a vector must have x's shape (a row value may be broadcast to it)
        if isinstance(value, _Stat) and out_shape == shape:
            continue
        values[out] = value
        region.add(i)
        pending = sorted(set(pending) | set(readers.get(out, [])))
    return {t: v for t, v in values.items() if isinstance(v, _Poly)}, region, info


def _step(graph: Graph, op: Op, values: dict, shape: tuple[int, ...], info: dict) -> _Poly | _Stat | None:
    """The symbolic value of op's output, or None when it is none of the forms a normalization is made of."""
    args: list[_Poly | _Stat | None] = []
    for t in op.inputs[:1] if op.code in ("RESHAPE", "MEAN") else op.inputs[:2]:
        if t in values:
            args.append(values[t])
        elif t >= 0 and graph.tensors[t].data is not None:
            args.append(_const_poly(graph, t, shape))
        else:
            return None
    if any(a is None for a in args) or int(op.opt("fused_activation_function", 0) or 0) != 0:
        return None
    code = op.code
    polys = [a for a in args if isinstance(a, _Poly)]
    stats = [a for a in args if isinstance(a, _Stat)]
    c = shape[-1]
    if code == "MEAN" and _row_mean(graph, op) and polys and op.inputs[0] in values:
        (p,) = polys
        if p.is_({(1, 0, 0): 1.0}):
            return _Poly({(0, 1, 0): np.ones(c)}, row=True)
        if p.is_({(2, 0, 0): 1.0, (1, 1, 0): -2.0, (0, 2, 0): 1.0}):
            return _Stat("var")
        if p.is_({(2, 0, 0): 1.0}):
            return _Stat("var", rms=True)
        return None
    if code == "RESHAPE":
        (a,) = args
        row = isinstance(a, _Stat) or (isinstance(a, _Poly) and a.row)
        return a if row and graph.tensors[op.outputs[0]].shape == (*shape[:-1], 1) else None
    if stats:
        return _stat_step(code, args, info)
    if code in ("ADD", "SUB") and len(polys) == 2:
        return polys[0].add(polys[1], 1.0 if code == "ADD" else -1.0)
    if code == "MUL" and len(polys) == 2:
        return polys[0].mul(polys[1])
    if code == "DIV" and len(polys) == 2:
        inv = polys[1].inverse()
        return None if inv is None else polys[0].mul(inv)
    if code == "SQUARED_DIFFERENCE" and len(polys) == 2:
        d = polys[0].add(polys[1], -1.0)
        return d.mul(d)
    if code == "SQUARE" and len(polys) == 1:
        return polys[0].mul(polys[0])
    if code == "NEG" and len(polys) == 1:
        return _Poly({k: -v for k, v in polys[0].terms.items()}, polys[0].row)
    return None


def _scalar(p: _Poly | _Stat | None) -> float | None:
    """A positive constant scalar (epsilon) as a float, else None."""
    if not isinstance(p, _Poly) or set(p.terms) != {(0, 0, 0)} or not p.row:
        return None
    v = p.terms[(0, 0, 0)]
    return float(v[0]) if np.all(v == v[0]) and v[0] >= 0 else None


def _stat_step(code: str, args: list, info: dict) -> _Poly | _Stat | None:
    """Variance -> normalizer: RSQRT(var + eps), SQRT(var + eps), SQRT(var) + eps (one normalizer per region)."""
    if "mode" in info:
        return None
    stat = next(a for a in args if isinstance(a, _Stat))
    if code == "ADD" and len(args) == 2 and stat.kind in ("var", "std"):
        eps = _scalar(args[1] if args[0] is stat else args[0])
        if eps is None:
            return None
        if stat.kind == "var":
            return _Stat("var+eps", eps, stat.rms)
        info.update(mode="outside", epsilon=eps, rms=stat.rms)
        return _Poly({(0, 0, -1): np.ones(1)}, row=True)
    if len(args) != 1:
        return None
    if code == "RSQRT" and stat.kind == "var+eps":
        info.update(mode="inside", epsilon=stat.epsilon, rms=stat.rms)
        return _Poly({(0, 0, 1): np.ones(1)}, row=True)
    if code == "SQRT" and stat.kind == "var+eps":
        info.update(mode="inside", epsilon=stat.epsilon, rms=stat.rms)
        return _Poly({(0, 0, -1): np.ones(1)}, row=True)
    if code == "SQRT" and stat.kind == "var":
        return _Stat("std", rms=stat.rms)
    return None


def _match(graph: Graph, x: int, readers: dict[int, list[int]]) -> _Match | None:
    """The largest normalization over x whose intermediates nothing else reads, or None."""
    values, region, info = _evaluate(graph, x, readers)
    if "mode" not in info:
        return None
    rms = bool(info.get("rms"))
    c = graph.tensors[x].shape[-1]
    made_by = {graph.ops[i].outputs[0]: i for i in region}
    for root in sorted(region, reverse=True):
        y = graph.ops[root].outputs[0]
        p = values.get(y)
        if p is None or p.row or graph.tensors[y].shape != graph.tensors[x].shape:
            continue
        form = _form(p, rms, c)
        if form is None:
            continue
        members = _ancestors(graph, root, made_by)
        if not _closed(graph, members, y, readers):
            continue
        gamma, beta = form
        return _Match(root, members, gamma, beta, float(info["epsilon"]), info["mode"] == "outside", rms)
    return None


def _form(p: _Poly, rms: bool, c: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(gamma, beta) when p is g*r*x - g*r*m + b (LayerNorm) or g*r*x + b (RMSNorm)."""
    keys = set(p.terms)
    allowed = {(1, 0, 1), (0, 0, 0)} | (set() if rms else {(0, 1, 1)})
    if (1, 0, 1) not in keys or not keys <= allowed:
        return None
    gamma = np.broadcast_to(p.terms[(1, 0, 1)], (c,))
    if not rms:
        if (0, 1, 1) not in keys:
            return None
        minus = np.broadcast_to(p.terms[(0, 1, 1)], (c,))
        if not np.allclose(-minus, gamma, rtol=1e-6, atol=0.0):
            return None
    beta = np.broadcast_to(p.terms.get((0, 0, 0), np.zeros(1)), (c,))
    return gamma.astype(np.float32), beta.astype(np.float32)


def _ancestors(graph: Graph, root: int, made_by: dict[int, int]) -> list[int]:
    seen = {root}
    stack = [root]
    while stack:
        for t in graph.ops[stack.pop()].inputs:
            i = made_by.get(t)
            if i is not None and i not in seen:
                seen.add(i)
                stack.append(i)
    return sorted(seen)


def _closed(graph: Graph, members: list[int], y: int, readers: dict[int, list[int]]) -> bool:
    """Every tensor the members compute, except y, is read by members alone and is no graph output."""
    inside = set(members)
    for i in members:
        t = graph.ops[i].outputs[0]
        if t != y and (t in graph.outputs or not set(readers.get(t, [])) <= inside):
            return False
    return True


def _merged_op(graph: Graph, x: int, match: _Match) -> Op:
    root = graph.ops[match.root]
    name = graph.tensors[root.outputs[0]].name
    gamma = new_const(graph, x, np.ascontiguousarray(match.gamma, np.float32), f"{name}/norm_scale")
    beta = new_const(graph, x, np.ascontiguousarray(match.beta, np.float32), f"{name}/norm_offset")
    fields = {EPSILON: match.epsilon, EPS_OUTSIDE: match.eps_outside,
              SOURCE_OPS: tuple(graph.ops[i].code for i in match.members)}
    return Op(index=root.index, code=RMS_NORM if match.rms else LAYER_NORM, inputs=[x, gamma, beta],
              outputs=[root.outputs[0]], options=Options("NormalizationOptions", fields))
