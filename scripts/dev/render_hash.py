"""The rendered WGSL of every dispatch of the zoo, the MediaPipe reference models and the decoders, for every
target and precision, hashed: a refactoring of codegen, shaders or kernels shows it changed nothing by printing
the same hashes before and after. Plans without a GPU (nothing is compiled).

    python scripts/dev/render_hash.py [--json OUT] [--check BASELINE.json] [--quick]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ("discrete", "integrated", "cpu")
PRECISIONS = ("fp32", "fp16")


def models() -> list[tuple[str, bytes]]:
    """(name, .tflite bytes) of every model the hash covers; those not on this machine are left out (named)."""
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


def rendered(graph, parsed, target: str, precision: str, optimize: bool) -> list[str]:
    from gpuengine import planning as engine
    from gpuengine.latency.target import named
    from gpuengine.lowering import codegen
    from gpuengine.options import EngineOptions

    options = EngineOptions(precision=precision, optimize=optimize)
    _, programs = engine.planned_dispatches(graph, options, named(target), parsed)
    return [codegen.render(spec, precision) for specs in programs for spec in specs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write {case: hash} here")
    parser.add_argument("--check", help="compare with a JSON written by --json; exit 1 on any difference")
    parser.add_argument("--quick", action="store_true", help="the discrete target only")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    cases: dict[str, str] = {}
    total = hashlib.sha256()
    dispatches = 0
    for name, data in models():
        try:
            sigs = graphs(data)
        except Exception as e:  # a model the reader refuses is named, not hashed
            print(f"skip {name}: {e}", file=sys.stderr)
            continue
        for key, graph, parsed in sigs:
            for target in TARGETS[:1] if args.quick else TARGETS:
                for precision in PRECISIONS:
                    for optimize in (True, False) if precision == "fp32" else (True,):
                        texts = rendered(graph, parsed, target, precision, optimize)
                        h = hashlib.sha256("\0".join(texts).encode()).hexdigest()[:16]
                        case = f"{name}:{key}:{target}:{precision}:{'opt' if optimize else 'noopt'}"
                        cases[case] = h
                        total.update(f"{case}={h}\n".encode())
                        dispatches += len(texts)
    print(f"render hash {total.hexdigest()[:16]}: {dispatches} dispatches in {len(cases)} cases "
          f"({time.perf_counter() - start:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(cases, indent=1, sort_keys=True) + "\n")
    if args.check:
        base = json.loads(Path(args.check).read_text())
        changed = sorted(c for c in base.keys() | cases.keys() if base.get(c) != cases.get(c))
        for c in changed:
            print(f"changed: {c} {base.get(c)} -> {cases.get(c)}")
        return 1 if changed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
