"""Op-level validation, before anything runs a model: a malformed op becomes a ModelError naming the op index,
the op and what is wrong, instead of a LiteRT prepare error in the CPU fallback, a division by zero in a
kernel's arithmetic or WGSL that does not compile.

The reader (model/reader.py) checks the file format: offsets, index ranges, buffer sizes. This module checks
what the ops make of it:

* dataflow, for every op: each input is a constant, a graph input, a variable or the output of an earlier op;
  each tensor is written once, never a constant or a graph input; every graph output is written;
* subgraph references (WHILE, IF, CALL_ONCE, STABLEHLO_COMPOSITE ...) in range, with matching input and output
  counts and no cycles;
* per op, from the RULES table (each op family's rules, model/families/): input/output counts, which inputs may be
  omitted (-1), ranks, dtypes, option ranges (enums, strides >= 1, axes in range), constant operands (paddings >= 0,
  a permutation for TRANSPOSE, gather indices in range ...) and, where the shape rule is simple, the declared output
  shapes against the inputs (skipped for tensors whose shape_signature has -1: their declared shape is a
  placeholder);
* memory: the bytes of all non-constant tensors against what this process can still allocate, so a huge
  declared shape is refused before any allocation.

Ops without a rule (custom ops, rare builtins) get the generic checks only. Options that are absent, or
stored as another op's options table, read as the schema's defaults, as LiteRT reads them (a CONV_2D without
Conv2DOptions has stride 0).
"""


from __future__ import annotations

import os
import resource

import numpy as np

from ..errors import ModelError
from .builder import options_kind
from .families import merged
from .families._common import (  # noqa: F401 - the rule machinery, importable from here as before
    ELEMENT_TYPES,
    Invalid,
    OpView,
    Rule,
    check_element_types,
    schema_default,
    window_out_size,
)
from .ir import Graph, Model, Op, Tensor

# Every op's validation rule, from its family module (model/families/<family>.py RULES).
RULES: dict[str, Rule] = merged("RULES")


# -- validation -----------------------------------------------------------------------------------------------------
def validate_model(model: Model) -> None:
    """Every subgraph, and the references between them; raises ModelError naming the first problem."""
    for g, graph in enumerate(model.subgraphs):
        validate_graph(graph, g, model)
    _check_calls(model)


def validate_graph(graph: Graph, subgraph: int = 0, model: Model | None = None) -> None:
    """One subgraph: dataflow, each op against its rule (generic checks for ops without one), then memory."""
    prefix = f"subgraph {subgraph} " if subgraph else ""
    _check_dataflow(graph, prefix)
    n_sub = len(model.subgraphs) if model is not None else None
    for pos, op in enumerate(graph.ops):
        try:
            _check_op(op, graph, subgraph, n_sub)
        except Invalid as e:
            raise ModelError(f"{prefix}op {pos} ({op.code}): {e}") from None
        except (IndexError, ValueError, TypeError, OverflowError, ZeroDivisionError) as e:
            raise ModelError(f"{prefix}op {pos} ({op.code}): malformed ({type(e).__name__}: {e})") from None
    check_memory(graph, prefix)


def _check_dataflow(graph: Graph, prefix: str) -> None:
    """Reads before writes, one writer per tensor, no writes to constants or graph inputs, outputs written."""
    tensors = graph.tensors
    producer: dict[int, int] = {}
    for pos, op in enumerate(graph.ops):
        for t in op.outputs:
            if t in producer:
                raise ModelError(f"{prefix}op {pos} ({op.code}): output tensor {t} ({tensors[t].name!r}) is also "
                                 f"written by op {producer[t]}")
            producer[t] = pos
    inputs = set(graph.inputs)
    for pos, op in enumerate(graph.ops):
        where = f"{prefix}op {pos} ({op.code})"
        for k, t in enumerate(op.inputs):
            if t < 0:
                continue
            tensor = tensors[t]
            if tensor.data is not None or tensor.is_variable or t in inputs:
                continue
            if t not in producer:
                raise ModelError(f"{where}: input {k} (tensor {t} {tensor.name!r}) is never written: it is not a "
                                 "constant, a graph input or an op's output")
            if producer[t] >= pos:
                raise ModelError(f"{where}: input {k} (tensor {t} {tensor.name!r}) is written by op {producer[t]}, "
                                 "which runs later (ops must be in execution order)")
        for t in op.outputs:
            tensor = tensors[t]
            if tensor.data is not None:
                raise ModelError(f"{where}: writes tensor {t} ({tensor.name!r}), which is a constant")
            if t in inputs:
                raise ModelError(f"{where}: writes tensor {t} ({tensor.name!r}), which is a graph input")
    for t in graph.outputs:
        tensor = tensors[t]
        if t not in producer and t not in inputs and tensor.data is None and not tensor.is_variable:
            raise ModelError(f"{prefix}graph output tensor {t} ({tensor.name!r}) is never written")


def _dynamic(t: Tensor) -> bool:
    return t.shape_signature is not None and any(d < 0 for d in t.shape_signature)


