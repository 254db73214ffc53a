"""KernelSpec -> WGSL text: fill a shader template with baked numbers, bindings and the fused epilogue."""

from __future__ import annotations

import functools
import math
import re
import string
from importlib import resources

import numpy as np

from .kernels.base import Binding, Code, Decomposition, KernelSpec

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# -- shader files ----------------------------------------------------------------------------------------------
# Every kernel's WGSL is a file: shaders/<kernel>.wgsl, a string.Template whose ${PLACEHOLDERS} the kernel fills with
# what varies per dispatch (baked numbers, generated expressions, unrolled lists). Pieces several shaders share are
# snippet files under shaders/include/, pulled in by a line `#include "<path>"` (path relative to shaders/include/):
# the line is replaced by the snippet, each of its lines indented as the include line is. A snippet's leading
# comment lines are its documentation and are not included; a snippet may include others (not itself, directly or
# not). Both are resolved once, when a file is first loaded.
INCLUDE_DIR = "include"
_INCLUDE = re.compile(r'^(?P<indent>[ \t]*)#include "(?P<path>[^"]*)"[ \t]*$')
_INCLUDE_PATH = re.compile(r"^[A-Za-z0-9_]+(/[A-Za-z0-9_]+)*\.wgsl$")


class ShaderIncludeError(ValueError):
    """A shader file names an include that is missing, malformed or includes itself."""


def _shader_file(path: str) -> str:
    """The text of shaders/<path> as packaged."""
    return resources.files("gpuengine.shaders").joinpath(path).read_text()


def _resolve(text: str, where: str, stack: tuple[str, ...]) -> str:
    """text with its #include lines replaced by the snippets they name (where: the file, for errors; stack: the
    snippets being resolved, none of which may include itself)."""
    out = []
    for line in text.splitlines(keepends=True):
        content = line.rstrip("\r\n")
        match = _INCLUDE.match(content)
        if match is None:
            out.append(line)
            continue
        body = _load_snippet(match["path"], where, stack).removesuffix("\n")
        if match["indent"]:
            body = "\n".join(match["indent"] + piece if piece else piece for piece in body.split("\n"))
        out.append(body + line[len(content):])
    return "".join(out)


def _load_snippet(path: str, where: str, stack: tuple[str, ...]) -> str:
    if not _INCLUDE_PATH.match(path):
        raise ShaderIncludeError(f"{where}: invalid include path {path!r}")
    if path in stack:
        raise ShaderIncludeError(f"{where}: include loop {' -> '.join((*stack, path))}")
    try:
        text = _shader_file(f"{INCLUDE_DIR}/{path}")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:
        raise ShaderIncludeError(f"{where}: included file {INCLUDE_DIR}/{path} not found") from e
    lines = text.splitlines(keepends=True)
    while lines and lines[0].lstrip().startswith("//"):
        lines.pop(0)
    return _resolve("".join(lines), f"{INCLUDE_DIR}/{path}", (*stack, path))


@functools.cache
def snippet(path: str) -> str:
    """The shared WGSL piece shaders/include/<path>, its documentation comment dropped and its includes resolved
    (for kernels that add a piece to a shader's text themselves, e.g. the math helpers an expression calls)."""
    return _load_snippet(path, "snippet()", ())


def fill(path: str, params: dict[str, int | float | bool | Code], indent: str = "") -> Code:
    """The snippet shaders/include/<path> with its placeholders filled (numbers as WGSL literals, Code as it is), for
    a piece a kernel chooses per dispatch and passes as a template's placeholder; `indent` is put before every line
    after the first (the placeholder's own indentation gives the first), before the values go in."""
    text = snippet(path).removesuffix("\n").replace("\n", "\n" + indent)
    try:
        return Code(string.Template(text).substitute({k: literal(v) for k, v in params.items()}))
    except KeyError as e:
        raise ValueError(f"shader snippet {INCLUDE_DIR}/{path} needs parameter {e.args[0]!r}, not given") from e


@functools.cache
def load_template(name: str) -> string.Template:
    """shaders/<name>.wgsl with its includes resolved."""
    if not _NAME.match(name):
        raise ValueError(f"invalid shader template name {name!r}")
    return string.Template(_resolve(_shader_file(f"{name}.wgsl"), f"{name}.wgsl", ()))


def literal(value: int | float | bool | Code) -> str:
    """A WGSL literal for a Python number; Code passes through. Anything else is refused."""
    if isinstance(value, Code):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"non-finite constant {value} cannot be baked into WGSL")
        text = repr(float(value))
        return text if ("." in text or "e" in text) else text + ".0"
    raise TypeError(f"only numbers and Code may be baked into WGSL, got {type(value).__name__}")


