"""Compile every distinct shader of the shader matrix (shader_matrix.py: the zoo, the MediaPipe models, the
decoders; every target and precision; passes on and off) with Dawn's Tint (on Dawn's Null device, which needs no
GPU: create_shader_module + create_compute_pipeline, features shader-f16 and subgroups) and with naga (wgpu-py's
create_shader_module, which parses and validates; on any adapter, lavapipe included). Prints every rejected shader
with its kernel, a case it appears in and the WGSL line the compiler names; exit 1 when any is rejected.

    python scripts/dev/wgsl_check.py [--quick] [--only tint|naga]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass, field

from shader_matrix import cases  # scripts/dev, beside this file

COMPILERS = ("tint", "naga")
_LINE = re.compile(r":(\d+):(\d+)")  # Tint's "file:line:column error: ..."; naga's "┌─ wgsl:line:column"


@dataclass
class Rejected:
    compiler: str
    kernel: str
    case: str
    message: str
    line: str  # the WGSL line the message names ('' when it names none)


@dataclass
class Report:
    shaders: dict[str, int] = field(default_factory=dict)  # compiler -> distinct shaders compiled
    rejected: list[Rejected] = field(default_factory=list)
    over_limit: list[str] = field(default_factory=list)  # Tint took the module; the Null device's limit the rest
    seconds: dict[str, float] = field(default_factory=dict)


def named_line(message: str, source: str) -> str:
    """The WGSL line a compiler's message points at, as 'line N: text'."""
    match = _LINE.search(message)
    if match is None:
        return ""
    n = int(match[1])
    lines = source.splitlines()
    return f"line {n}: {lines[n - 1].strip()}" if 0 < n <= len(lines) else f"line {n}"


def distinct(quick: bool = False) -> tuple[dict[str, dict[str, tuple[str, str]]], int, int]:
    """{implementation: {WGSL text: (kernel, first case)}} over the matrix (each case planned once, rendered for
    each implementation), the number of cases and of dispatches."""
    from gpuengine.lowering import codegen

    texts: dict[str, dict[str, tuple[str, str]]] = {webgpu: {} for webgpu in codegen.IMPLEMENTATIONS}
    n_cases = n_dispatches = 0
    for case, precision, specs in cases(quick):
        n_cases += 1
        for spec in specs:
            n_dispatches += 1
            for webgpu, found in texts.items():
                found.setdefault(codegen.render(spec, precision, webgpu), (spec.shader, case))
    for kernel, case, source in outside_plans():
        for found in texts.values():  # one text for both implementations (no subgroups, no f16)
            found.setdefault(source, (kernel, case))
    for kernel, case, source in symbolic_plan_sources():
        for webgpu, found in texts.items():
            found.setdefault(codegen.enable_directives(source, False, webgpu) + source, (kernel, case))
    return texts, n_cases, n_dispatches


