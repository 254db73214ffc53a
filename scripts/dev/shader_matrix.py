"""The shader matrix: every dispatch's WGSL of the zoo, the MediaPipe reference models and the decoders, for every
target, precision and with passes on and off, planned without a GPU (nothing is compiled). render_hash.py hashes
it (a refactoring changed nothing); tests/models/test_wgsl_compile.py compiles it with Dawn (Tint) and naga.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ("discrete", "integrated", "cpu")
PRECISIONS = ("fp32", "fp16")


def models() -> list[tuple[str, bytes]]:
    """(name, .tflite bytes) of every model the matrix covers; those not on this machine are left out."""
    from gpuengine import zoo

    out = [(f"zoo/{name}", zoo.get(name)) for name in zoo.MODELS]
    out.append(("zoo/decoder_tiny_f32", zoo.decoder_tiny_f32()))
    out.append(("zoo/decoder_smollm_shape", zoo.decoder_smollm_shape()))
    cache = Path.home() / ".cache" / "gpuengine" / "models"
    for folder in (cache, ROOT.parent / "shared" / "models", ROOT / "tests" / "fixtures" / "litert_torch"):
        for path in sorted(folder.rglob("*.tflite")):
            out.append((f"{folder.name}/{path.name}", path.read_bytes()))
    return out


def graphs(data: bytes):
    """(signature key or '', graph, parsed model) for each signature of a model, else its main graph."""
    from gpuengine.model.reader import read_model

    parsed = read_model(data)
    if parsed.signatures:
        return [(s.key, parsed.subgraphs[s.subgraph], parsed) for s in parsed.signatures]
    return [("", parsed.subgraphs[0], parsed)]


def planned(graph, parsed, target: str, precision: str, optimize: bool) -> list:
    """The KernelSpecs of every dispatch of a graph's GPU programs, as a program on a `target` adapter plans them."""
    from gpuengine import planning as engine
    from gpuengine.latency.target import named
    from gpuengine.options import EngineOptions

    options = EngineOptions(precision=precision, optimize=optimize)
    _, programs = engine.planned_dispatches(graph, options, named(target), parsed)
    return [spec for specs in programs for spec in specs]


def cases(quick: bool = False) -> Iterator[tuple[str, str, list]]:
    """(case name model:signature:target:precision:opt|noopt, precision, the KernelSpecs of its dispatches) over
    the matrix: fp32 with passes on and off, fp16 with passes on; `quick`: the discrete target only. A model the
    reader refuses is named on stderr and left out."""
    for name, data in models():
        try:
            sigs = graphs(data)
        except Exception as e:  # noqa: BLE001 - a model the reader refuses is named, not planned
            print(f"skip {name}: {e}", file=sys.stderr)
            continue
        for key, graph, parsed in sigs:
            for target in TARGETS[:1] if quick else TARGETS:
                for precision in PRECISIONS:
                    for optimize in (True, False) if precision == "fp32" else (True,):
                        case = f"{name}:{key}:{target}:{precision}:{'opt' if optimize else 'noopt'}"
                        yield case, precision, planned(graph, parsed, target, precision, optimize)
