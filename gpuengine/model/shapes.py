"""Concrete shape propagation: the shapes of every tensor for given input shapes, without running the model (the
symbolic one, for all sizes at once, is model/symbolic.py).

Op by op in execution order, an op's output shapes come from, in this order:

1. nothing, when none of its inputs changed (shape, or value for shape-carrying tensors) and none of its outputs
   has a -1 in its shape_signature: the declared shapes stand. What did not change is not recomputed;
2. its values, for the small integer ops of shape chains (SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE, FILL, RANGE
   ...) whose inputs are constants or values known here: evaluated with the constant folder's numpy functions
   (model/folding.py), so value-dependent shapes downstream (a RESHAPE to a computed target, a
   RESIZE_BILINEAR to sizes sliced from a SHAPE) are known at allocation;
3. the op class's shape rule: the validator's table (model/validate.py RULES), which reads the values of 2.
   through the same view as constants; a few ops have rules of their own (OWN_SHAPE_RULES: RESHAPE,
   FULLY_CONNECTED, the MediaPipe custom ops); every rule is in its op family's module (model/families/);
   WHILE, IF and STABLEHLO_COMPOSITE propagate into the subgraphs they call.

What only a run can tell (a shape computed from a tensor's run-time values, an op without a rule whose inputs
changed) is marked unknown: -1 in shape and shape_signature, with the reason in `Propagated.runtime`. The support
check then leaves every op touching such a tensor to LiteRT's CPU runtime, which computes it while it runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ModelError
from .builder import options_kind
from .families import merged
from .folding import FOLDERS, NEVER_FOLDED
from .ir import Graph, Model, Op, Tensor
from .validate import RULES, Invalid, OpView

MAX_VALUE_ELEMENTS = 4096  # values are tracked for shape-chain tensors, never for activations
SUBGRAPH_OPS = ("WHILE", "IF", "STABLEHLO_COMPOSITE")  # shapes propagated into the subgraphs they call
_CALLS = {"WHILE": "body_subgraph_index", "STABLEHLO_COMPOSITE": "decomposition_subgraph_index"}


@dataclass
class Propagated:
    """A graph with every shape re-derived; `runtime`: tensors whose shape only a run can tell, and why."""

    graph: Graph
    runtime: dict[int, str] = field(default_factory=dict)
    values: dict[int, np.ndarray] = field(default_factory=dict)  # shape-chain values known at allocation
    recomputed: int = 0  # ops whose outputs were derived again (the others kept their shapes)


class _Tensors:
    """graph.tensors as the rules and folders read them: computed values show as `data`."""

    def __init__(self, tensors: list[Tensor], values: dict[int, np.ndarray]) -> None:
        self._tensors, self._values = tensors, values

    def __getitem__(self, t: int) -> Tensor:
        tensor = self._tensors[t]
        if t in self._values and tensor.data is None:
            return dataclasses.replace(tensor, data=self._values[t])
        return tensor

    def __len__(self) -> int:
        return len(self._tensors)


class _ValueGraph:
    """The duck-typed Graph the validator's OpView and the constant folder read."""

    def __init__(self, graph: Graph, values: dict[int, np.ndarray]) -> None:
        self.tensors = _Tensors(graph.tensors, values)
        self.inputs, self.outputs = graph.inputs, graph.outputs


def shape_key(shapes: dict[int, tuple[int, ...]]) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """A hashable key for a set of input shapes (what compiled programs are cached by)."""
    return tuple(sorted((int(t), tuple(int(d) for d in s)) for t, s in shapes.items()))


