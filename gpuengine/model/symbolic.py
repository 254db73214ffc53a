"""Rank and Dimension Propagation (SoD²'s RDP): every tensor's shape as known constants, symbolic sizes and
expressions over them (model/dims.py), for all the input sizes a model's -1 dimensions allow, without running it.

- Symbols: each -1 in a graph input's shape_signature is a symbol, named after the input (its signature name
  when the model has signatures): `image[1]` is dimension 1 of input `image`.
- Transfer functions, both directions, from the op's family (model/families/):
  forward, the op's own shape rule (RULES' `shape`, OWN_SHAPE_RULES) run on symbolic sizes: the rules add,
  multiply, divide and compare sizes, which Dims do exactly, so one rule serves both concrete and symbolic
  shapes; the values of shape-carrying tensors (SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE) from SYMBOLIC_VALUES;
  backward, what an op says its sizes must satisfy (EQUATIONS: broadcast operands agree, a RESHAPE keeps the
  element count, a concatenation's sizes add up), plus every forward result unified with what is known of the
  output already: an equation solved for a symbol binds it everywhere (a later ADD with a [10, 64] constant makes
  a RESHAPE's unknown 10, and through the element count the input's symbol).
- Fixpoint: forward over the ops, backward over them in reverse, until no shape, value or binding changes.
- Operator classes (SoD²): 1 input-shape-determined output (SHAPE, RANK), 2 input-shape-determined output shape
  (most ops), 3 input shape & value determined output shape (RESHAPE to a computed target, RESIZE to computed
  sizes, PAD, SLICE, TILE, ...), 4 execution-determined output (WHERE, UNIQUE, NON_MAX_SUPPRESSION, control
  flow). A class 3 op whose values RDP knows (constants or symbolic values) is resolved; an unresolved class 3
  op or a class 4 op gives its outputs fresh symbols: that is where a plan splits (the shapes after it are known
  only once it has run).

The result is checked against the concrete propagation (model/shapes.py) at concrete sizes by the unit tests.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from .builder import options_kind
from .dims import Dim, DimLike, Undecidable, free_symbols, is_symbolic, solve, substitute, symbol
from .families import merged
from .families._common import Invalid, SymView, broadcast_equations, broadcast_inputs
from .ir import Graph, Model, Op
from .validate import RULES

OP_CLASSES: dict[str, int] = merged("OP_CLASSES")
SYMBOLIC_VALUES = merged("SYMBOLIC_VALUES")
EQUATIONS = merged("EQUATIONS")
OWN_SHAPE_RULES = merged("OWN_SHAPE_RULES")
CLASS_NAMES = {1: "input-shape-determined output", 2: "input-shape-determined output shape",
               3: "input shape & value determined output shape", 4: "execution-determined output"}
MAX_ROUNDS = 16
MAX_VALUES = 64  # shape-carrying tensors: values tracked up to this many elements

Shape = tuple[DimLike, ...]


@dataclass
class OpShapes:
    """What RDP found for one op: its class, and how its output shapes were known (or why they were not)."""

    op_class: int
    how: str  # "rule", "values", or why the outputs got fresh symbols
    split: bool = False  # a class 3 op whose values are known only at run time, or a class 4 op

    def to_json(self) -> dict[str, object]:
        return {"class": self.op_class, "how": self.how, "split": self.split}


@dataclass
class SymbolicShapes:
    """The fixpoint: symbolic shapes (and shape-chain values) of every tensor of `graph`."""

    graph: Graph
    shapes: dict[int, Shape]
    values: dict[int, list[DimLike]]
    ops: list[OpShapes]
    symbols: dict[str, str]  # name -> where it comes from
    bindings: dict[str, DimLike]  # symbols RDP expressed by others (or found constant)
    input_axes: dict[str, tuple[int, int]]  # an input symbol -> (tensor, axis)
    rounds: int = 0
    conflicts: list[str] = field(default_factory=list)

    def shape(self, t: int) -> Shape:
        return tuple(substitute(d, self.bindings) for d in self.shapes.get(t, self.graph.tensors[t].shape))

    @property
    def free(self) -> list[str]:
        """The symbols left free (the model's dynamic sizes and the split points' outputs)."""
        return [s for s in self.symbols if s not in self.bindings]

    def symbolic_tensors(self) -> list[int]:
        return [t for t in range(len(self.graph.tensors)) if any(is_symbolic(d) for d in self.shape(t))]

    def symbolic_ops(self) -> list[int]:
        """Ops with a symbolic size in an input or output: the ops whose code must read sizes at run time."""
        out = []
        for pos, op in enumerate(self.graph.ops):
            if any(any(is_symbolic(d) for d in self.shape(t)) for t in [*op.inputs, *op.outputs] if t >= 0):
                out.append(pos)
        return out

    def input_env(self, shapes: Mapping[int, tuple[int, ...]]) -> dict[str, int]:
        """The input symbols' values for concrete input shapes (tensor -> shape)."""
        env: dict[str, int] = {}
        for name, (t, axis) in self.input_axes.items():
            if t in shapes:
                env[name] = int(shapes[t][axis])
        return env

    def evaluate(self, env: Mapping[str, int]) -> dict[int, tuple[int, ...]]:
        """Concrete shapes of every tensor whose symbols `env` gives (the others are left out)."""
        out: dict[int, tuple[int, ...]] = {}
        for t in range(len(self.graph.tensors)):
            dims = [substitute(d, env) for d in self.shape(t)]
            if not any(is_symbolic(d) for d in dims):
                out[t] = tuple(int(d) for d in dims)
        return out

    def describe_shape(self, t: int) -> str:
        return "[" + ", ".join(str(d) for d in self.shape(t)) + "]"

    def to_json(self) -> dict[str, object]:
        symbolic = set(self.symbolic_ops())
        return {
            "symbols": {s: self.symbols[s] for s in self.free},
            "bindings": {s: str(v) for s, v in self.bindings.items()},
            "rounds": self.rounds,
            "conflicts": list(self.conflicts),
            "ops": [{"index": pos, "code": op.code, **self.ops[pos].to_json(), "symbolic": pos in symbolic,
                     "outputs": [self.describe_shape(t) for t in op.outputs]}
                    for pos, op in enumerate(self.graph.ops)],
            "tensors": {self.graph.tensors[t].name: self.describe_shape(t) for t in self.symbolic_tensors()},
        }


