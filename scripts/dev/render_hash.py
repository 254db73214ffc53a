"""The rendered WGSL of every dispatch of the zoo, the MediaPipe reference models and the decoders, for every
target and precision, hashed: a refactoring of codegen, shaders or kernels shows it changed nothing by printing
the same hashes before and after. Plans without a GPU (nothing is compiled).

    python scripts/dev/render_hash.py [--json OUT] [--check BASELINE.json] [--quick] [--webgpu dawn]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

from shader_matrix import cases  # scripts/dev, beside this file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write {case: hash} here")
    parser.add_argument("--check", help="compare with a JSON written by --json; exit 1 on any difference")
    parser.add_argument("--webgpu", default="wgpu", help="the WebGPU implementation rendered for (wgpu or dawn)")
    parser.add_argument("--quick", action="store_true", help="the discrete target only")
    args = parser.parse_args(argv)
    from gpuengine.lowering import codegen

    start = time.perf_counter()
    cases_: dict[str, str] = {}
    total = hashlib.sha256()
    dispatches = 0
    for case, precision, specs in cases(args.quick):
        texts = [codegen.render(spec, precision, args.webgpu) for spec in specs]
        h = hashlib.sha256("\0".join(texts).encode()).hexdigest()[:16]
        cases_[case] = h
        total.update(f"{case}={h}\n".encode())
        dispatches += len(texts)
    print(f"render hash {total.hexdigest()[:16]}: {dispatches} dispatches in {len(cases_)} cases "
          f"({time.perf_counter() - start:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(cases_, indent=1, sort_keys=True) + "\n")
    if args.check:
        base = json.loads(Path(args.check).read_text())
        changed = sorted(c for c in base.keys() | cases_.keys() if base.get(c) != cases_.get(c))
        for c in changed:
            print(f"changed: {c} {base.get(c)} -> {cases_.get(c)}")
        return 1 if changed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
