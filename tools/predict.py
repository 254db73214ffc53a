"""`gpuengine predict`: the latency model's time for a model on a device description, without running it.

The plan is the one a GPU program would build for the description's adapter class (engine.planned_dispatches:
nothing is compiled, no GPU is needed), each dispatch's time comes from latency/latency.py, and the floor (bytes
at memory bandwidth or FLOPs at peak, plus the chain's dispatch barriers) says how far the plan is from what the
device could do. `--device all` prints one line per built-in description.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import at_least, models


def description(args: argparse.Namespace, name: str | None) -> Any:
    from gpuengine.latency import devices

    try:
        if args.fit:
            return devices.load_fit(args.fit, name)
        return devices.built_in(name or "h100")
    except ValueError as e:
        raise SystemExit(f"gpuengine: {e}") from None


def planned(data: bytes, target: str, precision: str = "fp32", signature: str | None = None,
            hybrid: str = "integer") -> tuple[Any, list[Any]]:
    """(graph, dispatches of every GPU partition) as a GPU program would build them for an adapter class: of the
    main graph, or of a signature's subgraph; hybrid: the arithmetic of hybrid int8 FULLY_CONNECTED ops."""
    from gpuengine.latency.target import named
    from gpuengine.model.reader import read_model
    from gpuengine.options import EngineOptions
    from gpuengine.planning import planned_dispatches

    model = read_model(data)
    graph = model.main
    if signature is not None:
        sigs = {s.key: s for s in model.signatures}
        if signature not in sigs:
            raise SystemExit(f"gpuengine: the model has no signature {signature!r} (it has {sorted(sigs)})")
        graph = model.subgraphs[sigs[signature].subgraph]
    plan, partitions = planned_dispatches(graph, EngineOptions(precision=precision, hybrid_arithmetic=hybrid),
                                          named(target), model)
    return plan.graph, partitions


def predict_model(data: bytes, device: Any, precision: str = "fp32", plans: dict[str, Any] | None = None,
                  signature: str | None = None, hybrid: str = "integer", position: int | None = None) -> Any:
    """The latency model's prediction for a model on a description (`plans`: plans by class, reused; `position`: a
    decode step's, for what kernels read up to it; None: the cache full)."""
    from gpuengine.lowering.kernels.dispatch_cost import predict_specs

    plans = {} if plans is None else plans
    if device.target not in plans:
        plans[device.target] = planned(data, device.target, precision, signature, hybrid)
    graph, partitions = plans[device.target]
    return predict_specs(partitions, graph, device, precision, position)


RATES = (0.1, 0.3, 0.5, 0.7, 0.9)


def sparse_blocks(data: bytes, device: Any, precision: str, plans: dict[str, Any]) -> list[dict[str, Any]]:
    """Per LASNet-style masked block of the plan (passes/lasnet_blocks.py): the block's dense dispatches predicted,
    and at each activation rate the sparse prediction per patch size S and the choice (latency/sparse.py)."""
    from gpuengine.latency.latency import predict_ns
    from gpuengine.latency.sparse import choose_execution
    from gpuengine.lowering.kernels import lasnet
    from gpuengine.lowering.kernels.dispatch_cost import dispatch_cost
    from gpuengine.passes.lasnet_blocks import find_masked_blocks

    graph, partitions = plans[device.target]
    specs = [spec for part in partitions for spec in part]
    rows = []
    for block in find_masked_blocks(graph):
        dense_ns = sum(predict_ns(dispatch_cost(spec, graph, precision), device) for spec in specs
                       if set(spec.ops) & set(block.ops))
        by_rate = {}
        patches = tuple(p for p in lasnet.PATCHES if lasnet.supports(block, p) is None)
        for rate in RATES:
            mode, size, options = choose_execution(device, *block.shape, block.cell, rate, dense_ns, patches)
            by_rate[str(rate)] = {"choice": "dense" if mode == "dense" else f"sparse S={size}",
                                  "predicted_us": {k: v / 1e3 for k, v in options.items()}}
        rows.append({"output": graph.tensors[block.out].name, "shape": list(block.shape), "cell": block.cell,
                     "dense_us": dense_ns / 1e3, "rates": by_rate})
    return rows


