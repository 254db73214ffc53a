"""Lowering of a partition's ops to dispatches, with elementwise fusion.

An op whose kernel offers `as_epilogue` (elementwise unary/binary ops) is emitted into the epilogue of the
kernel that writes one of its inputs, when that input is read by nothing else, stays inside the partition,
has the op's output shape, and every other input is ready before that kernel runs. The fused input is then
never materialized. Chains fuse transitively (the grown kernel is again a producer), so elementwise ops with
no fusable producer still merge among themselves.
"""

from __future__ import annotations

from collections.abc import Callable

from ..model.ir import Graph, Op
from ..model.ops import GROUPS, KV_CACHE_WRITE, KV_EPILOGUE
from ..model.quantization import is_quantized
from .codegen import bound, has_epilogue, is_baked
from .kernels import kv_epilogue, registry
from .kernels.base import Alias, Decomposition, FusedOp, KernelSpec, Variants, finishing_each
from .kernels.common import fake_quant, holds_integers
from .kernels.kv_cache import writes
from .kernels.prologue import model_ops
from .layout import to_bhwc

Decide = Callable[[Variants], Decomposition]


def first_candidate(variants: Variants) -> Decomposition:
    """The decomposition with the most work per invocation (what a caller without a target gets)."""
    return variants.candidates[0]


def lower(graph: Graph, ops: list[int], outputs: list[int], fuse: bool = True,
          ready_before: set[int] | None = None, decide: Decide = first_candidate, max_bindings: int | None = None,
          split_writes: bool = True) -> tuple[list[KernelSpec], dict[int, int]]:
    """Specs in execution order and output->source aliases. `ready_before`: tensors available from the
    start (partition inputs, written by the boundary converters, which run first). `decide` picks the
    decomposition of every dispatch a kernel offers in several (the runtime: tuning cache, else policy).
    max_bindings: the device's storage buffers per shader stage; an epilogue that would bind more is not fused, and
    (split_writes) KV cache writes sharing a dispatch that would bind more get one dispatch each."""
    specs: list[KernelSpec] = []
    aliases: dict[int, int] = {}
    writer: dict[int, int] = {t: -1 for t in (ready_before or set())}  # tensor -> index of the spec writing it
    consumers = graph.consumers()
    keep = set(outputs) | set(graph.outputs)
    for op_i in ops:
        op = graph.ops[op_i]
        kernel = registry.kernel_for(op)
        if fuse and hasattr(kernel, "as_epilogue") and _try_fuse(op_i, op, kernel, graph, specs, writer,
                                                                 consumers, keep, aliases, max_bindings):
            continue
        for item in _build_to_fit(op, kernel, graph, max_bindings if split_writes else None):
            if isinstance(item, Variants):
                item = item.resolve(decide(item))
            if isinstance(item, KernelSpec):
                requantize(item, graph, op)
            if isinstance(item, Alias):
                aliases[item.output] = item.source
                writer[item.output] = writer.get(item.source, -1)
            else:
                if not item.ops:
                    item.ops = [op_i]
                specs.append(item)
                for b in item.bindings:
                    if b.writable and b.tensor is not None:
                        writer[b.tensor] = len(specs) - 1
    return specs, aliases


SPLIT_TO_FIT = "split to fit the device's storage buffers"


def _build_to_fit(op: Op, kernel: object, graph: Graph, max_bindings: int | None) -> list:
    """The op's lowering; where a KV_CACHE_WRITE sharing one dispatch among several writes (a layer's K and V, the
    rotated query) would bind more storage buffers than the device allows, each write as its own dispatch instead:
    the same arithmetic, since the writes store disjoint outputs and read only the op's inputs."""
    items = kernel.build(op, graph)  # type: ignore[attr-defined]
    if max_bindings is not None and op.opt(KV_EPILOGUE) and any(
            isinstance(item, KernelSpec) and len(bound(item)) > max_bindings for item in _specs(items)):
        # a projection carrying a KV cache write: the projection, then the write (itself split to fit)
        fc, write = kv_epilogue.split(op)

        def labelled(spec: KernelSpec) -> KernelSpec:
            if SPLIT_TO_FIT not in (spec.label or ""):
                spec.label = f"{spec.label or ''} [{SPLIT_TO_FIT}: {max_bindings}]"
            return spec

        return finishing_each([*kernel.build(fc, graph),  # type: ignore[attr-defined]
                               *_build_to_fit(write, registry.kernel_for(write), graph, max_bindings)], labelled)
    if max_bindings is None or op.code != KV_CACHE_WRITE or not op.opt(GROUPS) or not any(
            isinstance(item, KernelSpec) and len(bound(item)) > max_bindings for item in items):
        return items
    split: list = []
    for single in writes(op):
        for item in registry.kernel_for(single).build(single, graph):
            if isinstance(item, KernelSpec):
                item.label = f"{item.label or single.code} [{SPLIT_TO_FIT}: {max_bindings}]"
            split.append(item)
    return split


def _specs(items: list) -> list[KernelSpec]:
    """The specs of a lowering, a Variants as its first decomposition (the storage buffers it binds are the same in
    every one)."""
    return [item.make(item.candidates[0]) if isinstance(item, Variants) else item for item in items
            if isinstance(item, (Variants, KernelSpec))]


