"""Input expressions ("prologues"): elementwise ops evaluated by the kernel that reads their result.

Epilogue fusion (fusion.py) needs an input that only the elementwise op reads. Some ops have none: the
residual ADD of two tensors that other ops read too, or a squeeze-excitation MUL of x by a gate computed from x.
passes/fuse_input_expression.py folds such a tree of ops into the op reading its result, as the internal
option `prologue` (a tuple of Steps); that op's kernel then reads its input 0 through the generated
`load_<name>(pi, pb, ps)` below instead of a buffer, so the tree is neither dispatched nor materialized.

The tree's leaves are inputs of the consumer op (so partitioning, lifetimes and memory plans see them): input
0 is a leaf of the consumer's input shape, the others are appended after the kernel's own inputs. A leaf
either has that shape, or is per channel ([1|B, 1, 1, C]), or is a scalar constant.

The same Steps describe an ELEMENTWISE_TREE op (passes/fuse_elementwise_tree.py, kernels/elementwise.py), whose
leaf 0 is a value its host already holds (the producer's output in an epilogue): `tree_function`.
"""

from __future__ import annotations

from ...model.ir import Graph, Op
from ...model.ops import TREE_OPTION, leaf_kind
from ...model.ops import ExpressionStep as Step
from ..codegen import f32_literal
from ..layout import slices, to_phwc4
from . import registry
from .base import Binding, Code
from .common import tensor_values


def model_ops(op: Op) -> list[str]:
    """The codes of the model's ops an engine op stands for, in evaluation order: those folded into its input
    loads (option `prologue`), then its own, or for an ELEMENTWISE_TREE the ops of its tree."""
    tree = op.opt(TREE_OPTION)
    return [s.op.code for s in op.opt("prologue") or ()] + ([s.op.code for s in tree] if tree else [op.code])


def expression_of(op: Op) -> tuple[list[Code], list[Code]] | None:
    """(statements, helper functions) evaluating `op` inline, when its kernel offers that."""
    as_expression = getattr(registry.find(op), "as_expression", None)
    return as_expression(op) if as_expression is not None else None


def prologue_reason(op: Op, graph: Graph, first_leaf: int, option: str = "prologue") -> str | None:
    """None when op's `prologue` (or other Steps option) is one the kernel can evaluate; why not otherwise.
    Leaves other than input 0 are inputs first_leaf and up."""
    steps = op.opt(option)
    if not isinstance(steps, tuple) or not steps or not all(isinstance(s, Step) for s in steps):
        return f"{option} must be a non-empty tuple of Steps"
    x = graph.tensors[op.inputs[0]]
    if x.data is not None or len(x.shape) != 4:
        return f"{option} input 0 must be a rank-4 run-time tensor, not {x.shape}"
    used = set()
    for j, step in enumerate(steps):
        if expression_of(step.op) is None or registry.check(step.op, graph) is not None:
            return f"{option} step {step.op.code} cannot be evaluated inline"
        if len(step.args) != len(step.op.inputs):
            return f"{option} step {step.op.code} has {len(step.args)} operands for {len(step.op.inputs)} inputs"
        if graph.tensors[step.op.outputs[0]].shape != x.shape:
            return f"{option} step {step.op.code} does not produce the input shape {x.shape}"
        for arg in step.args:
            if arg < 0 and -1 - arg >= j:
                return f"{option} step {j} reads the result of a later step"
            if arg >= 0:
                if arg >= len(op.inputs) or (arg != 0 and arg < first_leaf) or op.inputs[arg] < 0:
                    return f"{option} operand {arg} is not a leaf input"
                if leaf_kind(graph, op.inputs[arg], x.shape) is None:
                    return f"{option} leaf {graph.tensors[op.inputs[arg]].name!r} cannot be broadcast to {x.shape}"
                used.add(arg)
    if 0 not in used:
        return f"the {option} does not read input 0"
    return None


