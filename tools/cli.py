"""The `gpuengine` command: run, inspect, memplan, fetch-models, ops; bench, profile and tune live in their own
modules beside this one (tools/bench.py, tools/profile.py, tools/tune.py)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .common import add_engine_options, feeds, interpreter, load_model


def cmd_run(args: argparse.Namespace) -> int:
    from gpuengine.oracle import relative_error, run_litert

    name, data = load_model(args.model)
    t0 = time.perf_counter()
    it = interpreter(data, args)
    compile_ms = (time.perf_counter() - t0) * 1e3
    inputs = feeds(it, args.input, args.seed)
    for t, v in inputs.items():
        it.set_tensor(t, v)
    it.invoke()  # warm-up
    times = []
    for _ in range(max(1, args.runs)):
        t0 = time.perf_counter()
        it.invoke()
        times.append((time.perf_counter() - t0) * 1e3)
    outputs = {d["index"]: it.get_tensor(d["index"]) for d in it.get_output_details()}
    compiled = it.compiled
    print(f"model: {name}")
    print(f"adapter: {compiled.gpu.name if compiled.gpu else 'none'}"
          + (f" (target {compiled.target.describe()})" if compiled.target else ""))
    print(f"ops on GPU: {compiled.plan.ops_gpu}/{len(compiled.plan.graph.ops)}, partitions: "
          f"{len(compiled.plan.partitions)}, dispatches: {compiled.dispatches}, compile: {compile_ms:.0f} ms")
    print(f"invoke: median {np.median(times):.2f} ms over {len(times)} runs")
    try:
        ref = run_litert(data, inputs)
    except ImportError:
        ref = None
        print("LiteRT not installed: no comparison (pip install 'gpuengine[litert]')")
    worst = 0.0
    for d in it.get_output_details():
        out = outputs[d["index"]]
        line = f"output {d['name']}: shape {tuple(out.shape)} {out.dtype}"
        if ref is not None:
            r = ref[d["index"]]
            err = relative_error(out, r)
            worst = max(worst, err)
            line += f", max |diff| vs LiteRT {np.max(np.abs(out.astype(np.float64) - r), initial=0):.3g} " \
                    f"(relative {err:.3g})"
        print(line)
        if args.output_dir:
            Path(args.output_dir).mkdir(parents=True, exist_ok=True)
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in d["name"])
            np.save(Path(args.output_dir) / f"{safe}.npy", out)
    if ref is not None and worst > args.tolerance:
        print(f"FAIL: outputs differ from LiteRT by {worst:.3g} > {args.tolerance}", file=sys.stderr)
        return 1
    return 0


def parse_resize(items: list[str]) -> dict[int, list[int]]:
    """--resize INDEX=D0,D1,... (INDEX: the input's position in get_input_details()) -> {position: shape}."""
    shapes: dict[int, list[int]] = {}
    for item in items:
        index, _, dims = item.partition("=")
        try:
            shapes[int(index)] = [int(d) for d in dims.split(",")]
        except ValueError:
            raise SystemExit(f"gpuengine: --resize takes INDEX=D0,D1,... (integers), got {item!r}") from None
    return shapes


def inspect_report(data: bytes, args: argparse.Namespace) -> dict[str, Any]:
    from gpuengine.kernels.prologue import model_ops
    from gpuengine.memory import plan_memory
    from gpuengine.memory.strategies import STRATEGIES
    from gpuengine.model.reader import read_model
    from gpuengine.planning import partition_report

    model = read_model(data)
    it = interpreter(data, args)
    resize = parse_resize(getattr(args, "resize", None) or [])
    if resize:
        inputs = it.get_input_details()
        for position, shape in resize.items():
            if not 0 <= position < len(inputs):
                raise SystemExit(f"gpuengine: --resize {position}=...: the model has {len(inputs)} inputs")
            it.resize_tensor_input(inputs[position]["index"], shape)
        it.allocate_tensors()
    ops_in_file, shape_cache = len(model.main.ops), it.shape_cache
    input_shapes = [d["shape"].tolist() for d in it.get_input_details()]
    if getattr(args, "signature", None):  # that signature's graph, compiled as its runner compiles it on first use
        try:
            runner = it.get_signature_runner(args.signature)
        except ValueError as e:
            raise SystemExit(f"gpuengine: --signature: {e}") from None
        compiled = runner.compiled
        ops_in_file = len(model.subgraphs[runner.subgraph_index].ops)
        input_shapes = [d["shape"].tolist() for d in runner.get_input_details().values()]
        shape_cache = runner.shape_cache
    else:
        compiled = it.compiled
    plan = compiled.plan
    graph = plan.graph
    memory: dict[str, int] = {}
    align = compiled.gpu.storage_alignment if compiled.gpu else 256
    for strategy in STRATEGIES:
        memory[strategy] = sum(plan_memory(p.info.records, strategy, align).total_bytes
                               for p in compiled.gpu_programs)
    # ops in evaluation order: those folded into a kernel's input loads (kernels/prologue.py) come first
    dispatch_list = [{"kernel": d.spec.shader, "label": d.spec.label,
                      "ops": [code for i in d.spec.ops for code in model_ops(graph.ops[i])],
                      "workgroup": list(d.spec.workgroup), "grid": list(d.groups),
                      "invocations": p.launched(k), "macs": p.macs(k),
                      "decomposition": d.spec.decomposition.to_json() if d.spec.decomposition else None}
                     for p in compiled.gpu_programs for k, d in enumerate(p.dispatches)]
    weights = {key: size for p in compiled.gpu_programs for key, size in p.constant_buffers().items()}
    return {
        "signature": getattr(args, "signature", None),
        "ops_in_file": ops_in_file,
        "ops_total": len(graph.ops),
        "ops_gpu": plan.ops_gpu,
        "partitions": [partition_report(plan, p) for p in plan.partitions],
        "dispatches": compiled.dispatches,
        "unsupported": plan.unsupported,
        "remarks": list(graph.remarks),
        "memory_bytes": memory,
        "weight_bytes": sum(weights.values()),
        "adapter": compiled.gpu.name if compiled.gpu else None,
        "target": compiled.target.name if compiled.target else None,
        "precision": compiled.precision,
        "f32_tensors": compiled.f32_tensors,
        "dispatch_list": dispatch_list,
        "input_shapes": input_shapes,
        "shape_cache": shape_cache,
        "_interpreter": it,
    }


def cmd_inspect(args: argparse.Namespace) -> int:
    # kernels whose label says what they compute where the op names do not (a hybrid FC's quantization, a norm
    # read as its prologue, a gated projection): the label, less its decomposition
    described = ("fully_connected_int8",)
    name, data = load_model(args.model)
    report = inspect_report(data, args)
    it = report.pop("_interpreter")
    if args.dump_wgsl:
        folder = Path(args.dump_wgsl)
        folder.mkdir(parents=True, exist_ok=True)
        compiled = it.get_signature_runner(args.signature).compiled if args.signature else it.compiled
        dispatches = [d for p in compiled.gpu_programs for d in p.dispatches]
        for k, d in enumerate(dispatches):
            (folder / f"{k:04d}_{d.spec.shader}.wgsl").write_text(d.source)
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"model: {name}" + (f" (signature {args.signature!r})" if args.signature else "")
          + f"\nadapter: {report['adapter']} (target {report['target']}, precision {report['precision']})")
    print(f"ops: {report['ops_in_file']} in file, {report['ops_total']} after load-time folding, "
          f"{report['ops_gpu']} on GPU; dispatches per invoke: {report['dispatches']}")
    print(f"input shapes: {report['input_shapes']}; shape cache: {report['shape_cache']}")
    for k, p in enumerate(report["partitions"]):
        if p.get("driver") == "host":
            subs = ", ".join(f"{role} subgraph {s['index']}: {[q['device'] for q in s['partitions']]}"
                             for role, s in p["subgraphs"].items())
            print(f"partition {k} [gpu, driven by the host]: {p['op']} ({subs})"
                  + (f"; loop-carried tensors: {p['loop_carried']}" if "loop_carried" in p else ""))
            continue
        print(f"partition {k} [{p['device']}]: {len(p['ops'])} ops")
    for op, reason in report["unsupported"].items():
        print(f"  on CPU: {op}: {reason}")
    for remark in report["remarks"]:
        print(f"  pass: {remark}")
    print("memory: " + ", ".join(f"{s} {b / 2**20:.2f} MiB" for s, b in report["memory_bytes"].items())
          + f"; constants (weights) {report['weight_bytes'] / 2**20:.2f} MiB")
    print(f"{'#':>4} {'kernel':<22} {'workgroup':<12} {'grid':<16} {'invocations':>11} {'MACs':>11}  ops")
    for k, d in enumerate(report["dispatch_list"]):
        print(f"{k:>4} {d['kernel']:<22} {'x'.join(map(str, d['workgroup'])):<12} "
              f"{'x'.join(map(str, d['grid'])):<16} {d['invocations']:>11} {d['macs']:>11}  "
              f"{'+'.join(d['ops']) or d['label']}"
              + (f": {d['label'].rsplit(' [', 1)[0]}" if d["kernel"] in described or "silu(gate)" in d["label"]
                 else ""))
    return 0