def _move_to_end(specs: list[KernelSpec], writer: dict[int, int], index: int) -> None:
    specs.append(specs.pop(index))
    for tensor, w in writer.items():
        if w > index:
            writer[tensor] = w - 1
        elif w == index:
            writer[tensor] = len(specs) - 1


def _try_fuse(op_i: int, op: Op, kernel: object, graph: Graph, specs: list[KernelSpec], writer: dict[int, int],
              consumers: dict[int, list[int]], keep: set[int], aliases: dict[int, int],
              max_bindings: int | None = None) -> bool:
    out = op.outputs[0]
    for position, t in enumerate(op.inputs):
        if t < 0 or t in keep or len(consumers.get(t, [])) != 1 or writer.get(t, -1) < 0:
            continue
        # A RESHAPE alias of a dispatch's output read by nothing else (Gemma's embedding rows, reshaped, times
        # sqrt(width)): the op fuses into that dispatch, whose output it then is; the alias is never read.
        source = aliases.get(t, t)
        if source != t and (source in aliases or source in keep or len(consumers.get(source, [])) != 1
                            or to_bhwc(graph.tensors[source].shape) != to_bhwc(graph.tensors[out].shape)):
            continue
        spec = specs[writer[t]]
        if spec.output_tensor != source or not has_epilogue(spec):
            continue
        if to_bhwc(graph.tensors[t].shape) != to_bhwc(graph.tensors[out].shape):
            continue
        if holds_integers(graph.tensors[t]) != holds_integers(graph.tensors[out]):
            continue  # a dispatch writes integers (f32 storage) or floats (the precision's), never both kinds
        others = [u for k, u in enumerate(op.inputs) if k != position and u >= 0 and graph.tensors[u].data is None]
        if any(u in (t, source) or u not in writer for u in others):
            continue
        epilogue = kernel.as_epilogue(op, graph, position, f"f{len(spec.ops)}_")  # type: ignore[attr-defined]
        if epilogue is None:
            continue
        if max_bindings is not None and (len(bound(spec)) + sum(not is_baked(b) for b in epilogue.bindings)
                                         > max_bindings):
            continue  # the grown dispatch would bind more storage buffers than the device allows: its own dispatch
        if any(writer[u] >= writer[t] for u in others):
            # Another operand is written later: run the producer after it. Safe, since its output is read
            # by this op alone and its inputs stay live until it runs (lifetimes come from the final order).
            _move_to_end(specs, writer, writer[t])
        code = "+".join(model_ops(op))
        lines = [*epilogue.lines, *([fake_quant(graph.tensors[out])] if is_quantized(graph.tensors[out]) else [])]
        apply_fused(spec, FusedOp(op_i, code, source, out, lines, epilogue.functions, epilogue.bindings))
        writer[out] = writer.pop(t)
        writer.pop(source, None)
        return True
    return False


def requantize(spec: KernelSpec, graph: Graph, op: Op | None = None) -> None:
    """A spec writing a quantized tensor rounds its values to the tensor's grid in its epilogue (kernels/common.py
    fake_quant), after its own activation; kept in spec.quantize for re-decomposed copies. Where the op's kernel
    knows how LiteRT's integer kernel rounds that op (`integer_requantize(op, graph)`, e.g. MEAN's double
    rounding), its op's own output gets that rounding instead."""
    t = spec.output_tensor
    if t is not None and is_quantized(graph.tensors[t]) and has_epilogue(spec):
        exact = None
        if op is not None and t == op.outputs[0]:
            integer_requantize = getattr(registry.kernel_for(op), "integer_requantize", None)
            exact = integer_requantize(op, graph) if integer_requantize is not None else None
        spec.quantize = [exact or fake_quant(graph.tensors[t])]
        spec.epilogue.extend(spec.quantize)


def apply_fused(spec: KernelSpec, fused: FusedOp) -> None:
    """Emit one elementwise op into spec's epilogue: it now writes fused.output instead of fused.source."""
    spec.epilogue.extend(fused.lines)
    spec.functions.extend(fused.functions)
    for b in spec.bindings:
        if b.writable and b.tensor == fused.source:
            b.tensor = fused.output
    out_binding = next(b for b in spec.bindings if b.writable and b.tensor == fused.output)
    spec.bindings.remove(out_binding)
    spec.bindings.extend([*fused.bindings, out_binding])
    spec.ops.append(fused.op)
    spec.label = f"{spec.label}+{fused.code}" if spec.label else fused.code
    spec.fused.append(fused)


def redecompose(spec: KernelSpec, decomposition: Decomposition) -> KernelSpec:
    """The same dispatch (op, fused epilogue and all) in another of its decompositions (for the tuner)."""
    if spec.variants is None:
        raise ValueError(f"dispatch {spec.label!r} offers no decompositions")
    new = spec.variants.resolve(decomposition)
    new.quantize = list(spec.quantize)
    new.epilogue.extend(new.quantize)
    new.ops = spec.ops[:len(spec.ops) - len(spec.fused)]
    for fused in spec.fused:
        apply_fused(new, fused)
    return new