def input_reader(op: Op, graph: Graph, name: str = "src", option: str = "prologue") -> tuple[Code, list[Binding], str]:
    """`fn load_<name>(pi: u32, pb: u32, ps: u32) -> vec4<f32>`: op's input 0 at PHWC4 vec4 index pi (batch pb,
    slice ps), computed by its prologue (the Steps in `option`); the leaves' bindings (input 0 as `<name>`); and a
    label suffix naming the fused ops."""
    helpers, body, bindings = _evaluate(op, graph, name, option, mask_padding=True)
    head = f"fn load_{name}(pi: u32, pb: u32, ps: u32) -> vec4<f32> {{\n  let x = vec4<f32>({name}[pi]);\n"
    text = "".join(f"{h}\n" for h in dict.fromkeys(helpers)) + head + body + "}\n"
    label = " (input: " + "+".join(step.op.code for step in op.opt(option)) + ")"
    return Code(text), [Binding(name, tensor=op.inputs[0]), *bindings], label


def tree_function(op: Op, graph: Graph, name: str, option: str) -> tuple[Code, list[Code], list[Binding]]:
    """`fn <name>(x: vec4<f32>, pi: u32, pb: u32, ps: u32) -> vec4<f32>`: op's Steps evaluated with leaf 0 = x
    (a value the caller already holds, e.g. a producer's output in its epilogue) at PHWC4 vec4 index pi; the
    helper functions it calls (separate, so a shader that has them already gets each once) and the bindings of
    the other leaves, named `<name>_in<k>`. Padding lanes are left to the caller: an epilogue's host zeroes them
    after the epilogue (codegen.epilogue)."""
    helpers, body, bindings = _evaluate(op, graph, name, option, mask_padding=False)
    head = f"fn {name}(x: vec4<f32>, pi: u32, pb: u32, ps: u32) -> vec4<f32> {{\n"
    return Code(head + body + "}\n"), list(dict.fromkeys(helpers)), bindings


def _evaluate(op: Op, graph: Graph, name: str, option: str, mask_padding: bool
              ) -> tuple[list[Code], str, list[Binding]]:
    """The helper functions, the body (ending in a return) and the bindings of the leaves after leaf 0 of a
    function evaluating op's Steps at vec4 index pi / batch pb / slice ps, with leaf 0 in the variable `x`.
    Leaf k > 0 is bound as `<name>_in<k>` (scalars are literals)."""
    steps = op.opt(option)
    shape = graph.tensors[op.inputs[0]].shape
    s, rem = slices(shape[3]), shape[3] % 4
    reads: dict[int, str] = {0: "x"}
    bindings: list[Binding] = []
    helpers: list[Code] = []
    body: list[str] = []

    def leaf(k: int) -> str:
        if k not in reads:
            tensor = graph.tensors[op.inputs[k]]
            var = f"{name}_in{k}"
            kind = leaf_kind(graph, op.inputs[k], shape)
            if kind == "scalar":
                value = float(tensor_values(tensor).reshape(-1)[0])
                reads[k] = f"vec4<f32>({f32_literal(value)})"
                return reads[k]
            if tensor.data is None:
                bindings.append(Binding(var, tensor=op.inputs[k]))
            else:
                frame = (1, 1, 1, shape[3]) if kind == "channel" else shape
                bindings.append(Binding(var, data=to_phwc4(tensor_values(tensor).reshape(frame))))
            index = {"full": "pi", "channel": "ps", "batch_channel": f"pb * {s}u + ps"}[kind]  # type: ignore[index]
            reads[k] = f"vec4<f32>({var}[{index}])"
        return reads[k]

    for j, step in enumerate(steps):
        statements, functions = expression_of(step.op)  # type: ignore[misc]
        helpers += functions
        operands = [f"let {n} = {leaf(a) if a >= 0 else f'r{-1 - a}'};" for n, a in zip("ab", step.args)]
        body.append(f"  var r{j}: vec4<f32>;\n  {{\n    " + "\n    ".join([*operands, "var value: vec4<f32>;",
                                                                       *statements, f"r{j} = value;"]) + "\n  }")
    last = f"r{len(steps) - 1}"
    # Padding lanes must stay zero (a DIV or LOG there would give NaN, and NaN * 0 weight is NaN).
    if rem and mask_padding:
        mask = ", ".join("true" if i < rem else "false" for i in range(4))
        body.append(f"  if (ps == {s - 1}u) {{ {last} = select(vec4<f32>(0.0), {last}, vec4<bool>({mask})); }}")
    return helpers, "\n".join(body) + f"\n  return {last};\n", bindings
