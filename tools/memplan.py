"""`gpuengine memplan MODEL...`: the memory strategies for intermediate tensors compared (table, --json, --plot)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import add_engine_options, interpreter, load_model


def cmd_memplan(args: argparse.Namespace) -> int:
    from gpuengine.memory import compare, format_table, plan_memory, plot
    from gpuengine.memory.strategies import STRATEGIES

    strategies = tuple(s.strip() for s in args.strategies.split(",")) if args.strategies else None
    unknown = [s for s in strategies or () if s not in STRATEGIES]
    if unknown:
        raise SystemExit(f"gpuengine: --strategies: unknown {', '.join(unknown)}; known: {', '.join(STRATEGIES)}")
    records_by_model = {}
    for spec in args.models:
        name, data = load_model(spec)
        it = interpreter(data, args)
        records = []
        offset = 0
        for p in it.compiled.gpu_programs:  # partitions run one after another: give each its own step range
            span = max((r.last for r in p.info.records), default=-1) + 1
            records += [type(r)(tensor=r.tensor, size=r.size, first=r.first + offset, last=r.last + offset)
                        for r in p.info.records]
            offset += span
        records_by_model[name.split(" ")[0]] = records
    report = compare(records_by_model, strategies) if strategies else compare(records_by_model)
    if args.plot:
        plans = {m: (r, plan_memory(r, "best")) for m, r in records_by_model.items()}
        plot(report, plans, args.plot)
    print(json.dumps(report, indent=None) if args.json else format_table(report))
    return 0


def add_parser(sub: Any) -> None:
    mem = sub.add_parser("memplan", help="compare memory strategies for intermediate tensors")
    mem.add_argument("models", nargs="+", help="models (paths, zoo names or reference model names)")
    from gpuengine.memory.strategies import STRATEGIES

    mem.add_argument("--strategies", help=f"comma-separated subset of {','.join(STRATEGIES)}")
    mem.add_argument("--json", action="store_true", help="print the results as JSON")
    mem.add_argument("--plot", metavar="OUT.png",
                     help="save the strategies' comparison and the chosen plans as PNG pictures (needs matplotlib)")
    add_engine_options(mem)
    mem.set_defaults(func=cmd_memplan)
