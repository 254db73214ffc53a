"""Compare strategies on real models: numbers, a text table and pictures."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .bounds import lower_bound
from .offsets import DEFAULT_ALIGNMENT
from .plan import MemoryPlan
from .records import UsageRecord
from .strategies import STRATEGIES, _plan_memory, plan_memory

__all__ = ["compare", "format_table", "plot"]

_MIB = 1024.0 * 1024.0


def compare(
    models: Mapping[str, list[UsageRecord]],
    strategies: Iterable[str] = STRATEGIES,
    alignment: int = DEFAULT_ALIGNMENT,
) -> dict[str, dict[str, Any]]:
    """Plan every model with every strategy.

    Returns ``{model: {"strategies": {name: {"bytes", "objects", "plan_ms", "optimal"}}, "lower_bound": int}}``
    so results can be dumped as JSON and diffed between versions; ``optimal``: the plan is proven the smallest of
    its kind (the offsets planner's, or one at the lower bound). Plans are made afresh (not memoized), so
    ``plan_ms`` is what planning costs.
    """
    names = list(strategies)
    warm_up = [UsageRecord(0, 4, 0, 1), UsageRecord(1, 4, 2, 3)]
    for name in names:  # keep one-off costs (lazy SciPy import) out of the first model's plan_ms
        plan_memory(warm_up, strategy=name, alignment=alignment)
    report: dict[str, dict[str, Any]] = {}
    for model, records in models.items():
        bound = int(lower_bound(records))
        per: dict[str, dict[str, Any]] = {}
        for name in names:
            start = time.perf_counter()
            plan = _plan_memory(records, strategy=name, alignment=alignment)
            elapsed_ms = (time.perf_counter() - start) * 1e3
            per[name] = {
                "bytes": int(plan.total_bytes),
                "objects": int(plan.num_objects),
                "plan_ms": elapsed_ms,
                "optimal": bool(plan.optimal or plan.total_bytes == bound),
            }
        report[model] = {"strategies": per, "lower_bound": bound}
    return report


def format_table(report: Mapping[str, Mapping[str, Any]]) -> str:
    """Render ``compare``'s output as a plain-text table, one block per model."""
    lines: list[str] = []
    header = (f"  {'strategy':<28} {'bytes':>12} {'MiB':>10} {'x bound':>8} {'objects':>8} {'plan ms':>9}  "
              "optimal")
    for model, entry in report.items():
        bound = entry["lower_bound"]
        lines.append(f"{model}  (lower bound {bound / _MIB:.3f} MiB, {bound} B)")
        lines.append(header)
        for name, row in entry["strategies"].items():
            ratio = f"{row['bytes'] / bound:.3f}" if bound else "-"
            size, mib, objs, ms = row["bytes"], row["bytes"] / _MIB, row["objects"], row["plan_ms"]
            proven = "proven" if row.get("optimal") else "-"
            lines.append(f"  {name:<28} {size:>12} {mib:>10.3f} {ratio:>8} {objs:>8} {ms:>9.2f}  {proven}")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "model"


def _object_bases(plan: MemoryPlan) -> list[int]:
    """Byte address of each object when the objects are drawn stacked on top of each other."""
    bases, acc = [], 0
    for size in plan.object_sizes:
        bases.append(acc)
        acc += size
    return bases


def plot(
    report: Mapping[str, Mapping[str, Any]],
    plans_by_model: Mapping[str, tuple[Sequence[UsageRecord], MemoryPlan]],
    path: str | Path,
) -> list[Path]:
    """Draw the comparison and the chosen plans; return the PNG files written.

    ``path`` gets a grouped bar chart (MiB per strategy per model, black marker at the lower bound).  For
    each model in ``plans_by_model`` a lifetime x memory picture of its plan goes beside it as
    ``<stem>_<model>.png``: x is the step, y the byte address (objects stacked), one rectangle per tensor.
    """
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Rectangle
    except ImportError as exc:  # keep matplotlib optional: only reports need it
        raise ImportError("plotting needs matplotlib: pip install 'gpuengine[plot]'") from exc

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    models = list(report)
    names: list[str] = []
    for entry in report.values():
        names.extend(n for n in entry["strategies"] if n not in names)
    fig = Figure(figsize=(max(6.0, 1.6 * len(models) * max(1, len(names)) / 3), 4.5))
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(names))
    for j, name in enumerate(names):
        xs = [i - 0.4 + width * (j + 0.5) for i in range(len(models))]
        ys = [report[m]["strategies"].get(name, {}).get("bytes", 0) / _MIB for m in models]
        ax.bar(xs, ys, width=width, label=name)
    for i, m in enumerate(models):
        ax.hlines(
            report[m]["lower_bound"] / _MIB,
            i - 0.45,
            i + 0.45,
            colors="black",
            linewidth=2,
            zorder=3,
            label="lower bound" if i == 0 else None,
        )
    heights = [row["bytes"] for e in report.values() for row in e["strategies"].values() if row["bytes"] > 0]
    if heights and max(heights) > 100 * min(heights):  # models of very different scale: keep all visible
        ax.set_yscale("log")
    ax.set_xticks(range(len(models)))
    ax.set_xticklabels(models, rotation=20, ha="right")
    ax.set_ylabel("intermediate memory (MiB)")
    ax.set_title("Memory per strategy")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    written.append(path)

    for model, (records, plan) in plans_by_model.items():
        fig = Figure(figsize=(8, 5))
        ax = fig.add_subplot()
        bases = _object_bases(plan)
        max_step = max((r.last for r in records), default=0)
        colours = [f"C{i % 10}" for i in range(10)]
        for k, r in enumerate(records):
            obj, off = plan.placement[r.tensor]
            ax.add_patch(
                Rectangle(
                    (r.first, (bases[obj] + off) / _MIB),
                    r.last - r.first + 1,
                    r.size / _MIB,
                    facecolor=colours[k % 10],
                    edgecolor="black",
                    linewidth=0.4,
                    alpha=0.8,
                )
            )
        for base, size in zip(bases, plan.object_sizes, strict=True):
            ax.axhline((base + size) / _MIB, color="grey", linewidth=0.5, linestyle="--")
        ax.set_xlim(0, max_step + 1)
        ax.set_ylim(0, max(plan.total_bytes, 1) / _MIB)
        ax.set_xlabel("step (op index)")
        ax.set_ylabel("address (MiB, objects stacked)" if plan.num_objects > 1 else "arena offset (MiB)")
        total = plan.total_bytes / _MIB
        ax.set_title(f"{model}: {plan.strategy}, {total:.3f} MiB in {plan.num_objects} object(s)")
        fig.tight_layout()
        out = path.with_name(f"{path.stem}_{_safe_name(model)}.png")
        fig.savefig(out, dpi=120)
        written.append(out)
    return written