def vec4_literal(values: list[float]) -> Code:
    return Code("vec4<f32>(" + ", ".join(literal(float(v)) for v in values) + ")")


def f32_array_literal(values: list[float]) -> Code:
    return Code(f"array<f32, {len(values)}>(" + ", ".join(literal(float(v)) for v in values) + ")")


# -- WebGPU implementations ------------------------------------------------------------------------------------
# The engine's WGSL is the same for both, except the enable directives: the WGSL spec (and Dawn's Tint) requires
# `enable subgroups;` before a shader uses a subgroup builtin, and naga in wgpu-native 0.32 rejects the directive.
IMPLEMENTATIONS = ("wgpu", "dawn")  # wgpu-py on wgpu-native (naga; the default), wgpudawn on Dawn (Tint)
_SUBGROUP_USE = re.compile(r"\bsubgroup[A-Z][A-Za-z]*\s*\(|@builtin\(\s*(subgroup_[a-z_]+|num_subgroups)\s*\)")


def uses_subgroups(text: str) -> bool:
    """Whether WGSL text calls a subgroup builtin function or reads a subgroup builtin value."""
    return _SUBGROUP_USE.search(text) is not None


def enable_directives(text: str, f16: bool, webgpu: str = "wgpu") -> str:
    """The enable directives a shader's text needs on implementation `webgpu`: f16 when `f16`; subgroups on Dawn
    when the text uses them (naga enables subgroups with the device feature and rejects the directive)."""
    if webgpu not in IMPLEMENTATIONS:
        raise ValueError(f"WebGPU implementation {webgpu!r} is not one of {', '.join(IMPLEMENTATIONS)}")
    out = "enable f16;\n" if f16 else ""
    if webgpu == "dawn" and uses_subgroups(text):
        out += "enable subgroups;\n"
    return out


# Non-finite f32 constants: a constant expression evaluating to inf or NaN is a shader-creation error in WGSL
# (naga lets it through, Tint does not), and a bitcast of a literal is a constant expression. A call of a
# function declared in the shader is not, so non-finite values are made at run time by NONFINITE_F32, which
# render() appends to any shader that calls it; drivers fold the call like the literal it replaces.
NONFINITE_F32 = "nonfinite_f32"


def nonfinite_f32(value: float) -> str:
    """The WGSL expression of an f32 infinity or NaN (its bit pattern, made at run time)."""
    return f"{NONFINITE_F32}({int(np.float32(value).view(np.uint32)):#x}u)"


BAKE_LIMIT = 64  # constant vec4 arrays up to this length are baked into the shader instead of bound
PRECISIONS = ("fp32", "fp16")
STORAGE_TYPES = ("S1", "S4", "SM")  # element types that follow the precision (kernels/base.py Binding.element)


def preamble(precision: str, enable_f16: bool | None = None, store: str | None = None) -> str:
    """The storage type aliases every shader starts with (kernels/base.py's template contract): S1, S4, SM, the
    types a dispatch computes its products in and holds constants as, and D4, the type it stores (store: its
    precision, default the same), after `enable f16;` when enable_f16 (default: when an alias is f16; a dispatch
    computing in f32 in an fp16 program may still read and write f16 tensors). render() adds the other enable
    directives, which depend on the whole text."""
    for p in (precision, store or precision):
        if p not in PRECISIONS:
            raise ValueError(f"precision {p!r} is not one of {', '.join(PRECISIONS)}")
    scalar = "f16" if precision == "fp16" else "f32"
    stored = "f16" if (store or precision) == "fp16" else "f32"
    if enable_f16 is None:
        enable_f16 = "f16" in (scalar, stored)
    enable = "enable f16;\n" if enable_f16 else ""
    return (f"{enable}alias S1 = {scalar};\nalias S4 = vec4<{scalar}>;\nalias SM = mat4x4<{scalar}>;\n"
            f"alias D4 = vec4<{stored}>;\n")


def dispatch_precision(spec: KernelSpec, precision: str) -> str:
    """The precision of a dispatch's arithmetic aliases: f32 when it writes integers (kernels/common.py
    EXACT_TYPES: int32 / bool tensors stay f32 in fp16 programs) or reads or writes a tensor kept in f32 (mixed
    precision: converting it to f16 for the products would undo the point), else the program's."""
    return "fp32" if any((b.exact and b.writable) or b.wide for b in spec.bindings) else precision


