"""The `gpuengine` command: a dispatcher. Each subcommand is one module beside this one (tools/<command>.py)
defining `add_parser(subparsers)` and the function it runs; the options they share are in tools/common.py."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

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
    serve,
    tune,
)

COMMANDS = (run, inspect, memplan, fetch, ops, bench, profile, tune, fuzz, precision, predict, calibrate, generate,
            serve)


class Parser(argparse.ArgumentParser):
    """argparse's parser, its usage mistakes said in one line (the usage itself is one --help away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="gpuengine", description="Run TensorFlow Lite models on the GPU (WebGPU).")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


class UsageExit(SystemExit):
    """A mistake on the command line: exit status 2, as argparse's own errors; its one line is already on stderr
    (str() gives it, for callers of main that catch SystemExit)."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


def main(argv: list[str] | None = None) -> int:
    """Run one command: returns its exit status (0 ok, 1 a failed comparison or run, 2 a bad model file or
    option); a usage mistake raises SystemExit(2), as argparse does, after one line on stderr."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from gpuengine.errors import GpuEngineError

    try:
        return int(args.func(args) or 0)
    except GpuEngineError as e:
        print(f"gpuengine: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # the commands' one-line usage errors: SystemExit("gpuengine: ...")
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
            raise UsageExit(e.code) from None
        raise
    except OSError as e:  # a file the user named cannot be read or written
        if e.filename is None:
            raise
        print(f"gpuengine: {e.filename}: {e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpuengine: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
