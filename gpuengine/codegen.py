"""KernelSpec -> WGSL text: fill a shader template with baked numbers, bindings and the fused epilogue."""

from __future__ import annotations

import functools
import math
import re
import string
from importlib import resources

import numpy as np

from .kernels.base import Binding, Code, KernelSpec

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@functools.cache
def load_template(name: str) -> string.Template:
    if not _NAME.match(name):
        raise ValueError(f"invalid shader template name {name!r}")
    text = resources.files("gpuengine.shaders").joinpath(f"{name}.wgsl").read_text()
    return string.Template(text)


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


BAKE_LIMIT = 64  # constant vec4 arrays up to this length are baked into the shader instead of bound


def is_baked(b: Binding) -> bool:
    """Small float constants (biases, PRELU alphas, per-channel operands) become shader literals."""
    return (b.data is not None and b.element == "vec4<f32>" and b.data.dtype == np.float32
            and 0 < b.data.size <= 4 * BAKE_LIMIT and b.data.size % 4 == 0)


def bound(spec: KernelSpec) -> list[Binding]:
    """The bindings that need a buffer, in binding-number order (the runtime uses the same list)."""
    return [b for b in spec.bindings if not is_baked(b)]


def f32_literal(value: float) -> str:
    """A float literal; non-finite values (legal in data, not in WGSL literals) as their bit pattern."""
    if math.isfinite(value):
        return literal(float(value))
    return f"bitcast<f32>({int(np.float32(value).view(np.uint32))}u)"


def bindings_decl(spec: KernelSpec) -> str:
    lines = []
    for b in spec.bindings:
        if not _NAME.match(b.name):
            raise ValueError(f"invalid binding name {b.name!r}")
    for i, b in enumerate(bound(spec)):
        # WebGPU forbids read-only and read-write views of one buffer in one dispatch, even on disjoint
        # ranges: tensors sharing an arena buffer with another binding are all declared read_write.
        access = "read_write" if b.writable or b.shared else "read"
        lines.append(f"@group(0) @binding({i}) var<storage, {access}> {b.name}: array<{b.element}>;")
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


# The shared store of kernels that write several output vec4s per invocation (the conv family): bounds
# check against the output's SO slices x OH x OW, then the epilogue, then the write to `dst`.
STORE_FN = """fn store(v: vec4<f32>, ob: u32, oy: u32, ox: u32, os: u32) {
  if (os >= ${SO}u || ox >= ${OW}u || oy >= ${OH}u) { return; }
  let oi = ((ob * ${SO}u + os) * ${OH}u + oy) * ${OW}u + ox;
  var value = v;
  ${EPILOGUE}
  dst[oi] = value;
}"""


def render(spec: KernelSpec) -> str:
    params = {k: literal(v) for k, v in spec.params.items()}
    params.update(BINDINGS=bindings_decl(spec), EPILOGUE=epilogue(spec))
    if "SO" in params and "OH" in params and "OW" in params:
        params["STORE_FN"] = string.Template(STORE_FN).substitute(params)
    params.update(
        WG_X=str(spec.workgroup[0]), WG_Y=str(spec.workgroup[1]), WG_Z=str(spec.workgroup[2]),
        GRID_X=f"{spec.grid[0]}u", GRID_Y=f"{spec.grid[1]}u", GRID_Z=f"{spec.grid[2]}u",
    )
    try:
        text = load_template(spec.shader).substitute(params)
        # Fused readers and helpers, each once (a helper may already be in the producer's own text).
        return text + "".join(f"\n{f}" for f in dict.fromkeys(spec.functions) if f not in text)
    except KeyError as e:
        raise ValueError(f"shader {spec.shader}.wgsl needs parameter {e.args[0]!r}, not given") from e


def has_epilogue(spec: KernelSpec) -> bool:
    """True when the template applies ${EPILOGUE} to its standard output vec4 (so ops can fuse into it)."""
    text = load_template(spec.shader).template
    return "${EPILOGUE}" in text or "${STORE_FN}" in text


def dispatch_size(spec: KernelSpec) -> tuple[int, int, int]:
    return tuple(-(-g // w) for g, w in zip(spec.grid, spec.workgroup))  # type: ignore[return-value]
