"""`gpuengine memplan MODEL...`: the memory strategies for intermediate tensors compared (table, --json, --plot)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import add_engine_options, interpreter, load_model


def cmd_memplan(args: argparse.Namespace) -> int:
    from gpuengine.memory import compare, format_table, plan_memory, plot
    from gpuengine.memory.strategies import STRATEGIES
    from gpuengine.model.reader import read_model
    from gpuengine.passes.memory_order import memory_order

    strategies = tuple(s.strip() for s in args.strategies.split(",")) if args.strategies else None
    unknown = [s for s in strategies or () if s not in STRATEGIES]
    if unknown:
        raise SystemExit(f"gpuengine: --strategies: unknown {', '.join(unknown)}; known: {', '.join(STRATEGIES)}")
    records_by_model = {}
    orders = {}
    for spec in args.models:
        name, data = load_model(spec)
        it = interpreter(data, args)
        if args.order:  # the file's graph, and the graph the engine plans (after its passes and fusions)
            orders[name.split(" ")[0]] = {"file": memory_order(read_model(data).main),
                                          "plan": memory_order(it.compiled.plan.graph)}
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
    if args.order and args.json:
        report = {"strategies": report,
                  "order": {m: {g: r.to_json() for g, r in both.items()} for m, both in orders.items()}}
    print(json.dumps(report, indent=None) if args.json else format_table(report))
    if args.order and not args.json:
        print(format_orders(orders))
    return 0


def format_orders(orders: dict[str, Any]) -> str:
    """Peak of live intermediates in the graph's op order and in the memory-aware one (passes/memory_order.py),
    for the file's graph and for the graph the engine plans (after its passes)."""
    lines = ["", "execution order: peak of live intermediates (KiB), the op order -> a memory-aware order",
             f"{'model':<30} {'graph':<5} {'ops':>5} {'op order':>10} {'memory':>10} {'change':>8} "
             f"{'bound':>10}  method"]
    for model, both in orders.items():
        for graph, r in both.items():
            change = (r.after - r.before) / r.before * 100 if r.before else 0.0
            lines.append(f"{model:<30} {graph:<5} {len(r.order):>5} {r.before / 1024:>10.1f} {r.after / 1024:>10.1f} "
                         f"{change:>+7.1f}% {r.bound / 1024:>10.1f}  {r.method}")
    return "\n".join(lines)


def add_parser(sub: Any) -> None:
    mem = sub.add_parser("memplan", help="compare memory strategies for intermediate tensors")
    mem.add_argument("models", nargs="+", help="models (paths, zoo names or reference model names)")
    from gpuengine.memory.strategies import STRATEGIES

    mem.add_argument("--strategies", help=f"comma-separated subset of {','.join(STRATEGIES)}")
    mem.add_argument("--json", action="store_true", help="print the results as JSON")
    mem.add_argument("--plot", metavar="OUT.png",
                     help="save the strategies' comparison and the chosen plans as PNG pictures (needs matplotlib)")
    mem.add_argument("--order", action="store_true",
                     help="also the peak of live intermediates in the op order and in a memory-aware order")
    add_engine_options(mem)
    mem.set_defaults(func=cmd_memplan)