def propagate(graph: Graph, shapes: dict[int, tuple[int, ...]], model: Model | None = None,
              where: str = "", recompute_all: bool = False) -> Propagated:
    """Every tensor's shape when the graph's inputs have `shapes` (tensor index -> shape; inputs not named keep
    theirs). Raises ModelError naming the op when the model cannot run at those shapes (a window larger than its
    input, sizes that do not divide ...). `model`: where the subgraphs of WHILE / IF / composites are.
    recompute_all: derive every op's shapes, changed or not (a check of the rules against a model's own)."""
    g = graph.copy()
    changed: set[int] = set()
    for t, shape in shapes.items():
        shape = tuple(int(d) for d in shape)
        if tuple(g.tensors[t].shape) != shape:
            g.tensors[t] = dataclasses.replace(g.tensors[t], shape=shape)
            changed.add(t)
    result = Propagated(g)
    values = result.values
    view_graph = _ValueGraph(g, values)
    for pos, op in enumerate(g.ops):
        ins = [t for t in op.inputs if t >= 0]
        unknown = [t for t in ins if t in result.runtime]
        if unknown:
            reason = f"op {pos} ({op.code}) reads {g.tensors[unknown[0]].name!r}, whose shape is known only at run time"
            _mark_runtime(g, op.outputs, reason, result)
            changed.update(op.outputs)
            continue
        dirty = recompute_all or any(t in changed for t in ins) \
            or any(_dynamic_signature(g.tensors[t]) for t in op.outputs)
        try:
            if dirty:
                result.recomputed += 1
                got = _output_shapes(op, g, view_graph, model)
                if isinstance(got, str):
                    _mark_runtime(g, op.outputs, f"op {pos} ({op.code}): {got}", result)
                    changed.update(op.outputs)
                    continue
                for t, shape in zip(op.outputs, got):
                    if tuple(g.tensors[t].shape) != tuple(shape):
                        g.tensors[t] = dataclasses.replace(g.tensors[t], shape=tuple(int(d) for d in shape))
                    changed.add(t)
            _evaluate(op, g, view_graph, values)
        except Invalid as e:
            raise ModelError(f"the model cannot run with input shapes {_describe(graph, shapes)}: {where}op {pos} "
                             f"({op.code}): {e}") from None
        except (IndexError, ValueError, TypeError, ZeroDivisionError, OverflowError) as e:
            if isinstance(e, ModelError):
                raise
            raise ModelError(f"the model cannot run with input shapes {_describe(graph, shapes)}: {where}op {pos} "
                             f"({op.code}): {type(e).__name__}: {e}") from None
    return result


def _describe(graph: Graph, shapes: dict[int, tuple[int, ...]]) -> str:
    return ", ".join(f"{graph.tensors[t].name!r} {tuple(s)}" for t, s in shapes.items()) or "as declared"


def _dynamic_signature(t: Tensor) -> bool:
    return t.shape_signature is not None and any(d < 0 for d in t.shape_signature)


def _mark_runtime(g: Graph, tensors: list[int], reason: str, result: Propagated) -> None:
    for t in tensors:
        rank = len(g.tensors[t].shape)
        g.tensors[t] = dataclasses.replace(g.tensors[t], shape=(-1,) * rank, shape_signature=(-1,) * rank)
        result.runtime[t] = reason
        result.values.pop(t, None)


def _small(t: Tensor) -> bool:
    return all(d >= 0 for d in t.shape) and t.size <= MAX_VALUE_ELEMENTS and t.dtype.kind in "iub" \
        and t.sparsity is None and t.type_code not in (5, 13, 14, 17)


def _evaluate(op: Op, g: Graph, view_graph: _ValueGraph, values: dict[int, np.ndarray]) -> None:
    """The values of a shape-chain op whose inputs are known (constants or values computed here)."""
    if op.is_custom or op.code in NEVER_FOLDED or not op.outputs or op.intermediates:
        return
    outs = [g.tensors[t] for t in op.outputs]
    if not all(_small(t) for t in outs):
        return
    if op.code == "SHAPE":
        x = g.tensors[op.inputs[0]]
        if all(d >= 0 for d in x.shape):
            values[op.outputs[0]] = np.array(x.shape, outs[0].dtype)
        return
    ins = [t for t in op.inputs if t >= 0]
    if not ins or op.code not in FOLDERS:
        return
    for t in ins:
        tensor = view_graph.tensors[t]
        if tensor.data is None or tensor.is_variable or tensor.size > MAX_VALUE_ELEMENTS \
                or tensor.type_code in (5, 13, 14, 17):
            return
    try:
        got = [np.asarray(v) for v in FOLDERS[op.code](op, view_graph)]  # type: ignore[arg-type]
    except (NotImplementedError, ValueError, IndexError, TypeError):
        return
    if len(got) != len(outs):
        return
    for t, value, tensor in zip(op.outputs, got, outs):
        if tuple(value.shape) != tuple(tensor.shape):
            return  # the rule and the values disagree: keep neither (LiteRT decides at run time)
        values[t] = np.array(value, dtype=tensor.dtype)