def symbolic_plan_sources() -> list[tuple[str, str, str]]:
    """(kernel, case, WGSL as rendered for wgpu-native) of every version the symbolic plans of the FCN and the
    encoder of tests/builders.py hold (runtime/symbolic_plan.py: parametric texts in each shape class's
    decomposition, with gpe_dims); made on this machine's adapter."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
    from builders import encoder_model, fcn_model

    from gpuengine import Interpreter

    out = []
    for name, build in (("fcn [1,-1,-1,3]", fcn_model), ("encoder [1,-1,16]", encoder_model)):
        it = Interpreter(model_content=build())
        it.allocate_tensors()
        plan = it.symbolic_plan
        if isinstance(plan, str) or plan is None:
            raise RuntimeError(f"{name}: no symbolic plan ({plan})")
        for d in plan.dispatches:
            for cls, version in d.classes.items():
                out.append((d.shader, f"symbolic plan of {name}, {cls}: {version.name}", version.source))
    return out


def outside_plans() -> list[tuple[str, str, str]]:
    """(kernel, case, WGSL) of the kernels no model plan holds: the GPU decode loop's sampler (at a small, SmolLM's
    and Gemma 3's vocabulary) and the LASNet sparse block's two kernels (tests/fixtures/lasnet, every patch size and
    mode, on the runner's BHWC buffers, and in a program's PHWC4 tensors in fp32 and fp16, in both decompositions)."""
    from pathlib import Path

    from gpuengine.lowering import codegen
    from gpuengine.lowering.kernels import lasnet, sampler
    from gpuengine.model.reader import read_model
    from gpuengine.passes.lasnet_blocks import find_masked_blocks

    out = [("sampler", f"vocab {vocab}", sampler.source(vocab)) for vocab in (300, 49152, 262144)]
    fixture = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "lasnet" / "lasnet_block.tflite"
    for block in find_masked_blocks(read_model(str(fixture)).subgraphs[0]):
        for patch in (2, 4, 8):
            if lasnet.supports(block, patch) is None:
                for mode in lasnet.MODES:
                    out += [(f"lasnet_{name}", f"{fixture.name} S={patch} {mode}", source)
                            for name, source in lasnet.sources(block, patch, mode).items()]
                for precision in ("fp32", "fp16"):
                    for pixels in lasnet.PIXELS:
                        out += [(spec.shader, f"{fixture.name} S={patch} pixels={pixels} program {precision}",
                                 codegen.render(spec, precision)) for spec in lasnet.specs(block, patch, pixels=pixels)]
    return out


def dawn_device():
    """The engine's Dawn device (features shader-f16 and subgroups): its Null device where Dawn finds no GPU."""
    from gpuengine.runtime.device import get_device

    return get_device(webgpu="dawn").device


def naga_device():
    """A wgpu-native device (naga) with the engine's features and the adapter's limits."""
    from gpuengine.runtime.device import get_device

    return get_device(webgpu="wgpu").device


def storage_bindings(source: str) -> int:
    return source.count("var<storage")


def check(texts: dict[str, dict[str, tuple[str, str]]], compilers: tuple[str, ...] = COMPILERS) -> Report:
    """Compile the distinct shaders (distinct()) with each compiler: Tint (Dawn's Null device: module and
    pipeline) and naga (wgpu-native: create_shader_module, which parses and validates the whole module). A
    pipeline Dawn's Null device refuses only because the shader binds more storage buffers than its limit (8, the
    WebGPU default; a GPU device asks for the adapter's) is listed in `over_limit`, its module having passed."""
    from gpuengine.runtime.webgpu import compile_error

    report = Report()
    for compiler in compilers:
        start = time.perf_counter()
        found = texts["dawn" if compiler == "tint" else "wgpu"]
        device = dawn_device() if compiler == "tint" else naga_device()
        limit = int(device.limits["max-storage-buffers-per-shader-stage"])
        for source, (kernel, case) in found.items():
            over = compiler == "tint" and storage_bindings(source) > limit
            message = compile_error(device, source, pipeline=compiler == "tint" and not over)
            if message is not None:
                report.rejected.append(Rejected(compiler, kernel, case, message, named_line(message, source)))
            elif over:
                report.over_limit.append(f"{kernel} ({case}): {storage_bindings(source)} storage buffers > {limit}")
        report.shaders[compiler] = len(found)
        report.seconds[compiler] = time.perf_counter() - start
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the discrete target only")
    parser.add_argument("--only", choices=COMPILERS, help="one compiler")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each compiler's whole message")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    texts, n_cases, n_dispatches = distinct(args.quick)
    planned = time.perf_counter() - start
    report = check(texts, (args.only,) if args.only else COMPILERS)
    for r in report.rejected:
        first = next((s for s in r.message.splitlines() if "error" in s.lower()), r.message.splitlines()[0])
        print(f"{r.compiler}: {r.kernel} ({r.case}): {r.line}\n    {first.strip()}")
        if args.verbose:
            print(r.message)
    for line in report.over_limit:
        print(f"tint: module only (the Null device's limit): {line}")
    print(f"{n_dispatches} dispatches in {n_cases} cases planned and rendered in {planned:.0f} s")
    for compiler, n in report.shaders.items():
        bad = sum(r.compiler == compiler for r in report.rejected)
        print(f"{compiler}: {bad} of {n} distinct shaders rejected ({report.seconds[compiler]:.0f} s)")
    return 1 if report.rejected else 0


if __name__ == "__main__":
    sys.exit(main())
