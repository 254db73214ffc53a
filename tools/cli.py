"""The `gpuengine` command: a dispatcher. Each subcommand is one module beside this one (tools/<command>.py)
defining `add_parser(subparsers)` and the function it runs; the options they share are in tools/common.py."""

from __future__ import annotations

import argparse
import sys

from . import (
    bench,
    calibrate,
    fetch,
    fuzz,
    generate,
    inspect,
    memplan,
    ops,
    precision,
    predict,
    profile,
    run,
    tune,
)

COMMANDS = (run, inspect, memplan, fetch, ops, bench, profile, tune, fuzz, precision, predict, calibrate, generate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuengine", description="Run TensorFlow Lite models on the GPU (WebGPU).")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from gpuengine.errors import GpuEngineError

    try:
        return int(args.func(args) or 0)
    except GpuEngineError as e:
        print(f"gpuengine: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