def _output_shapes(op: Op, g: Graph, view_graph: _ValueGraph, model: Model | None) -> list[tuple[int, ...]] | str:
    """The op's output shapes from its class's rule, or why they cannot be known before a run."""
    own = OWN_SHAPE_RULES.get(op.code)
    if own is not None:
        return own(OpView(op, view_graph, options_kind(op.code)), g)  # type: ignore[arg-type]
    if op.code in SUBGRAPH_OPS:
        return called_shapes(op, g, model)
    rule = RULES.get(op.code)
    if rule is None or rule.custom != op.is_custom or rule.shape is None:
        if _value_shapes_known(op, view_graph):
            return [tuple(view_graph.tensors[t].shape) for t in op.outputs]
        return f"no shape rule for {op.code}, and its inputs changed"
    kind = rule.options or (None if rule.custom else options_kind(op.code))
    view = OpView(op, view_graph, kind)  # type: ignore[arg-type]
    for check in rule.checks:
        check(view)
    got = rule.shape(view)
    if got is None:
        needed = [g.tensors[t].name for t in op.inputs[1:] if t >= 0 and view_graph.tensors[t].data is None]
        return (f"its output shape depends on the values of {needed or 'its inputs'}, computed at run time"
                if needed else "its output shape cannot be derived from its inputs")
    if len(got) != len(op.outputs):
        raise Invalid(f"has {len(op.outputs)} outputs, expected {len(got)}")
    return [tuple(int(d) for d in s) for s in got]


def _value_shapes_known(op: Op, view_graph: _ValueGraph) -> bool:
    """FILL, RANGE and other shape-chain ops without a shape rule: their values (evaluated next) give the shapes;
    here only whether they can be evaluated."""
    if op.code not in FOLDERS:
        return False
    outs = {t: view_graph.tensors[t] for t in op.outputs}
    try:
        got = [np.asarray(v) for v in FOLDERS[op.code](op, view_graph)]  # type: ignore[arg-type]
    except (NotImplementedError, ValueError, IndexError, TypeError, AttributeError):
        return False
    if len(got) != len(outs) or any(v.size > MAX_VALUE_ELEMENTS for v in got):
        return False
    for (t, tensor), value in zip(outs.items(), got):
        view_graph.tensors._tensors[t] = dataclasses.replace(tensor, shape=tuple(value.shape))  # noqa: SLF001
    return True


def called_shapes(op: Op, g: Graph, model: Model | None) -> list[tuple[int, ...]] | str:
    """WHILE (the body must keep its loop variables' shapes), IF (both branches must agree) and composites: the
    shapes their subgraphs give for the op's input shapes."""
    if model is None:
        return "its subgraphs are not available to propagate into"
    ins = [tuple(g.tensors[t].shape) for t in op.inputs]
    if op.code == "IF":
        results = []
        for name in ("then_subgraph_index", "else_subgraph_index"):
            got = _through(model, op.opt(name), ins[1:], f"{op.code} {name} ")
            if isinstance(got, str):
                return got
            results.append(got)
        if results[0] != results[1]:
            return f"its branches give different shapes ({results[0]} and {results[1]})"
        return results[0]
    got = _through(model, op.opt(_CALLS[op.code]), ins, f"{op.code} ")
    if isinstance(got, str):
        return got
    if op.code == "WHILE" and got != ins:
        return f"its body changes the loop variables' shapes ({ins} -> {got}): LiteRT resizes them as it runs"
    return got


def _through(model: Model, index: Any, shapes: list[tuple[int, ...]], what: str) -> list[tuple[int, ...]] | str:
    if index is None or not 0 <= int(index) < len(model.subgraphs):
        return f"{what}is missing"
    sub = model.subgraphs[int(index)]
    done = propagate(sub, dict(zip(sub.inputs, shapes)), model, where=f"subgraph {index} ")
    if any(t in done.runtime for t in sub.outputs):
        return f"{what}(subgraph {index}) has outputs known only at run time"
    return [tuple(done.graph.tensors[t].shape) for t in sub.outputs]


# Ops whose shape rule reads more than the validation rule's view (RESHAPE, FULLY_CONNECTED, the MediaPipe custom
# ops): each family module's OWN_SHAPE_RULES.
OWN_SHAPE_RULES = merged("OWN_SHAPE_RULES")

__all__ = ["Propagated", "propagate", "shape_key"]