def cmd_memplan(args: argparse.Namespace) -> int:
    from gpuengine.memory import compare, format_table, plan_memory, plot

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
    strategies = tuple(args.strategies.split(",")) if args.strategies else None
    report = compare(records_by_model, strategies) if strategies else compare(records_by_model)
    if args.plot:
        plans = {m: (r, plan_memory(r, "best")) for m, r in records_by_model.items()}
        plot(report, plans, args.plot)
    print(json.dumps(report, indent=None) if args.json else format_table(report))
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    from . import fetch

    try:
        models = fetch.fetch(force=args.force, quiet=False)
    except fetch.ModelsUnavailable as e:
        print(f"gpuengine: {e}", file=sys.stderr)
        return 1
    print(f"{len(models)} models in {fetch.cache_dir()}:")
    for name in models:
        print(f"  {name}")
    return 0


def ops_markdown() -> str:
    """The supported-op table of the README, generated from the kernel registry."""
    from gpuengine.kernels import registry

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuengine", description="Run TensorFlow Lite models on the GPU (WebGPU).")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a model once (random seeded inputs unless given) and check it vs LiteRT")
    run.add_argument("model", nargs="?", help="a .tflite path, a zoo name or a reference model name")
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    run.add_argument("--output-dir")
    run.add_argument("--runs", type=int, default=10)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--tolerance", type=float, default=1e-4, help="max relative difference to LiteRT")
    add_engine_options(run)
    run.set_defaults(func=cmd_run)
    ins = sub.add_parser("inspect", help="partitions, dispatches, memory and kernels of a model")
    ins.add_argument("model")
    ins.add_argument("--json", action="store_true")
    ins.add_argument("--dump-wgsl", metavar="DIR", help="write every generated WGSL source to DIR")
    ins.add_argument("--signature", metavar="KEY", help="report this signature's graph (get_signature_list())")
    ins.add_argument("--resize", action="append", default=[], metavar="INDEX=D0,D1,...",
                     help="inspect the plan with input INDEX (its position) resized to this shape (repeatable)")
    add_engine_options(ins)
    ins.set_defaults(func=cmd_inspect)
    mem = sub.add_parser("memplan", help="compare memory strategies for intermediate tensors")
    mem.add_argument("models", nargs="+")
    mem.add_argument("--strategies",
                     help="comma-separated subset of naive,greedy,mincostflow,greedy_by_size,offsets,best")
    mem.add_argument("--json", action="store_true")
    mem.add_argument("--plot", metavar="OUT.png")
    add_engine_options(mem)
    mem.set_defaults(func=cmd_memplan)
    fetch = sub.add_parser("fetch-models", help="download the reference models (mediapipe==0.10.14) into the cache")
    fetch.add_argument("--force", action="store_true")
    fetch.set_defaults(func=cmd_fetch)
    ops = sub.add_parser("ops", help="the ops that run on the GPU (a markdown table, from the kernel registry)")
    ops.set_defaults(func=cmd_ops)
    from . import bench, calibrate, fuzz, llm, precision, predict, profile, tune

    for module in (bench, profile, tune, fuzz, precision, predict, calibrate, llm):
        module.add_subcommand(sub)
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