def store_precision(spec: KernelSpec, precision: str) -> str:
    """The storage precision of what a dispatch writes (alias D4): f32 for integer and kept-f32 tensors (a dispatch
    writes one kind, runtime/program.py kept_f32), else the program's."""
    return "fp32" if any(b.exact and b.writable for b in spec.bindings) else precision


def storage_element(b: Binding, spec_precision: str, precision: str) -> str:
    """A binding's array element type: its storage type as the aliases say, except where the binding's precision
    differs from the dispatch's (an integer tensor read by an f16 dispatch, an f16 tensor read by a dispatch
    writing integers): then the concrete type. Reads always convert (`vec4<f32>(src[i])`), so either works."""
    own = "fp32" if b.exact else precision
    if b.element not in STORAGE_TYPES or own == spec_precision:
        return b.element
    scalar = "f16" if own == "fp16" else "f32"
    return {"S1": scalar, "S4": f"vec4<{scalar}>", "SM": f"mat4x4<{scalar}>"}[b.element]


def element_bytes(element: str, precision: str) -> int:
    """Bytes of one array element of a binding."""
    scalar = 2 if precision == "fp16" and element in STORAGE_TYPES else 4
    return scalar * {"S1": 1, "S4": 4, "SM": 16, "f32": 1, "u32": 1, "i32": 1, "vec4<f32>": 4}.get(element, 4)


def is_baked(b: Binding) -> bool:
    """Small float constants (biases, PRELU alphas, per-channel operands) become shader literals (f32 private
    arrays, whatever the precision). Not when one is infinite or NaN: its literal is a bitcast, which WGSL does not
    take in an initializer, so such data stays in a buffer; nor where the runtime bound it so that dispatches differing
    only in it share one shader (Binding.bake)."""
    return (b.bake and b.data is not None and b.element in ("S4", "vec4<f32>") and b.data.dtype == np.float32
            and 0 < b.data.size <= 4 * BAKE_LIMIT and b.data.size % 4 == 0 and bool(np.isfinite(b.data).all()))


def duplicates(spec: KernelSpec) -> dict[str, tuple[str, bool]]:
    """Read bindings of a tensor that another read binding of the dispatch already binds (a kernel's input also
    read by a fused prologue, the views of a fused QKV projection): name -> (the kept binding's name, whether its
    scalar (S1) reads go through the kept vec4 (S4) array). A tensor is bound once: WebGPU forbids overlapping
    writable views of one buffer in a dispatch, and read views are writable wherever the buffer also holds the
    dispatch's output (runtime/program.py _mark_shared)."""
    groups: dict[tuple, list[Binding]] = {}
    for b in spec.bindings:
        if b.tensor is None or b.writable or b.data is not None or b.scratch_bytes:
            continue
        groups.setdefault((b.tensor, b.raw, b.exact, b.wide), []).append(b)
    out: dict[str, tuple[str, bool]] = {}
    for group in groups.values():
        kept = next((b for b in group if b.element == "S4"), group[0])
        for b in group:
            if b is kept:
                continue
            if b.element == kept.element:
                out[b.name] = (kept.name, False)
            elif (b.element, kept.element) == ("S1", "S4"):
                out[b.name] = (kept.name, True)
    return out


def _through_vec4(text: str, name: str, vec4: str) -> str:
    """text with every scalar read `name[i]` of a PHWC4 tensor as `vec4[(i) / 4u][(i) % 4u]`."""
    find = re.compile(rf"(?<![\w.]){name}\[")
    out, at = [], 0
    while (match := find.search(text, at)) is not None:
        depth, end = 1, match.end()
        while depth:
            depth += {"[": 1, "]": -1}.get(text[end], 0)
            end += 1
        index = text[match.end():end - 1]
        out.append(f"{text[at:match.start()]}{vec4}[({index}) / 4u][({index}) % 4u]")
        at = end
    return "".join(out) + text[at:]


def bound(spec: KernelSpec) -> list[Binding]:
    """The bindings that need a buffer, in binding-number order (the runtime uses the same list)."""
    merged = duplicates(spec)
    return [b for b in spec.bindings if not is_baked(b) and b.name not in merged]


def f32_literal(value: float) -> str:
    """A float literal; non-finite values (legal in data, not in WGSL constants) made at run time."""
    if math.isfinite(value):
        return literal(float(value))
    return nonfinite_f32(value)


