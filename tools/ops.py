"""`gpuengine ops`: the ops that run on the GPU, as the README's markdown table (from the kernel registry)."""

from __future__ import annotations

import argparse
from typing import Any


def ops_markdown() -> str:
    """The supported-op table of the README, generated from the kernel registry."""
    from gpuengine.lowering.kernels import registry

    by_module: dict[str, list[str]] = {}
    for op in registry.supported_ops():
        module = type(registry.kernel_for_code(op)).__module__.rsplit(".", 1)[-1]
        by_module.setdefault(module, []).append(op)
    lines = ["| kernel module | ops |", "|---|---|"]
    lines += [f"| `{m}` | {', '.join(ops)} |" for m, ops in sorted(by_module.items())]
    return "\n".join(lines)


def cmd_ops(args: argparse.Namespace) -> int:
    print(ops_markdown())
    return 0


def add_parser(sub: Any) -> None:
    ops = sub.add_parser("ops", help="the ops that run on the GPU (a markdown table, from the kernel registry)")
    ops.set_defaults(func=cmd_ops)