def as_json(name: str, p: Any, position: int | None = None) -> dict[str, Any]:
    return {"model": name, "device": p.device.name, "device_source": p.device.source, "position": position,
            "predicted_ms": p.gpu_ns / 1e6, "floor_ms": p.floor_ns / 1e6, "ratio": p.ratio,
            "fixed_ms": p.fixed_ns / 1e6, "total_ms": p.total_ns / 1e6,
            "host_record_us_per_dispatch": p.device.recording_ns / 1e3, "host_ms": p.host_ns / 1e6,
            "steps_per_s": p.steps_per_s, "bound_by": "host" if p.host_ns > p.gpu_ns else "gpu",
            "dispatches": [{"label": c.label, "predicted_ms": ns / 1e6, "floor_ms": fl / 1e6,
                            "invocations": c.invocations, "workgroups": c.workgroups, "bytes": c.bytes,
                            "macs": c.macs} for c, ns, fl in p.dispatches]}


def run(args: argparse.Namespace) -> int:
    from gpuengine.latency import devices

    names = devices.names() if args.device == "all" and not args.fit else [args.device]
    results = []
    for model_name, data in models(args):
        plans: dict[str, Any] = {}  # one plan per adapter class, shared by its descriptions
        for name in names:
            device = description(args, name)
            results.append(as_json(model_name, predict_model(data, device, args.precision, plans,
                                                             args.signature, args.hybrid, args.position),
                                   args.position))
            results[-1]["sparse_blocks"] = sparse_blocks(data, device, args.precision, plans)
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results))
        return 0
    for r in results:
        if len(names) == 1:
            print(f"model: {r['model']}\ndevice: {r['device']} ({r['device_source']})")
            print(f"{'#':>4} {'dispatch':<58} {'predicted us':>12} {'floor us':>9} {'x floor':>8}")
            for k, d in enumerate(r["dispatches"]):
                ratio = d["predicted_ms"] / d["floor_ms"] if d["floor_ms"] else float("inf")
                print(f"{k:>4} {d['label'][:58]:<58} {d['predicted_ms'] * 1e3:12.1f} {d['floor_ms'] * 1e3:9.1f} "
                      f"{ratio:8.1f}")
        print(f"{r['model']} on {r['device']}: GPU {r['predicted_ms']:.3f} ms predicted, floor {r['floor_ms']:.3f} ms "
              f"({r['ratio']:.1f}x the floor); with submit and recording {r['total_ms']:.3f} ms per invoke")
        what = "tokens/s (decode steps in flight)" if args.signature == "decode" else "invokes/s with invokes in flight"
        print(f"  {r['steps_per_s']:,.0f} {what}: min(GPU {1e3 / r['predicted_ms']:,.0f}, host "
              f"{1e3 / r['host_ms']:,.0f}), the host recording {len(r['dispatches'])} dispatches at "
              f"{r['host_record_us_per_dispatch']:.1f} us ({r['host_ms']:.3f} ms); {r['bound_by']}-bound")
        for b in r["sparse_blocks"]:
            print(f"  masked block -> {b['output']} {b['shape']} (cell {b['cell']}): dense {b['dense_us']:.1f} us; "
                  "sparse (LASNet) by activation rate: " + "; ".join(
                      f"{rate}: {row['choice']} ({min(row['predicted_us'].values()):.1f} us)"
                      for rate, row in b["rates"].items()))
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("predict", help="predicted GPU time per dispatch and in total, and the floor, without a GPU")
    p.add_argument("models", nargs="*", help="model(s) (default: the zoo's mobilenet_v2)")
    p.add_argument("--device", default=None,
                   help="built-in description (h100, rtx4090, rtx3060, apple-m1, iris-xe, lavapipe; 'all': each), "
                        "or with --fit the adapter key in the fit file (default: its only one)")
    p.add_argument("--fit", default=None, help="a fit file written by `gpuengine calibrate`")
    p.add_argument("--precision", default="fp32", choices=("fp32", "fp16"),
                   help="precision to predict for (default fp32)")
    p.add_argument("--signature", default=None, help="predict this signature's subgraph (default: the main graph)")
    p.add_argument("--hybrid", default="integer", choices=("integer", "float"),
                   help="arithmetic of hybrid int8 FULLY_CONNECTED ops (the engine option hybrid_arithmetic)")
    p.add_argument("--position", type=at_least(0), default=None,
                   help="a decode step's position, for what a kernel reads only up to it (default: the cache full, "
                        "the worst case)")
    p.add_argument("--json", action="store_true", help="print the prediction as JSON")
    p.set_defaults(func=run)