def bindings_decl(spec: KernelSpec, precision: str = "fp32") -> str:
    lines = []
    spec_precision = dispatch_precision(spec, precision)
    for b in spec.bindings:
        if not _NAME.match(b.name):
            raise ValueError(f"invalid binding name {b.name!r}")
    for i, b in enumerate(bound(spec)):
        # WebGPU forbids read-only and read-write views of one buffer in one dispatch, even on disjoint
        # ranges: tensors sharing an arena buffer with another binding are all declared read_write.
        access = "read_write" if b.writable or b.shared else "read"
        element = storage_element(b, spec_precision, precision)
        lines.append(f"@group(0) @binding({i}) var<storage, {access}> {b.name}: array<{element}>;")
    for b in spec.bindings:
        if is_baked(b):
            vec = b.data.reshape(-1, 4).tolist()
            items = ", ".join("vec4<f32>(" + ", ".join(f32_literal(v) for v in row) + ")" for row in vec)
            kind = f"array<vec4<f32>, {len(vec)}>"
            lines.append(f"var<private> {b.name}: {kind} = {kind}({items});")
    return "\n".join(lines)


def epilogue(spec: KernelSpec) -> str:
    parts = [str(c) for c in spec.epilogue]
    rem = spec.out_channels % 4
    if spec.out_channels and rem:
        last = spec.out_channels // 4
        mask = ", ".join("true" if i < rem else "false" for i in range(4))
        parts.append(f"if (os == {last}u) {{ value = select(vec4<f32>(0.0), value, vec4<bool>({mask})); }}")
    return "\n    ".join(parts)


def render(spec: KernelSpec, precision: str = "fp32", webgpu: str = "wgpu") -> str:
    """The WGSL of a dispatch on WebGPU implementation `webgpu` (IMPLEMENTATIONS): its enable directives, the
    precision's aliases, then the template filled in."""
    if webgpu not in IMPLEMENTATIONS:
        raise ValueError(f"WebGPU implementation {webgpu!r} is not one of {', '.join(IMPLEMENTATIONS)}")
    params = {k: literal(v) for k, v in spec.params.items()}
    params.update(BINDINGS=bindings_decl(spec, precision), EPILOGUE=epilogue(spec))
    params.update(
        WG_X=str(spec.workgroup[0]), WG_Y=str(spec.workgroup[1]), WG_Z=str(spec.workgroup[2]),
        GRID_X=f"{spec.grid[0]}u", GRID_Y=f"{spec.grid[1]}u", GRID_Z=f"{spec.grid[2]}u",
    )
    try:
        text = (preamble(dispatch_precision(spec, precision), precision == "fp16", store_precision(spec, precision))
                + load_template(spec.shader).substitute(params))
        # Fused readers and helpers, each once (a helper may already be in the producer's own text, or inside
        # a prologue reader appended before it).
        for f in dict.fromkeys(spec.functions):
            if f not in text:
                text += f"\n{f}"
        for name, (kept, scalar) in duplicates(spec).items():  # names: identifiers (_NAME), unique per spec
            text = _through_vec4(text, name, kept) if scalar else re.sub(rf"(?<![\w.]){name}(?!\w)", kept, text)
        if f"{NONFINITE_F32}(" in text and f"fn {NONFINITE_F32}(" not in text:
            text += "\n" + snippet("math/nonfinite_f32.wgsl")
        if webgpu != "wgpu" and uses_subgroups(text):  # after `enable f16;`: directives come before all else
            directives = enable_directives(text, False, webgpu)
            f16 = "enable f16;\n"
            text = (f16 + directives + text.removeprefix(f16)) if text.startswith(f16) else directives + text
        return text
    except KeyError as e:
        raise ValueError(f"shader {spec.shader}.wgsl needs parameter {e.args[0]!r}, not given") from e


# -- split reductions ------------------------------------------------------------------------------------------
# Kernels that take a Decomposition run workgroups of `group` output tiles x `split` invocations; the `split`
# invocations of a tile share its reduction and combine their partial results at the end. The pieces below are
# the same for every such kernel, so templates take them as placeholders: ${LANE_ARGS} (extra builtins of
# main), ${LANE} (k: the invocation's share of the reduction, slot: its tile in the workgroup, tile: the global
# tile index) and ${LANE_MEMORY} (the workgroup array the reduction uses).
MAX_DISPATCH = 65535  # workgroups per dimension (WebGPU's default limit)


