"""A plan made once for a model whose input sizes are symbolic (SoD²'s symbolic plan): at a new size the host
evaluates expressions instead of planning.

Everything a new size changes in a GPU program -- the numbers each kernel reads from its `gpe_dims` buffer
(lowering/parametric.py), each dispatch's grid, each binding's byte size, each intermediate tensor's bytes for the
memory plan, the boundary tensors' and the model's own shapes -- is an integer expression over atoms: the input
symbols, their tiles `ceil(s/k)` and the symbolic sizes RDP's shapes hold (model/symbolic.py, such as
`ceil(x[1]/2)`). The expressions are found once, when the model first compiles: the engine plans the model
(model/shapes.py, the passes, lowering, rendering) at sampled sizes of its symbols, reads each of those numbers
there, and takes for each the simplest integer combination of features (atoms, their products, `ceil(c*m/k)` of
those) exact at every sample (`Fitter`). Then it checks the plan against the planner at validation sizes no sample
has (`SymbolicPlan.check`), and fits again with the failures among the samples. A number no expression fits means
no symbolic plan (the model keeps planning per size, as before). This is interpolation checked against the planner,
not derivation through the kernels' code; the plan serves only sizes inside the sampled range
(`SymbolicPlan.covers`), and at each size the fitted shapes of the model's tensors are held against RDP's, which
are derived from the ops' rules: a size where one differs is planned as before (`SymbolicPlan.disagreed`).

At a new size (`SymbolicPlan.at`): the atoms and the features the expressions use evaluated once, each expression a
few integer operations; memory planned by SoD²'s peak-outward greedy in the placement order decided at the first size
(memory/peak_outward.py PlacementOrder) into the interpreter's arena (`Buffers`: grown to 1.25x a size's need when it
needs more than it holds, never shrunk); each dispatch's version chosen by its shape class; the bind groups made and
the first invoke's command buffer recorded (`SizedProgram`). Nothing is rendered, nothing compiled: every class's
version is compiled when the plan is made.

Shape classes (SoD²'s multi-version code): a dispatch whose kernel offers decompositions gets one version per class
of its output's row count (the positions, every dimension but the channels): `skinny` (< 64 rows: one workgroup's
worth), `regular` (< 4096) and `fat`. A class's version is the decomposition the engine's policy picks most often
at the sampled sizes of that class (else the nearest class's); every decomposition is correct at every size, so the
class decides speed only.

Where planning cannot be precomputed it splits, as in SoD²: a model with a class 3 op RDP could not resolve or a
class 4 op (value- or execution-dependent shapes), several partitions (CPU fallbacks, host-driven control flow), or
a plan whose structure changes across the sampled sizes outside the range kept, has no symbolic plan; `inspect
--symbolic` says which and why.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import threading
import time
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import GpuEngineError
from ..lowering import codegen
from ..lowering.device_fit import stored_data
from ..lowering.dispatches import dispatch_macs
from ..lowering.kernels.base import KernelSpec
from ..lowering.kernels.common import holds_integers
from ..lowering.kernels.dispatch_cost import binding_bytes
from ..lowering.kernels.resize import bilinear_table, nearest_table
from ..lowering.parametric import ParametricKernel, hoist
from ..memory import UsageRecord
from ..memory.peak_outward import PlacementOrder
from ..model.dims import is_symbolic, substitute
from ..model.ir import Graph, Model
from ..model.quantization import is_quantized
from ..model.symbolic import SymbolicShapes, analyze
from ..options import EngineOptions
from ..planning import prepare
from .program import CompiledInfo, Dispatch, GpuProgram, Phases, Slot, _orphan_recorded, shared_constant

# sizes each free symbol takes at the samples (paired across symbols in shifted orders): odd and even, around
# powers of two and across them, so parity, tile counts and ceil-divisions all vary
SAMPLE_VALUES = (1, 2, 3, 5, 6, 8, 9, 12, 16, 17, 23, 31, 32, 40, 47, 64, 65, 96, 129, 200, 257, 384, 512)
SHIFTS = (0, 7, 13, 3)
DENSE = 12  # a model with one symbol is also sampled at every size up to this
VALIDATION = (11, 27, 58, 83, 126, 177, 300, 451)
ROUNDS = 3
SAMPLING_BUDGET_S = 20.0  # the planning of the samples a plan may take, once per model and device
LARGE = (72, 150, 320)
CLASSES = (("skinny", 64), ("regular", 4096), ("fat", None))  # by a dispatch's output rows: below each bound
DIVISORS = (*range(2, 17), 20, 24, 32, 40, 48, 64, 96, 128, 192, 256)
MULTIPLIERS = (1, 2, 3, 5, 6, 7)
MAX_ATOMS = 16
ATOM_TILES = (2, 3, 4, 8)
PAIR_CANDIDATES = 24
ARENA_GROWTH = 1.25


def shape_class(rows: int) -> str:
    """A dispatch's shape class from its output's row count (every dimension but the channels)."""
    for name, bound in CLASSES:
        if bound is None or rows < bound:
            return name
    return CLASSES[-1][0]


# -- expressions ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Feature:
    """ceil(multiplier * product of atoms / divisor): atoms by index into the plan's atom list."""

    atoms: tuple[int, ...]
    divisor: int = 1
    multiplier: int = 1

    def value(self, atoms: list[int]) -> int:
        product = self.multiplier
        for a in self.atoms:
            product *= atoms[a]
        return product if self.divisor == 1 else -(-product // self.divisor)

    def text(self, names: list[str]) -> str:
        product = "*".join(([str(self.multiplier)] if self.multiplier != 1 else []) + [names[a] for a in self.atoms])
        return product if self.divisor == 1 else f"ceil({product}/{self.divisor})"


@dataclass(frozen=True)
class Expr:
    """const + sum(coefficient * feature): an integer expression over the atoms."""

    terms: tuple[tuple[int, int], ...]  # (coefficient, feature index)
    const: int

    def __call__(self, features: list[int]) -> int:
        value = self.const
        for c, f in self.terms:
            value += c * features[f]
        return value

    def text(self, features: list[Feature], names: list[str]) -> str:
        parts = [("" if c == 1 else "-" if c == -1 else f"{c}*") + features[f].text(names) for c, f in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")


def features_of(count: int) -> list[Feature]:
    """Candidate features over `count` atoms, simplest first: atoms, products of two, then ceil(c * those / k) (tile
    counts: c tiles per row, k rows per workgroup), c and k coprime."""
    monomials = [(a,) for a in range(count)] + [(a, b) for a in range(count) for b in range(a, count)]
    # powers of two first (workgroup and tile sizes are), then the rest; small multipliers first
    divisors = sorted(DIVISORS, key=lambda k: (k & (k - 1) != 0, k))
    fractions = [(c, k) for k in divisors for c in MULTIPLIERS if c < k and math.gcd(c, k) == 1]
    return [Feature(m) for m in monomials] + [Feature(m, k, c) for c, k in fractions for m in monomials]


def feature_matrix(features: list[Feature], atom_values: list[list[int]]) -> np.ndarray:
    """Every feature's value at every sample (rows), computed by monomial and fraction at once."""
    atoms = np.array(atom_values, np.int64)
    out = np.empty((len(atom_values), len(features)), np.int64)
    products: dict[tuple[int, ...], np.ndarray] = {}
    for j, f in enumerate(features):
        product = products.get(f.atoms)
        if product is None:
            product = products[f.atoms] = np.prod(atoms[:, list(f.atoms)], axis=1)
        out[:, j] = -(-(f.multiplier * product) // f.divisor)
    return out


class Fitter:
    """Fits columns of values at the samples against a fixed feature matrix (the centring done once; a column seen
    before answered from memory)."""

    def __init__(self, matrix: np.ndarray, atom_count: int) -> None:
        self.source = matrix
        self.x = matrix.astype(np.float64)
        self.centred = self.x - self.x.mean(axis=0)
        spread = (self.centred ** 2).sum(axis=0)
        self.usable = spread > 0
        self.spread = np.where(self.usable, spread, 1.0)
        self.norms = np.sqrt(np.where(self.usable, spread, np.inf))
        self.atom_count = atom_count
        self.monomials = atom_count + atom_count * (atom_count + 1) // 2  # features_of puts them first
        self.memo: dict[bytes, Expr | None] = {}

    def __call__(self, y: np.ndarray) -> Expr | None:
        key = np.asarray(y, np.int64).tobytes()
        if key not in self.memo:
            self.memo[key] = self.fit(np.asarray(y, np.float64))
        return self.memo[key]

    def fit(self, y: np.ndarray) -> Expr | None:
        """The simplest expression exact at every sample: a constant; else an integer times one feature plus one;
        else two features (atoms and products first: parities such as 2*ceil(x/2) - x); else up to three chosen
        by orthogonal matching pursuit. None when none is."""
        if np.all(y == y[0]):
            return Expr((), int(y[0]))
        x, centred = self.x, self.centred
        target = y - y.mean()
        correlation = centred.T @ target
        a = np.rint(np.where(self.usable, correlation / self.spread, 0))
        b = np.rint(y.mean() - a * x.mean(axis=0))
        few = min(4, len(y))  # screen on a few samples, then check the survivors on all
        maybe = np.flatnonzero(self.usable & (a != 0) & np.all(a * x[:few] + b == y[:few, None], axis=0))
        for f in maybe:
            if np.all(a[f] * x[:, f] + b[f] == y):
                return Expr(((int(a[f]), int(f)),), int(b[f]))
        score = np.abs(correlation) / self.norms
        by_score = np.argsort(-score)
        monomials = [int(f) for f in by_score if f < self.monomials][:PAIR_CANDIDATES // 2]
        pool = list(dict.fromkeys([f for f in range(self.atom_count) if self.usable[f]] + monomials
                                  + [int(f) for f in by_score[:PAIR_CANDIDATES // 2] if self.usable[f]]))
        ones = np.ones(len(y))
        for i, f in enumerate(pool):
            for g in pool[i + 1:]:
                design = np.column_stack([x[:, f], x[:, g], ones])
                coef = np.rint(np.linalg.lstsq(design, y, rcond=None)[0])
                if coef[0] != 0 and coef[1] != 0 and np.all(design @ coef == y):
                    return Expr(((int(coef[0]), f), (int(coef[1]), g)), int(coef[2]))
        chosen: list[int] = []
        residual = target
        for _ in range(3):
            score = np.abs(centred.T @ residual) / self.norms
            score[chosen] = -1
            chosen.append(int(np.argmax(score)))
            design = np.column_stack([x[:, chosen], ones])
            coef = np.rint(np.linalg.lstsq(design, y, rcond=None)[0])
            if np.all(design @ coef == y) and np.all(coef[:-1] != 0):
                return Expr(tuple((int(c), f) for c, f in zip(coef[:-1], chosen)), int(coef[-1]))
            residual = y - design @ coef
            residual = residual - residual.mean()
        return None


def fit(matrix: np.ndarray, y: np.ndarray, atom_count: int = 0) -> Expr | None:
    """The simplest exact expression of `y` over the features (Fitter.fit)."""
    return Fitter(matrix, atom_count)(y)


_FITTER: list[Fitter | None] = [None]


def _fit_shapes(values: np.ndarray, shapes: list[dict[int, tuple[int, ...]]]
                ) -> dict[int, tuple[Expr, ...]] | int:
    """Each tensor's dimensions as expressions, from its shape at every sample; the first tensor a dimension of
    which fits no expression, else."""
    fitted = {}
    for t, shape in shapes[0].items():
        dims = []
        for axis in range(len(shape)):
            expr = _fit(values, np.array([sample[t][axis] for sample in shapes]))
            if expr is None:
                return t
            dims.append(expr)
        fitted[t] = tuple(dims)
    return fitted


def _fit(values: np.ndarray, y: np.ndarray) -> Expr | None:
    fitter = _FITTER[0]
    if fitter is None or fitter.source is not values:  # one fitter per sample set
        fitter = _FITTER[0] = Fitter(values, _ATOMS[0])
    return fitter(y)


_ATOMS = [0]


# -- the plan ---------------------------------------------------------------------------------------------------

@dataclass
class Version:
    """One compiled version of a dispatch: a decomposition (a shape class's), its parametric text and how each of
    its size-dependent numbers is computed."""

    name: str
    decomposition: Any
    workgroup: tuple[int, int, int]
    spec: KernelSpec  # the version at the first sample: its bindings' layout
    source: str
    kernel: ParametricKernel | None  # None: the text does not depend on the sizes
    dims: list[Expr | int]  # per gpe_dims word: its expression, or the axis whose workgroup count it is
    floats: list[bool]  # gpe_dims words stored as f32 bits
    grid_exprs: tuple[Expr, Expr, Expr]
    explicit: bool  # the grid is the kernel's own workgroup count (spec.dispatch), not invocations
    sizes: dict[int, Expr]  # bound binding position -> bytes (planned tensors and scratch)
    tables: dict[int, tuple[Any, ...]]  # bound binding position -> (table function, align, half, IH, H, IW, W)
    macs: Expr | None  # multiply-accumulates (reports only); None where no expression fits
    pipeline: Any = None

    def words(self, features: list[int]) -> np.ndarray | None:
        """gpe_dims' contents at a size (None: the text reads none)."""
        if self.kernel is None:
            return None
        groups = self.groups(features)
        numbers = [groups[e] if isinstance(e, int) else e(features) for e in self.dims]
        return np.array([int(np.array([float(n)], np.float32).view(np.uint32)[0]) if is_float else n & 0xFFFFFFFF
                         for n, is_float in zip(numbers, self.floats)], np.uint32)

    def grid(self, features: list[int]) -> tuple[int, int, int]:
        return tuple(max(0, e(features)) for e in self.grid_exprs)  # type: ignore[return-value]

    def groups(self, features: list[int]) -> tuple[int, int, int]:
        """Workgroups dispatched at a size."""
        grid = self.grid(features)
        return grid if self.explicit else tuple(-(-g // w) for g, w in zip(grid, self.workgroup))  # type: ignore

    def table(self, i: int, features: list[int]) -> np.ndarray:
        """Binding i's size-dependent table at a size, made by its kernel's function."""
        fn, align, half, ih, h, iw, w = self.tables[i]
        return np.concatenate([fn(ih(features), h(features), align, half),
                               fn(iw(features), w(features), align, half)]).reshape(-1)


@dataclass
class SymbolicDispatch:
    shader: str
    rows: Expr | None  # the output's row count, for its shape class (None: one version)
    classes: dict[str, Version]


@dataclass
class Evaluated:
    """The plan evaluated at one size."""

    env: dict[str, int]
    features: list[int]
    versions: list[Version]
    classes: list[str]
    records: list[UsageRecord]


@dataclass
class _Sample:
    env: dict[str, int]
    program: GpuProgram
    shapes: dict[int, tuple[int, ...]]
    source: dict[int, tuple[int, ...]]  # the model's tensors with symbolic shapes, as propagate derives them


class Buffers:
    """The buffers the sizes of one interpreter share (never shared between interpreters: their invokes may
    interleave): the arena of intermediates and the input buffers, each grown to ARENA_GROWTH x a size's need when
    that size needs more than it holds, never shrunk."""

    def __init__(self) -> None:
        self.arena: Any = None
        self.raw_in: dict[int, Any] = {}
        self.grown = 0

    def arena_for(self, need: int, dev: Any) -> Any:
        import wgpu

        if self.arena is None or self.arena.size < need:
            size = max(16, -(-int(need * ARENA_GROWTH) // 256) * 256)
            self.arena = dev.create_buffer(size=size, usage=wgpu.BufferUsage.STORAGE)
            self.grown += 1
        return self.arena

    def input_for(self, t: int, need: int, dev: Any) -> Any:
        import wgpu

        buf = self.raw_in.get(t)
        if buf is None or buf.size < need:
            buf = self.raw_in[t] = dev.create_buffer(size=-(-int(need * ARENA_GROWTH) // 16) * 16,
                                                     usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST)
        return buf


class SymbolicPlan:
    """What a new size of a symbolic model needs, as expressions over its symbols (see the module's docstring)."""

    def __init__(self, rdp: SymbolicShapes, atoms: list[Any], names: list[str], features: list[Feature],
                 template: Any, dispatches: list[SymbolicDispatch], records: list[tuple[int, int, int, Expr]],
                 boundary: dict[int, tuple[Expr, ...]], ranges: dict[str, tuple[int, int]], samples: int) -> None:
        self.rdp, self.atoms, self.names, self.features = rdp, atoms, names, features
        self.used: list[int] = list(range(len(features)))  # the features some expression reads
        self.source: dict[int, tuple[Expr, ...]] = {}  # the model's symbolic tensors' shapes
        self.disagreed = 0  # sizes where a fitted shape differed from RDP's (planned as before)
        self.signature: Any = None  # the structure every size it serves keeps (_signature)
        self.validated = 0  # sizes never sampled at which every expression was checked against the planner
        self.template = template  # the CompiledGraph of the first size (one GPU program)
        self.dispatches, self.records, self.boundary, self.ranges = dispatches, records, boundary, ranges
        self.samples = samples
        self.order = PlacementOrder.of([UsageRecord(t, 1 + k, first, last)  # replaced at the first size
                                        for k, (t, first, last, _) in enumerate(records)])
        self.constants: dict[int, Any] = {}
        self.lock = threading.Lock()
        self.sized = 0  # sizes served
        self.compiled_versions = 0
        self.last_ms: dict[str, float] = {}

    # -- making it --------------------------------------------------------------------------------------------
    @staticmethod
    def make(model: Model, shapes: dict[int, tuple[int, ...]], options: EngineOptions, template: Any
             ) -> SymbolicPlan | str:
        """The symbolic plan of the model whose first size compiled to `template` (a CompiledGraph), or why there
        is none (a split: planning at each size). Fitted at the sampled sizes, then checked against the planner at
        VALIDATION sizes no sample has; a size where an expression fails joins the samples and the plan is fitted
        again (up to ROUNDS times), else there is no plan."""
        extra: list[dict[str, int]] = []
        planned: dict[Any, Any] = {}
        for _ in range(ROUNDS):
            plan = SymbolicPlan.fitted(model, shapes, options, template, extra, planned)
            if isinstance(plan, str):
                return plan
            failed = [env for env in _validation_envs(list(plan.ranges))
                      if plan.covers(env) and plan.differs(env, model, options)]
            if not failed:
                plan.validated = len(_validation_envs(list(plan.ranges)))
                return plan
            extra += failed
        return f"expressions still failed at {len(failed)} validation sizes after {ROUNDS} rounds of fitting"

    @staticmethod
    def fitted(model: Model, shapes: dict[int, tuple[int, ...]], options: EngineOptions, template: Any,
               extra: list[dict[str, int]], planned: dict[Any, Any]) -> SymbolicPlan | str:
        """The plan fitted at the sampled sizes and `extra` ones (`planned`: the sizes planned in earlier rounds)."""
        graph = model.main
        if not any(any(d < 0 for d in graph.tensors[t].shape_signature or ()) for t in graph.inputs):
            return "static input sizes"
        rdp = analyze(graph, model)
        splits = [f"op {p.index} {p.code}" for p, o in zip(graph.ops, rdp.ops) if o.split]
        if splits:
            return f"split points (class 3 / 4 ops, sizes known only once they ran): {', '.join(splits)}"
        free = [s for s in rdp.free if s in rdp.input_axes]
        if not free or len(free) != len(rdp.free):
            return "the free symbols are not all input sizes"
        programs = template.programs
        if len(programs) != 1 or not isinstance(programs[0], GpuProgram) or programs[0].in_place:
            return "more than one GPU program (CPU fallbacks, control flow or caches written in place)"
        first = programs[0]
        atoms, names = _atoms(rdp, free)
        features = features_of(len(atoms))
        _ATOMS[0] = len(atoms)
        samples: list[_Sample] = []
        misfits: list[dict[str, int]] = []
        base = None
        symbolic = rdp.symbolic_tensors()
        envs = _sample_envs(free, rdp.input_env(shapes)) + extra
        start = time.perf_counter()
        for n, env in enumerate(envs):
            spent = time.perf_counter() - start
            if n and spent / n * len(envs) > SAMPLING_BUDGET_S:  # a large model: its plan per size is too slow
                return (f"planning it at {len(envs)} sampled sizes would take about {spent / n * len(envs):.0f} s "
                        f"(budget {SAMPLING_BUDGET_S:.0f} s)")
            key = tuple(sorted(env.items()))
            if key not in planned:  # each size planned once across the rounds of fitting
                try:
                    entry = prepare(graph, _shapes_at(graph, rdp, env), options, model)
                    parts = entry.plan.partitions
                    if len(parts) != 1 or parts[0].device != "gpu":
                        raise ValueError("partitions")
                    planned[key] = (entry, GpuProgram(
                        entry.plan.graph, parts[0].ops, parts[0].inputs, parts[0].outputs, first.gpu,
                        dataclasses.replace(options, memory_strategy="offsets"), None, first.target, first.precision,
                        allocate=False))
                except (GpuEngineError, ValueError):
                    planned[key] = None
            if planned[key] is None:
                misfits.append(env)
                continue
            entry, program = planned[key]
            base = base if base is not None else _signature(program)
            if _signature(program) != base:
                misfits.append(env)
                continue
            samples.append(_Sample(env, program, {t: tuple(entry.plan.graph.tensors[t].shape)
                                                  for t in [*program.inputs, *program.outputs]},
                                   {t: tuple(entry.graph.tensors[t].shape) for t in symbolic}))
        if len(samples) < 12:
            return f"the plan's structure holds at {len(samples)} of the sampled sizes only"
        values = feature_matrix(features, [atom_values(atoms, s.env) for s in samples])
        for _ in range(4):  # samples where a kernel's text takes another form (a size 1 simplified) leave the range
            dispatches = []
            for d in range(len(samples[0].program.sources)):
                got = _dispatch(d, samples, values)
                if isinstance(got, str):
                    return got
                if isinstance(got, set):
                    break
                dispatches.append(got)
            else:
                break
            misfits += [samples[k].env for k in sorted(got)]
            keep = [k for k in range(len(samples)) if k not in got]
            if 0 not in keep or len(keep) < 12:
                return f"dispatch {d}'s text takes other forms at {len(got)} of the sampled sizes"
            samples, values = [samples[k] for k in keep], values[keep]
        else:
            return "the sampled sizes did not settle"
        ranges = _ranges(free, samples, misfits)
        records = []
        for k, r in enumerate(samples[0].program.info.records):
            expr = _fit(values, np.array([s.program.info.records[k].size for s in samples]))
            if expr is None:
                return f"the bytes of tensor {r.tensor} fit no expression"
            records.append((r.tensor, r.first, r.last, expr))
        boundary = _fit_shapes(values, [s.shapes for s in samples])
        if isinstance(boundary, int):
            return f"the shape of boundary tensor {boundary} fits no expression"
        source = _fit_shapes(values, [s.source for s in samples])
        if isinstance(source, int):
            return f"the shape of tensor {source} fits no expression"
        plan = SymbolicPlan(rdp, atoms, names, features, template, dispatches, records, boundary, ranges,
                            len(samples))
        plan.source = source
        plan.signature = base
        exprs = [e for d in dispatches for v in d.classes.values()
                 for e in [*[x for x in v.dims if not isinstance(x, int)], *v.grid_exprs,
                           *([v.macs] if v.macs else []), *v.sizes.values(),
                           *[x for t in v.tables.values() for x in t[3:]]]]
        exprs += [d.rows for d in dispatches if d.rows is not None] + [r[3] for r in records]
        exprs += [e for dims in [*boundary.values(), *source.values()] for e in dims]
        plan.used = sorted({f for e in exprs for _, f in e.terms})
        at_first = plan.evaluate(rdp.input_env(shapes))
        plan.order = PlacementOrder.of(at_first.records, first.gpu.storage_alignment)
        # the first size served once: its classes' versions compiled now (its neighbours then compile nothing) and
        # the whole path exercised before a user's size takes it
        got = plan.at(shapes, graph, Buffers())
        if got is None:
            return "the first size is outside the sampled range"
        program = got[1].programs[0]
        for d in dispatches:  # every class's version compiled once, now: no size in the range compiles
            for version in d.classes.values():
                program.compile(version)
        plan.sized = 0
        return plan

    # -- using it ---------------------------------------------------------------------------------------------
    def covers(self, env: dict[str, int]) -> bool:
        return all(s in env and lo <= env[s] <= hi for s, (lo, hi) in self.ranges.items())

    def evaluate(self, env: dict[str, int]) -> Evaluated:
        atoms = atom_values(self.atoms, env)
        features = [0] * len(self.features)
        for f in self.used:
            features[f] = self.features[f].value(atoms)
        versions, classes = [], []
        for d in self.dispatches:
            name = shape_class(d.rows(features)) if d.rows is not None else "one"
            versions.append(d.classes[name])
            classes.append(name)
        records = [UsageRecord(t, max(4, e(features)), first, last) for t, first, last, e in self.records]
        return Evaluated(env, features, versions, classes, records)

    def at(self, shapes: dict[int, tuple[int, ...]], source: Graph, buffers: Buffers) -> tuple[Graph, Any] | None:
        """The source graph with its shapes at these input sizes and its compiled graph, from the expressions
        alone; None outside the sampled range (the caller plans that size as before)."""
        start = time.perf_counter()
        env = self.rdp.input_env(shapes)
        for t, shape in shapes.items():
            declared = self.rdp.shape(t)
            if len(shape) != len(declared) or any(not is_symbolic(d) and d != s for d, s in zip(declared, shape)):
                return None
        if not self.covers(env):
            return None
        with self.lock:
            evaluated = self.evaluate(env)
            if not self.fits(evaluated):
                return None  # planned as before: the planner names the limit
            fitted = {t: tuple(e(evaluated.features) for e in dims) for t, dims in self.source.items()}
            # RDP's shapes are derived from the ops' rules, not fitted: a fitted shape that disagrees is a misfit
            if any(tuple(substitute(d, env) for d in self.rdp.shape(t)) != shape for t, shape in fitted.items()):
                self.disagreed += 1
                return None  # an expression fitted wrong at this size: planned as before
            plan_done = time.perf_counter()
            program = SizedProgram(self, evaluated, buffers)
        compiled = copy.copy(self.template)
        compiled.programs = [program]
        compiled.graph = program.graph
        compiled.parametric_kernels = 0
        done = time.perf_counter()
        compiled.compile_ms = (done - start) * 1e3
        tensors = list(source.tensors)
        for t, shape in fitted.items():
            tensors[t] = dataclasses.replace(tensors[t], shape=shape)
        graph = dataclasses.replace(source, tensors=tensors)
        self.sized += 1
        self.last_ms = {"evaluate": (plan_done - start) * 1e3, "allocate_and_record": (done - plan_done) * 1e3,
                        "total": (time.perf_counter() - start) * 1e3}
        return graph, compiled

    def differs(self, env: dict[str, int], model: Model, options: EngineOptions) -> bool:
        """Whether the planner at these sizes gives anything else than the plan (or cannot plan them)."""
        try:
            return bool(self.check(_shapes_at(model.main, self.rdp, env), model, options))
        except (GpuEngineError, ValueError):
            return True

    def fits(self, at: Evaluated) -> bool:
        """Whether the device takes this size's arena and bindings (lowering/device_fit.py checks them when a size
        is planned; a size past them is planned, which names the limit)."""
        limits = self.template.gpu.device_limits
        arena = sum(r.size for r in at.records)  # at least the arena's size
        boundary = [4 * math.prod(e(at.features) for e in dims) for dims in self.boundary.values()]
        if arena * ARENA_GROWTH > limits.buffer_bytes or any(b * ARENA_GROWTH > limits.buffer_bytes for b in boundary):
            return False
        return all(e(at.features) <= limits.storage_binding_bytes for v in at.versions for e in v.sizes.values())

    def check(self, shapes: dict[int, tuple[int, ...]], model: Model, options: EngineOptions) -> list[str]:
        """Where this plan's values at `shapes` differ from what the planner gives there (each dispatch rendered in
        the version the size's class picks): empty when every expression holds. For tests at sizes never sampled;
        a new size never pays for this."""
        at = self.evaluate(self.rdp.input_env(shapes))
        first: GpuProgram = self.template.programs[0]
        entry = prepare(model.main, shapes, options, model)
        part = entry.plan.partitions[0]
        program = GpuProgram(entry.plan.graph, part.ops, part.inputs, part.outputs, first.gpu,
                             dataclasses.replace(options, memory_strategy="offsets"), None, first.target,
                             first.precision, allocate=False)
        if _signature(program) != self.signature:
            return ["the plan's structure differs"]
        problems = []
        features = at.features
        for d, version in enumerate(at.versions):
            spec = program.as_version(program.sources[d][0], version.decomposition, version.workgroup, True)
            if spec is None:
                problems.append(f"dispatch {d}: no version")
                continue
            text = program.render(spec)
            words = version.words(features)
            if version.kernel is None and text != version.source:
                problems.append(f"dispatch {d}: its text changed")
            elif version.kernel is not None:
                planned = version.kernel.values(text)
                if planned is None or list(planned) != list(words):  # type: ignore[arg-type]
                    problems.append(f"dispatch {d}: gpe_dims {words} != planned {planned}")
            planned_grid = tuple(spec.dispatch if version.explicit else spec.grid)  # type: ignore[arg-type]
            if planned_grid != version.grid(features):
                problems.append(f"dispatch {d}: grid {version.grid(features)} != planned {planned_grid}")
            bound = codegen.bound(spec)
            for i, e in version.sizes.items():
                b = bound[i]
                planned_bytes = b.scratch_bytes or binding_bytes(b, program.graph, program.precision)
                if e(features) != planned_bytes:
                    problems.append(f"dispatch {d} binding {b.name}: {e(features)} bytes != planned {planned_bytes}")
            for i in version.tables:
                if not np.array_equal(version.table(i, features), bound[i].data):
                    problems.append(f"dispatch {d}: table {bound[i].name} differs")
        if [(r.tensor, r.size, r.first, r.last) for r in at.records] != \
                [(r.tensor, r.size, r.first, r.last) for r in program.info.records]:
            problems.append("usage records differ")
        for t, dims in self.boundary.items():
            if tuple(e(features) for e in dims) != tuple(program.graph.tensors[t].shape):
                problems.append(f"boundary tensor {t}'s shape differs")
        for t, dims in self.source.items():
            if tuple(e(features) for e in dims) != tuple(entry.graph.tensors[t].shape):
                problems.append(f"tensor {t}'s shape differs")
        return problems

    def report(self) -> dict[str, Any]:
        """What inspect --symbolic shows: the symbols' sampled range, each dispatch's classes and versions, the
        expressions' count."""
        return {
            "samples": self.samples,
            "validated": self.validated,
            "range": {s: list(r) for s, r in self.ranges.items()},
            "atoms": list(self.names),
            "expressions": sum(len(v.dims) + 4 + len(v.sizes) for d in self.dispatches for v in d.classes.values())
            + len(self.records) + sum(len(s) for s in self.boundary.values()),
            "memory": "peak-outward greedy arena in the first size's order (memory/peak_outward.py); one arena grown "
                      f"to {ARENA_GROWTH}x a size's need when it needs more, never shrunk",
            "dispatches": [{"shader": d.shader,
                            "rows": None if d.rows is None else d.rows.text(self.features, self.names),
                            "versions": {c: v.name for c, v in d.classes.items()}} for d in self.dispatches],
            "sizes_served": self.sized,
            "last_ms": dict(self.last_ms),
        }

    def describe(self) -> list[str]:
        lines = [f"symbolic plan: made once from {self.samples} sampled sizes, valid for "
                 + ", ".join(f"{s} in [{lo}, {hi}]" for s, (lo, hi) in self.ranges.items())
                 + "; a new size evaluates its expressions (no planning, no rendering)",
                 f"  memory: {self.report()['memory']}"]
        for k, d in enumerate(self.dispatches):
            if d.rows is None:
                continue
            versions = ", ".join(f"{c}: {v.name}" for c, v in d.classes.items())
            lines.append(f"  dispatch {k} {d.shader}: shape class by rows {d.rows.text(self.features, self.names)} "
                         f"-> {versions}")
        return lines


# made plans per device: interpreters of one model (its bytes) with the same options share one (its expressions,
# versions and pipelines; each interpreter keeps its own buffers)
_PLANS: weakref.WeakKeyDictionary[Any, dict[Any, SymbolicPlan | str]] = weakref.WeakKeyDictionary()
_MAKING = threading.Lock()


def plan_for(digest: bytes, model: Model, shapes: dict[int, tuple[int, ...]], options: EngineOptions,
             template: Any) -> SymbolicPlan | str:
    """The symbolic plan of the model whose bytes hash to `digest`, made once per device and options."""
    with _MAKING:  # one at a time: the fitting's state (_FITTER, _ATOMS) is the module's
        plans = _PLANS.setdefault(template.gpu.device, {})
        key = (digest, repr(options), template.precision)
        if key not in plans:
            plans[key] = SymbolicPlan.make(model, shapes, options, template)
        return plans[key]


class SizedProgram(GpuProgram):
    """A GPU program at one size, made from the symbolic plan's values (no lowering, no rendering): the same hot loop,
    submit and read-back as GpuProgram."""

    def __init__(self, plan: SymbolicPlan, at: Evaluated, buffers: Buffers) -> None:
        import wgpu

        start = time.perf_counter()
        first: GpuProgram = plan.template.programs[0]
        self.plan, self.evaluated = plan, at
        self.gpu, self.options, self.precision, self.target = first.gpu, first.options, first.precision, first.target
        self.inputs, self.outputs = list(first.inputs), list(first.outputs)
        self.choices, self.root, self.tunable, self.f32 = first.choices, first.root, [], first.f32
        self.in_place: dict[int, int] = {}
        self.direct = first.direct
        self.tuned = 0
        features = at.features
        graph = dataclasses.replace(first.graph, tensors=list(first.graph.tensors))
        for t, dims in plan.boundary.items():
            graph.tensors[t] = dataclasses.replace(graph.tensors[t], shape=tuple(e(features) for e in dims))
        self.graph = graph
        memory = plan.order.plan(at.records)
        memory = dataclasses.replace(memory, strategy="peak_outward (symbolic plan)")
        self.info = CompiledInfo(specs=[v.spec for v in at.versions], records=at.records, plan=memory)
        self.use_parametric = True
        self._rendered: dict[int, Any] = {}
        self._lock = threading.RLock()
        self._queue = self.gpu.device.queue
        self._bound: dict[int, Any] = {}
        self._constants: dict[int, Any] = {}  # GpuProgram's; this program binds constants per version
        self.binding_version = 0
        self._resident: set[int] = set()
        self._scratch: dict[str, Any] = {}
        self._held: dict[int, Any] = {}
        self._feedback: dict[int, Any] = {}
        self._readback: frozenset[int] | None = None
        self.uploaded: dict[int, int] = {}
        dev = self.gpu.device
        usage = wgpu.BufferUsage.STORAGE
        self.buffers = buffers
        self.objects = [buffers.arena_for(memory.object_sizes[0] if memory.object_sizes else 16, dev)]
        self.raw_in = {t: buffers.input_for(t, self._raw_bytes(t), dev) for t in self.inputs}
        copies = wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        self.raw_out = {t: dev.create_buffer(size=self._raw_bytes(t), usage=usage | copies) for t in self.outputs}
        self._make_staging(dev)
        boundary = [*self.inputs, *self.outputs]
        self._quantized = {t: self.graph.tensors[t] for t in boundary if is_quantized(self.graph.tensors[t])}
        self._integers = {t: self.graph.tensors[t] for t in boundary if holds_integers(self.graph.tensors[t])}
        self.dispatches: list[Dispatch] = []
        self._dims: dict[int, np.ndarray] = {}
        self._words: list[np.ndarray | None] = []
        for k, version in enumerate(at.versions):
            pipeline = self.compile(version)
            words = version.words(features)
            if words is not None:
                self._dims[k] = words
            self._words.append(words)
            groups = version.groups(features)
            bind_group = self._bind_version(k, version, pipeline)
            self.dispatches.append(Dispatch(version.spec, pipeline, bind_group, groups, version.source))  # type: ignore
        self.parametric_dispatches = len(self._dims)
        self._hot = [(d.pipeline, d.bind_group, *d.groups) for d in self.dispatches]
        self.phases = Phases()
        self._record = self._recorder()
        self._next_slot = 0
        self._recorded: dict[str, Any] = {"read": self._encode(self._slots[0]), "gpu_only": None}
        self._gpu_only = Slot(None)
        finalizer = weakref.finalize(self, _orphan_recorded, self.gpu, self._recorded)
        finalizer.atexit = False
        self.info.compile_ms = (time.perf_counter() - start) * 1e3

    def compile(self, version: Version) -> Any:
        """The version's pipeline, compiled the first time a size uses it (a shape class's first size)."""
        if version.pipeline is None:
            if version.kernel is not None:
                if not self.compile_parametric(version.kernel, version.spec):
                    raise GpuEngineError(f"the parametric version of {version.spec.shader} does not compile")
                version.pipeline = version.kernel.pipeline
            else:
                version.pipeline = self.gpu.pipelines.get(version.source)
                if version.pipeline is None:
                    version.pipeline = self.gpu.pipelines[version.source] = self._pipeline(version.source,
                                                                                           version.spec)
            self.plan.compiled_versions += 1
        return version.pipeline

    def _bind_version(self, k: int, version: Version, pipeline: Any, inputs: dict[int, Any] | None = None) -> Any:
        import wgpu

        dev = self.gpu.device
        features = self.evaluated.features
        entries = []
        words = self._words[k]
        if words is not None:
            buf = dev.create_buffer_with_data(data=words.tobytes(), usage=wgpu.BufferUsage.STORAGE)
            entries.append({"binding": len(codegen.bound(version.spec)),
                            "resource": {"buffer": buf, "offset": 0, "size": buf.size}})
        for i, b in enumerate(codegen.bound(version.spec)):
            if i in version.tables:  # a size-dependent table: made by its kernel's function, uploaded per size
                table = version.table(i, features)
                buf = dev.create_buffer_with_data(data=table.astype(np.float32).tobytes(),
                                                  usage=wgpu.BufferUsage.STORAGE)
                resource = {"buffer": buf, "offset": 0, "size": buf.size}
            elif b.data is not None:
                buf = self.plan.constants.get(id(b.data))
                if buf is None:
                    buf = self.plan.constants[id(b.data)] = shared_constant(dev, stored_data(b, self.precision))
                self._held[id(buf)] = buf
                resource = {"buffer": buf, "offset": 0, "size": buf.size}
            elif b.scratch_bytes:
                need = -(-version.sizes[i](features) // 16) * 16
                buf = self._scratch.get(b.scratch_key) if b.scratch_key else None
                if buf is None or buf.size < need:
                    buf = dev.create_buffer(size=max(16, need), usage=wgpu.BufferUsage.STORAGE)
                    if b.scratch_key:
                        self._scratch[b.scratch_key] = buf
                resource = {"buffer": buf, "offset": 0, "size": buf.size}
            elif b.raw and not b.writable and inputs and b.tensor in inputs:
                buf = inputs[b.tensor]  # a user's buffer: the tensor's bytes, not necessarily rounded up to 16
                resource = {"buffer": buf, "offset": 0, "size": min(self._raw_bytes(b.tensor), buf.size)}
            elif b.raw:
                buf = (self.raw_in if b.tensor in self.raw_in and not b.writable else self.raw_out)[b.tensor]
                resource = {"buffer": buf, "offset": 0, "size": self._raw_bytes(b.tensor)}
            else:
                _, off = self.info.plan.placement[b.tensor]
                resource = {"buffer": self.objects[0], "offset": off, "size": version.sizes[i](features)}
            entries.append({"binding": i, "resource": resource})
        return dev.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=entries)

    def _bind(self, spec: KernelSpec, pipeline: Any, constants: dict[int, Any],
              inputs: dict[int, Any] | None = None, dims: np.ndarray | None = None) -> Any:
        """GpuProgram.bind_input's rebinding, from the evaluated sizes (the specs hold the first sample's)."""
        k = next(k for k, v in enumerate(self.evaluated.versions) if v.spec is spec)
        return self._bind_version(k, self.evaluated.versions[k], pipeline, inputs)

    def launched(self, index: int) -> int:
        return int(np.prod(self.dispatches[index].groups)) * int(np.prod(self.evaluated.versions[index].workgroup))

    def macs(self, index: int) -> int:
        """Multiply-accumulates at this size; 0 where the count fits no expression (a report figure only)."""
        expr = self.evaluated.versions[index].macs
        return expr(self.evaluated.features) if expr is not None else 0

    def variant(self, index: int, workgroup: Any = None, decomposition: Any = None) -> Any:
        raise GpuEngineError("a program made from the symbolic plan has no variants (tune at a planned size)")


# -- helpers ----------------------------------------------------------------------------------------------------

def _atoms(rdp: SymbolicShapes, free: list[str]) -> tuple[list[Any], list[str]]:
    """The input symbols, then the distinct symbolic sizes RDP's shapes hold (up to MAX_ATOMS)."""
    from ..model.dims import ceil_div, symbol

    atoms: list[Any] = [(s, 1) for s in free]  # (symbol, k): ceil(symbol / k), computed directly
    names = list(free)
    for s in free:  # a kernel's tiles over a size: ceil(size / tile), tiles of tiles included (ceil(ceil(a/2)/2))
        for k in ATOM_TILES:
            atoms.append((s, k))
            names.append(str(ceil_div(symbol(s), k)))
    for t in rdp.symbolic_tensors():
        for d in rdp.shape(t):
            if is_symbolic(d) and str(d) not in names and len(atoms) < MAX_ATOMS:
                atoms.append(d)  # any other size RDP holds: evaluated by substitution
                names.append(str(d))
    return atoms, names


def atom_values(atoms: list[Any], env: dict[str, int]) -> list[int]:
    """The atoms' values at a size."""
    return [-(-env[a[0]] // a[1]) if isinstance(a, tuple) else int(substitute(a, env)) for a in atoms]


def _sample_envs(free: list[str], first: dict[str, int]) -> list[dict[str, int]]:
    """The first size, every symbol large together (the fat class), then SAMPLE_VALUES paired across the symbols
    in shifted orders (one symbol: every size up to DENSE too). The validation sizes add what these miss."""
    n = len(SAMPLE_VALUES)
    envs = [dict(first)]
    for value in LARGE:
        envs.append({s: value for s in free})
    for i in range(n):
        env = {s: SAMPLE_VALUES[(i + SHIFTS[k % len(SHIFTS)] * (k > 0)) % n] for k, s in enumerate(free)}
        if env not in envs:
            envs.append(env)
    if len(free) == 1:
        envs += [{free[0]: v} for v in range(1, DENSE + 1) if {free[0]: v} not in envs]
    return envs


def _validation_envs(free: list[str]) -> list[dict[str, int]]:
    """Sizes no sample has, to check the fitted expressions against the planner."""
    return [{s: VALIDATION[(i + 3 * k) % len(VALIDATION)] for k, s in enumerate(free)} for i in range(len(VALIDATION))]


def _shapes_at(graph: Graph, rdp: SymbolicShapes, env: dict[str, int]) -> dict[int, tuple[int, ...]]:
    shapes = rdp.evaluate(env)
    return {t: shapes[t] for t in graph.inputs}


def _signature(program: GpuProgram) -> Any:
    """What must not change across sizes for one plan to serve them: the dispatches' kernels and bindings, the
    tensors' lifetimes."""
    specs = program.sources
    return (tuple(program.inputs), tuple(program.outputs),
            tuple((s.shader, tuple((b.name, b.tensor, b.raw, b.writable, b.data is not None, bool(b.scratch_bytes))
                                   for b in s.bindings)) for s, _ in specs),
            tuple((r.tensor, r.first, r.last) for r in program.info.records))


def _ranges(free: list[str], samples: list[_Sample], misfits: list[dict[str, int]]) -> dict[str, tuple[int, int]]:
    """Per symbol the sampled range the plan serves: from the smallest to the largest fitting sample, cut below the
    first size at which the structure changed (a misfit inside the box)."""
    ranges = {s: (min(x.env[s] for x in samples), max(x.env[s] for x in samples)) for s in free} if samples else {}
    for env in sorted(misfits, key=lambda e: max(e.values())):
        if all(ranges[s][0] <= env[s] <= ranges[s][1] for s in free):
            low = [s for s in free if env[s] == ranges[s][0]]
            if low:  # a size at the bottom of the range (1: kernels simplify there)
                ranges[low[0]] = (env[low[0]] + 1, ranges[low[0]][1])
            else:
                s = max(free, key=lambda s: env[s] / max(1, ranges[s][1]))
                ranges[s] = (ranges[s][0], env[s] - 1)
    return ranges


def _dispatch(d: int, samples: list[_Sample], values: np.ndarray) -> SymbolicDispatch | str | set[int]:
    """Dispatch d's versions (one per shape class where its kernel offers decompositions) with their expressions;
    the samples whose text takes another form, when some do."""
    specs = [s.program.sources[d][0] for s in samples]
    shader = specs[0].shader
    rows_expr = None
    picks = [spec.decomposition for spec in specs]
    out_tensor = specs[0].output_tensor
    if specs[0].variants is not None and out_tensor is not None:
        rows = []
        for s in samples:
            shape = s.program.graph.tensors[out_tensor].shape
            rows.append(int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1)
        rows_expr = _fit(values, np.array(rows))
        if rows_expr is None:
            return f"dispatch {d} ({shader}): its output's rows fit no expression"
        by_class: dict[str, Counter] = {name: Counter() for name, _ in CLASSES}
        for r, pick in zip(rows, picks):
            by_class[shape_class(r)][pick] += 1
        chosen: dict[str, Any] = {}
        names = [name for name, _ in CLASSES]
        for i, name in enumerate(names):
            near = sorted(range(len(names)), key=lambda j: (abs(j - i), j))
            source_class = next((names[j] for j in near if by_class[names[j]]), None)
            chosen[name] = by_class[source_class].most_common(1)[0][0] if source_class else picks[0]
    else:
        chosen = {"one": picks[0] if specs[0].variants is not None else None}
    versions: dict[Any, Version] = {}
    classes = {}
    for name, decomposition in chosen.items():
        if decomposition not in versions:
            got = _version(d, decomposition, samples, values)
            if isinstance(got, set):
                return got
            if isinstance(got, str):
                return f"dispatch {d} ({shader}): {got}"
            versions[decomposition] = got
        classes[name] = versions[decomposition]
    return SymbolicDispatch(shader, rows_expr, classes)


def _describe(decomposition: Any, workgroup: tuple[int, int, int]) -> str:
    if decomposition is None:
        return f"workgroup {'x'.join(map(str, workgroup))}"
    d = decomposition
    return f"tile {'x'.join(map(str, d.tile))} split {d.split} group {d.group}" + (" subgroup" if d.subgroup else "")


def _version(d: int, decomposition: Any, samples: list[_Sample], values: np.ndarray) -> Version | str | set[int]:
    """The dispatch at every sample put in `decomposition` (and one workgroup size), its size-dependent numbers
    hoisted and each fitted."""
    first_spec = samples[0].program.sources[d][0]
    fixed = tuple(first_spec.workgroup) if decomposition is None else None
    # small constants in buffers, not the text: a table the sizes decide (a resize's coordinates) is then data
    ours = samples[0].program.as_version(first_spec, decomposition, fixed, True)
    if ours is None:
        return "its version cannot be made at the first sample"
    workgroup = tuple(ours.workgroup)
    versions, texts = [], []
    for s in samples:
        spec = s.program.as_version(s.program.sources[d][0], decomposition, workgroup, True)
        if spec is None:
            return f"no version in {_describe(decomposition, workgroup)} at {s.env}"
        versions.append(spec)
        texts.append(s.program.render(spec))
    binding = len(codegen.bound(ours))
    kernel = hoist(ours.shader, workgroup, decomposition, texts[0], texts[1:], binding)  # type: ignore[arg-type]
    explicit = ours.dispatch is not None
    grid = []
    for axis in range(3):
        column = np.array([(v.dispatch if explicit else v.grid)[axis] for v in versions])
        expr = _fit(values, column)
        if expr is None:
            return f"its grid's axis {axis} fits no expression"
        grid.append(expr)
    counts = np.array([codegen.dispatch_size(v) for v in versions], np.int64)
    dims: list[Expr | int] = []  # an int: the workgroup count on that axis
    floats: list[bool] = []
    if kernel is not None:
        words = [kernel.values(text) for text in texts]
        if any(w is None for w in words):
            return {k for k, w in enumerate(words) if w is None}
        for slot, k in enumerate(kernel.hoisted):
            digits, suffix = kernel.numbers[k]
            is_float = any(c in digits for c in ".eE") or suffix in ("f", "h")
            column = [w[slot] for w in words]  # type: ignore[index]
            if is_float:
                numbers = np.array(column, np.uint32).view(np.float32).astype(np.float64)
                if not np.all(numbers == np.rint(numbers)):
                    return "a size-dependent float that is not an integer"
                column = numbers.astype(np.int64)
            else:
                column = np.array(column, np.int64)
                column = np.where(column >= 2 ** 31, column - 2 ** 32, column)  # i32 bit patterns
            groups = [k for k in range(3) if np.array_equal(np.asarray(column), counts[:, k])]
            if groups:  # a workgroup count (a folded grid's width): from the grid's expression, exactly
                dims.append(groups[0])
                floats.append(is_float)
                continue
            expr = _fit(values, np.asarray(column))
            if expr is None:
                return f"gpe_dims word {slot} fits no expression"
            dims.append(expr)
            floats.append(is_float)
    sizes = {}
    for i, b in enumerate(codegen.bound(ours)):
        if b.data is not None or (b.raw and not b.scratch_bytes):
            continue
        column = np.array([b2.scratch_bytes if b.scratch_bytes else
                           binding_bytes(b2, s.program.graph, s.program.precision)
                           for s, v in zip(samples, versions) for b2 in [codegen.bound(v)[i]]])
        expr = _fit(values, column)
        if expr is None:
            return f"the bytes of binding {b.name} fit no expression"
        sizes[i] = expr
    tables: dict[int, tuple[Any, ...]] = {}
    for i, b in enumerate(codegen.bound(ours)):
        if b.data is None or all(np.array_equal(codegen.bound(v)[i].data, b.data) for v in versions):
            continue
        got = _table(ours, i, samples, versions, values)
        if isinstance(got, str):
            return got
        tables[i] = got
    # for reports only (inspect, profile): None where no expression fits
    macs = _fit(values, np.array([dispatch_macs(v, s.program.graph) for s, v in zip(samples, versions)]))
    source = kernel.source if kernel is not None else texts[0]
    return Version(_describe(decomposition, workgroup), decomposition, workgroup, ours, source, kernel, dims,
                   floats, tuple(grid), explicit, sizes, tables, macs)  # type: ignore[arg-type]


# kernels whose size-dependent constant the symbolic plan computes with the kernel's own function: per output row
# and column, the source coordinates (lowering/kernels/resize.py), from its sizes' expressions
TABLES = {"resize_bilinear": bilinear_table, "resize_nearest": nearest_table}


def _table(ours: KernelSpec, i: int, samples: list[_Sample], versions: list[KernelSpec],
           values: np.ndarray) -> tuple[Any, ...] | str:
    """How binding i's size-dependent table is made at a size: its kernel's table function and the expressions of
    the sizes it takes; a reason when the kernel has none (a constant that depends on the sizes)."""
    table = TABLES.get(ours.shader)
    if table is None:
        return f"its constant {codegen.bound(ours)[i].name} depends on the sizes"
    op = samples[0].program.graph.ops[ours.ops[0]]
    align, half = bool(op.opt("align_corners", False)), bool(op.opt("half_pixel_centers", False))
    sizes = []
    for name in ("IH", "H", "IW", "W"):
        expr = _fit(values, np.array([int(v.params[name]) for v in versions]))  # type: ignore[arg-type]
        if expr is None:
            return f"its table's size {name} fits no expression"
        sizes.append(expr)
    for v in versions:  # the function at the fitted sizes gives every sample's table
        ih, h, iw, w = (int(v.params[n]) for n in ("IH", "H", "IW", "W"))  # type: ignore[arg-type]
        made = np.concatenate([table(ih, h, align, half), table(iw, w, align, half)]).reshape(-1)
        if not np.array_equal(made, codegen.bound(v)[i].data):
            return "its table is not its kernel's table function of its sizes"
    return (table, align, half, *sizes)


__all__ = ["CLASSES", "Buffers", "SizedProgram", "SymbolicPlan", "fit", "plan_for", "shape_class"]