def _check_op(op: Op, graph: Graph, subgraph: int, n_sub: int | None) -> None:
    rule = RULES.get(op.code)
    if rule is not None and rule.custom != op.is_custom:
        rule = None  # a custom op named like a builtin (or the reverse): only the generic checks apply
    if op.options is not None:
        for name, value in op.options.fields.items():
            if name.endswith("subgraph_index") and value is not None and n_sub is not None:
                if not 0 <= int(value) < n_sub:
                    raise Invalid(f"{name} {value} is out of range (the model has {n_sub} subgraphs)")
                if int(value) == subgraph:
                    raise Invalid(f"{name} {value} refers to the op's own subgraph")
    if rule is None:
        return
    low, high = rule.inputs
    if not low <= len(op.inputs) <= (high if high is not None else len(op.inputs)):
        raise Invalid(f"has {len(op.inputs)} inputs, expected {_count(rule.inputs)}")
    low, high = rule.outputs
    if not low <= len(op.outputs) <= (high if high is not None else len(op.outputs)):
        raise Invalid(f"has {len(op.outputs)} outputs, expected {_count(rule.outputs)}")
    for k, t in enumerate(op.inputs):
        if t < 0 and k not in rule.optional:
            raise Invalid(f"input {k} is omitted (-1) but required")
    kind = rule.options or (None if rule.custom else options_kind(op.code))
    if kind is not None and op.options is not None and op.options.kind != kind:
        # LiteRT would read the options as absent while the GPU kernels read these fields: refuse, not diverge
        raise Invalid(f"carries {op.options.kind}, expected {kind}")
    view = OpView(op, graph, kind)
    for check in rule.checks:
        check(view)
    if rule.shape is None:
        return
    involved = [graph.tensors[t] for t in [*op.inputs, *op.outputs] if t >= 0]
    if any(_dynamic(t) for t in involved):
        return  # placeholders until LiteRT (or resize_tensor_input) computes them
    expected = rule.shape(view)
    if expected is None:
        return
    if len(expected) != len(op.outputs):
        raise Invalid(f"has {len(op.outputs)} outputs, expected {len(expected)}")
    for k, want in enumerate(expected):
        got = view.out_shape(k)
        if tuple(got) != tuple(want):
            raise Invalid(f"output {k} (tensor {op.outputs[k]} {view.out(k).name!r}) has shape {got}, expected "
                          f"{tuple(want)} from the input shapes and options")


def _count(limits: tuple[int, int | None]) -> str:
    low, high = limits
    return str(low) if low == high else (f"at least {low}" if high is None else f"{low} to {high}")


_CALLS = {"WHILE": ("cond_subgraph_index", "body_subgraph_index"), "IF": ("then_subgraph_index",
                                                                            "else_subgraph_index"),
          "CALL_ONCE": ("init_subgraph_index",), "STABLEHLO_COMPOSITE": ("decomposition_subgraph_index",)}


def _check_calls(model: Model) -> None:
    """Subgraphs called by control-flow and composite ops: arity that fits, and no subgraph calling itself
    through others (LiteRT would recurse until the stack runs out)."""
    calls: dict[int, set[int]] = {}
    for g, graph in enumerate(model.subgraphs):
        for pos, op in enumerate(graph.ops):
            for name in _CALLS.get(op.code, ()):
                value = op.opt(name)
                if value is None:
                    continue
                callee = model.subgraphs[int(value)]
                calls.setdefault(g, set()).add(int(value))
                where = f"{'subgraph ' + str(g) + ' ' if g else ''}op {pos} ({op.code})"
                ins = len(op.inputs) - (1 if op.code == "IF" else 0)
                outs = len(op.outputs)
                if name == "cond_subgraph_index":
                    outs = 1
                if name == "init_subgraph_index":
                    ins = outs = 0
                if len(callee.inputs) != ins or len(callee.outputs) != outs:
                    raise ModelError(f"{where}: {name} {value} takes {len(callee.inputs)} inputs and gives "
                                     f"{len(callee.outputs)} outputs; the op passes {ins} and expects {outs}")
    state: dict[int, int] = {}

    def visit(g: int, path: list[int]) -> None:
        state[g] = 1
        for callee in sorted(calls.get(g, ())):
            if state.get(callee) == 1:
                cycle = " -> ".join(str(x) for x in [*path, g, callee])
                raise ModelError(f"subgraphs call each other in a cycle: {cycle}")
            if callee not in state:
                visit(callee, [*path, g])
        state[g] = 2

    for g in sorted(calls):
        if g not in state:
            visit(g, [])


# -- memory --------------------------------------------------------------------------------------------------------
def available_bytes() -> int:
    """What this process can still allocate: physical memory, or less under an address-space limit."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 1 << 40
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return physical
    try:
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        mapped = 0
    return max(0, min(physical, soft - mapped))


def tensor_bytes(t: Tensor) -> int:
    """Bytes of a tensor's values (8 per string reference), in float64 arithmetic so no shape overflows."""
    itemsize = 8 if t.dtype == np.dtype(object) else t.dtype.itemsize
    return int(np.prod([max(d, 0) for d in t.shape], dtype=np.float64)) * itemsize


def check_memory(graph: Graph, prefix: str = "") -> None:
    """Refuse, before anything is allocated, a graph whose non-constant tensors need more bytes than this process
    can have. LiteRT raises nothing for this at load: its allocate_tensors fails (or the process is killed) once
    the arena is allocated; we raise ModelError at construction with the bytes it would take."""
    computed = [t for t in graph.tensors if t.data is None]
    total = sum(tensor_bytes(t) for t in computed)
    limit = available_bytes()
    if computed and total > limit:
        big = max(computed, key=tensor_bytes)
        raise ModelError(f"{prefix}the model's {len(computed)} non-constant tensors would need {total:,} bytes, "
                         f"more than the {limit:,} this process can allocate; the largest is tensor {big.index} "
                         f"({big.name!r}) of shape {big.shape} {big.dtype}: {tensor_bytes(big):,} bytes")