def tile_dispatch(tiles: int, d: Decomposition) -> tuple[tuple[int, int, int], int]:
    """Workgroup counts covering `tiles` tiles (folded into y past the per-dimension limit) and the x count
    that ${LANE} linearizes with."""
    groups = max(1, -(-tiles // d.group))
    nx = min(groups, MAX_DISPATCH)
    return (nx, -(-groups // nx), 1), nx


def lane_placeholders(d: Decomposition, accumulators: int, dispatch_x: int) -> dict[str, Code]:
    """${LANE_ARGS}, ${LANE} and ${LANE_MEMORY} for decomposition d, reducing `accumulators` vec4s per
    invocation. With subgroups, an invocation's place in the workgroup is derived from its subgroup, so the
    invocations of one tile are always inside one subgroup (or whole subgroups), whatever the adapter's
    subgroup size."""
    k, g = d.split, d.group
    if k == 1:
        return {"LANE_ARGS": Code(""), "LANE": fill("lane_single.wgsl", {"DISPATCH_X": dispatch_x, "GROUP": g}, "  "),
                "LANE_MEMORY": Code("")}
    if d.subgroup:
        args = (", @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(subgroup_size) sg_size: u32, "
                "@builtin(subgroup_id) sg_id: u32")
        pos = "let pos = sg_id * sg_size + sg_lane;"
        size = (k * g // 4) * accumulators  # one partial per subgroup; subgroups have at least 4 invocations
    else:
        args, pos, size = "", "let pos = li;", k * g * accumulators
    lane = fill("lane.wgsl", {"POS": Code(pos), "SPLIT": k, "DISPATCH_X": dispatch_x, "GROUP": g}, "  ")
    return {"LANE_ARGS": Code(args), "LANE": lane,
            "LANE_MEMORY": Code(f"var<workgroup> lane_partials: array<vec4<f32>, {max(1, size)}>;")}


def lane_reduce(names: list[str], d: Decomposition, combine: str = "{a} + {b}", first: bool = True) -> Code:
    """Combine each vec4 variable in `names` over the `split` invocations of a tile; afterwards every one of them
    holds the total. `combine` is a WGSL expression of {a} and {b}; first=False when lane_partials was used by
    an earlier reduction of the same invocation (a barrier then protects the values still being read)."""
    k = d.split
    if k == 1:
        return Code("")
    n = len(names)

    def comb(a: str, b: str) -> str:
        return combine.format(a=a, b=b)

    out = [] if first else ["workgroupBarrier();"]
    if d.subgroup:
        out.append(f"for (var o = min({k}u, sg_size) / 2u; o > 0u; o = o >> 1u) {{")
        out += [f"  {v} = {comb(v, f'subgroupShuffleXor({v}, o)')};" for v in names]
        out.append("}")
        out.append(f"if ({k}u > sg_size && sg_lane == 0u) {{")  # the tile spans several subgroups
        out += [f"  lane_partials[sg_id * {n}u + {i}u] = {v};" for i, v in enumerate(names)]
        out.append("}")
        out.append("workgroupBarrier();")
        out.append(f"if ({k}u > sg_size) {{")
        out.append("  let first_sg = (pos - k) / sg_size;")
        out += [f"  {v} = lane_partials[first_sg * {n}u + {i}u];" for i, v in enumerate(names)]
        out.append(f"  for (var j = 1u; j < {k}u / sg_size; j++) {{")
        out += [f"    {v} = {comb(v, f'lane_partials[(first_sg + j) * {n}u + {i}u]')};" for i, v in enumerate(names)]
        out.append("  }")
        out.append("}")
        return Code("\n  ".join(out))
    out += [f"lane_partials[pos * {n}u + {i}u] = {v};" for i, v in enumerate(names)]
    out.append("workgroupBarrier();")
    out.append(f"for (var h = {k // 2}u; h > 0u; h = h >> 1u) {{")
    out.append("  if (k < h) {")
    out += [f"    lane_partials[pos * {n}u + {i}u] = "
            f"{comb(f'lane_partials[pos * {n}u + {i}u]', f'lane_partials[(pos + h) * {n}u + {i}u]')};"
            for i in range(n)]
    out.append("  }")
    out.append("  workgroupBarrier();")
    out.append("}")
    out += [f"{v} = lane_partials[(pos - k) * {n}u + {i}u];" for i, v in enumerate(names)]
    return Code("\n  ".join(out))


def has_epilogue(spec: KernelSpec) -> bool:
    """True when the template applies ${EPILOGUE} to its standard output vec4 (so ops can fuse into it)."""
    text = load_template(spec.shader).template
    return "${EPILOGUE}" in text


def dispatch_size(spec: KernelSpec) -> tuple[int, int, int]:
    if spec.dispatch is not None:
        return spec.dispatch
    return tuple(-(-g // w) for g, w in zip(spec.grid, spec.workgroup))  # type: ignore[return-value]