def symbol_base(graph: Graph, model: Model | None, t: int) -> str:
    """The name an input's symbols carry: its signature name, else its tensor name less the converter's
    decorations."""
    for sig in (model.signatures if model is not None else []):
        for name, index in sig.inputs.items():
            if index == t and model is not None and model.subgraphs[sig.subgraph] is graph:
                return name
    name = graph.tensors[t].name
    name = re.sub(r"^serving_default_", "", name)
    name = re.sub(r":\d+$", "", name)
    return re.sub(r"\W+", "_", name) or f"input{t}"


def analyze(graph: Graph, model: Model | None = None,
            dynamic: Mapping[int, tuple[int, ...]] | None = None) -> SymbolicShapes:
    """RDP over `graph`. dynamic: input tensor -> the axes to treat as symbolic (default: the -1s of each input's
    shape_signature)."""
    return _Propagation(graph, model, dynamic).run()


class _Propagation:
    def __init__(self, graph: Graph, model: Model | None, dynamic: Mapping[int, tuple[int, ...]] | None) -> None:
        self.graph, self.model = graph, model
        self.shapes: dict[int, Shape] = {}
        self.values: dict[int, list[DimLike]] = {}
        self.symbols: dict[str, str] = {}
        self.rank: dict[str, int] = {}
        self.bindings: dict[str, DimLike] = {}
        self.fresh: dict[tuple[int, int], DimLike] = {}
        self.how: dict[int, str] = {}
        self.conflicts: list[str] = []
        self.input_axes: dict[str, tuple[int, int]] = {}
        if dynamic is None:
            dynamic = {t: tuple(k for k, d in enumerate(graph.tensors[t].shape_signature or ()) if d < 0)
                       for t in graph.inputs}
        for t in graph.inputs:
            tensor = graph.tensors[t]
            axes = set(dynamic.get(t, ()))
            base = symbol_base(graph, model, t)
            dims: list[DimLike] = []
            for k, d in enumerate(tensor.shape):
                if k in axes:
                    name = self._new_symbol(f"{base}[{k}]", f"input {tensor.name!r} dimension {k}")
                    self.input_axes[name] = (t, k)
                    dims.append(symbol(name))
                else:
                    dims.append(int(d))
            self.shapes[t] = tuple(dims)

    def _new_symbol(self, name: str, origin: str) -> str:
        while name in self.symbols:
            name += "'"
        self.symbols[name] = origin
        self.rank[name] = len(self.rank)
        return name

    # -- reading -----------------------------------------------------------------------------------------------
    def shape(self, t: int) -> Shape | None:
        if t in self.shapes:
            return tuple(substitute(d, self.bindings) for d in self.shapes[t])
        tensor = self.graph.tensors[t]
        if tensor.is_constant or t in self.graph.inputs:
            return tuple(int(d) for d in tensor.shape)
        return None

    def view(self, op: Op) -> SymView:
        shapes = {t: s for t in [*op.inputs, *op.outputs] if t >= 0 and (s := self.shape(t)) is not None}
        values = {t: [substitute(d, self.bindings) for d in v] for t, v in self.values.items()
                  if t in op.inputs}
        return SymView(op, self.graph, options_kind(op.code) if not op.is_custom else None, shapes, values)

    # -- the fixpoint ------------------------------------------------------------------------------------------
    def run(self) -> SymbolicShapes:
        rounds = 0
        while rounds < MAX_ROUNDS:
            rounds += 1
            before = self._state()
            for pos, op in enumerate(self.graph.ops):
                self._forward(pos, op)
            for op in reversed(self.graph.ops):
                self._backward(op)
            if self._state() == before:
                break
        ops = [self._classify(pos, op) for pos, op in enumerate(self.graph.ops)]
        return SymbolicShapes(self.graph, dict(self.shapes), dict(self.values), ops, dict(self.symbols),
                              dict(self.bindings), dict(self.input_axes), rounds, self.conflicts)

    def _state(self) -> tuple:
        shapes = tuple(sorted((t, tuple(str(d) for d in self.shape(t) or ())) for t in self.shapes))
        values = tuple(sorted((t, tuple(str(substitute(d, self.bindings)) for d in v)) for t, v in self.values.items()))
        return shapes, values, tuple(sorted((k, str(v)) for k, v in self.bindings.items()))

    def _forward(self, pos: int, op: Op) -> None:
        got = self._output_shapes(op)
        if isinstance(got, str) and self._declared_stands(op):
            self.how[pos] = "declared (its inputs are static)"
            for t in op.outputs:
                self._merge(t, tuple(int(d) for d in self.graph.tensors[t].shape), f"op {pos} ({op.code})")
            return
        if isinstance(got, str):
            self.how[pos] = got
            for t in op.outputs:
                if t not in self.shapes:
                    self.shapes[t] = self._fresh_shape(pos, op, t, got)
            return
        self.how[pos] = "rule"
        for t, shape in zip(op.outputs, got):
            self._merge(t, shape, f"op {pos} ({op.code})")
        self._forward_values(op)

    def _declared_stands(self, op: Op) -> bool:
        """An op without a rule for these shapes keeps the shapes the model declares when nothing it reads is
        symbolic and its outputs have no -1 (what model/shapes.py does for an op whose inputs did not change)."""
        if OP_CLASSES.get(op.code, 2) == 4:
            return False
        for t in op.inputs:
            shape = self.shape(t) if t >= 0 else ()
            if shape is None or any(is_symbolic(d) for d in shape):
                return False
            if t in self.values and any(is_symbolic(d) for d in self.values[t]):
                return False
        return not any(d < 0 for t in op.outputs for d in (self.graph.tensors[t].shape_signature or ()))

    def _output_shapes(self, op: Op) -> list[Shape] | str:
        op_class = OP_CLASSES.get(op.code, 2)
        if op_class == 4:
            return "its output shapes are known only after it runs (class 4)"
        if any(t >= 0 and self.shape(t) is None for t in op.inputs):
            return "an input's shape is not known yet"
        view = self.view(op)
        try:
            own = OWN_SHAPE_RULES.get(op.code)
            if own is not None:
                got = own(view, self.graph)
            else:
                rule = RULES.get(op.code)
                if rule is None or rule.shape is None or rule.custom != op.is_custom:
                    return f"{op.code} has no shape rule"
                got = rule.shape(view)
        except Undecidable as e:
            return f"its shape rule needs a size known only at run time ({e})"
        except Invalid as e:
            return f"its shape rule refuses the symbolic shapes: {e}"
        except (TypeError, ValueError, IndexError, ZeroDivisionError, AttributeError, KeyError) as e:
            return f"its shape rule does not take symbolic sizes ({type(e).__name__}: {e})"
        if got is None:
            return "its output shape depends on values known only at run time"
        if isinstance(got, str):
            return got
        if len(got) != len(op.outputs):
            return f"its rule gives {len(got)} shapes for {len(op.outputs)} outputs"
        return [tuple(d if is_symbolic(d) else int(d) for d in s) for s in got]

    def _fresh_shape(self, pos: int, op: Op, t: int, reason: str) -> Shape:
        tensor = self.graph.tensors[t]
        signature = tensor.shape_signature
        dims: list[DimLike] = []
        for k, d in enumerate(tensor.shape):
            if signature is not None and k < len(signature) and signature[k] >= 0 and not self.input_axes:
                dims.append(int(d))
            elif signature is not None and k < len(signature) and signature[k] >= 0:
                dims.append(int(signature[k]))
            else:
                key = (t, k)
                if key not in self.fresh:
                    name = self._new_symbol(f"t{t}[{k}]", f"op {pos} ({op.code}) output {tensor.name!r} dimension {k}"
                                            f": {reason}")
                    self.fresh[key] = symbol(name)
                dims.append(self.fresh[key])
        return tuple(dims)

    def _merge(self, t: int, shape: Shape, where: str) -> None:
        known = self.shape(t) if t in self.shapes else None
        if known is None:
            self.shapes[t] = shape
            return
        if len(known) != len(shape):
            self._conflict(f"{where}: output {self.graph.tensors[t].name!r} has rank {len(known)}, the rule gives "
                           f"{len(shape)}")
            return
        for a, b in zip(known, shape):
            self._unify(a, b, where)
        # the rule's expression replaces a fresh symbol it could not be solved for
        self.shapes[t] = tuple(b if is_symbolic(a) and not is_symbolic(b) else a for a, b in zip(self.shape(t), shape))

    def _forward_values(self, op: Op) -> None:
        fn = SYMBOLIC_VALUES.get(op.code)
        if fn is None or len(op.outputs) != 1:
            return
        out = self.shape(op.outputs[0])
        if out is None or any(is_symbolic(d) for d in out) or len(out) > 1 \
                or self.graph.tensors[op.outputs[0]].dtype.kind not in "iu":
            return
        try:
            got = fn(self.view(op))
        except (Undecidable, Invalid, TypeError, ValueError, IndexError, ZeroDivisionError):
            return
        if got is None:
            return
        count = int(out[0]) if out else 1
        if len(got) == count <= MAX_VALUES:
            self.values[op.outputs[0]] = list(got)

    def _backward(self, op: Op) -> None:
        fn = EQUATIONS.get(op.code)
        rule = RULES.get(op.code)
        if fn is None and rule is not None and rule.shape is broadcast_inputs:  # the broadcast ops, all families
            fn = _broadcast_equations
        if fn is None or any(t >= 0 and self.shape(t) is None for t in [*op.inputs, *op.outputs]):
            return
        try:
            equations = fn(self.view(op))
        except (Undecidable, Invalid, TypeError, ValueError, IndexError):
            return
        for a, b in equations:
            self._unify(substitute(a, self.bindings), substitute(b, self.bindings), f"{op.code} (backward)")

    def _unify(self, a: DimLike, b: DimLike, where: str) -> None:
        a, b = substitute(a, self.bindings), substitute(b, self.bindings)
        if a == b or (not is_symbolic(a) and not is_symbolic(b) and int(a) == int(b)):
            return
        if not is_symbolic(a) and not is_symbolic(b):
            self._conflict(f"{where}: sizes {a} and {b} must agree")
            return
        found = solve(a, b, self.rank)
        if found is None:
            return  # an equation RDP cannot solve (nonlinear): the run's concrete check decides
        name, value = found
        self.bindings[name] = value
        for other, expr in list(self.bindings.items()):
            self.bindings[other] = substitute(expr, {name: value})

    def _conflict(self, text: str) -> None:
        if text not in self.conflicts:
            self.conflicts.append(text)

    def _classify(self, pos: int, op: Op) -> OpShapes:
        op_class = OP_CLASSES.get(op.code, 2)
        how = self.how.get(pos, "not reached")
        split = op_class == 4 or (op_class == 3 and how != "rule")
        if op_class == 1 and how == "rule" and not all(t in self.values for t in op.outputs):
            how = "rule (its values are symbolic only where the input shape is)"
        return OpShapes(op_class, how, split)


def _broadcast_equations(v: SymView) -> list[tuple[DimLike, DimLike]]:
    return broadcast_equations(*(v.shape(i) for i in range(v.n_in) if v.has(i)))


def symbols_of(shapes: SymbolicShapes, tensors: list[int]) -> set[str]:
    return free_symbols(d for t in tensors for d in shapes.shape(t))


__all__ = ["CLASS_NAMES", "Dim", "OpShapes", "SymbolicShapes", "analyze", "symbols_of"]
