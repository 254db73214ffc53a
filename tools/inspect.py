"""`gpuengine inspect MODEL`: the partitions, dispatches, memory and kernels of a model (text or --json)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .common import add_engine_options, interpreter, load_model


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
    from gpuengine.lowering.kernels.prologue import model_ops
    from gpuengine.memory import plan_memory
    from gpuengine.memory.strategies import STRATEGIES
    from gpuengine.model.reader import read_model
    from gpuengine.model.symbolic import analyze
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
    # ops in evaluation order: those folded into a kernel's input loads (lowering/kernels/prologue.py) come first
    dispatch_list = [{"kernel": d.spec.shader, "label": d.spec.label,
                      "ops": [code for i in d.spec.ops for code in model_ops(graph.ops[i])],
                      "workgroup": list(d.spec.workgroup), "grid": list(d.groups),
                      "invocations": p.launched(k), "macs": p.macs(k), "parametric": p.parametric(k),
                      "decomposition": d.spec.decomposition.to_json() if d.spec.decomposition else None}
                     for p in compiled.gpu_programs for k, d in enumerate(p.dispatches)]
    weights = {key: size for p in compiled.gpu_programs for key, size in p.constant_buffers().items()}
    subgraph = runner.subgraph_index if getattr(args, "signature", None) else 0
    return {
        "symbolic": analyze(model.subgraphs[subgraph], model).to_json(),
        "symbolic_plan": symbolic_plan_report(it.symbolic_plan),
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
        # the device's profile, its limits and features, and what they changed in the kernel choice
        "device": ({"profile": compiled.gpu.profile, "limits": compiled.gpu.device_limits.describe(),
                    "variants": compiled.variant_notes()} if compiled.gpu else None),
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
    if report["device"]:
        device = report["device"]
        print(f"device: {device['profile']} profile: {device['limits']}"
              + "".join(f"\n  kernel variants: {note}" for note in device["variants"]))
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
        for block in p.get("sparse", []):
            predicted = ", ".join(f"{name} {us:.0f} us" for name, us in block["predicted_us"].items())
            print(f"  spatially sparse (LASNet), S={block['patch']}: {block['ops']} ops from op {block['first_op']}, "
                  f"indirect dispatches in the partition's program (predicted: {predicted})")
    for op, reason in report["unsupported"].items():
        print(f"  on CPU: {op}: {reason}")
    for remark in report["remarks"]:
        print(f"  pass: {remark}")
    print("memory: " + ", ".join(f"{s} {b / 2**20:.2f} MiB" for s, b in report["memory_bytes"].items())
          + f"; constants (weights) {report['weight_bytes'] / 2**20:.2f} MiB")
    print_symbolic(report["symbolic"], args.symbolic)
    if report["symbolic"]["symbols"]:
        baked = [d for d in report["dispatch_list"] if not d["parametric"]]
        print(f"parametric dispatches (sizes read from a buffer, compiled once for every size): "
              f"{len(report['dispatch_list']) - len(baked)} of {len(report['dispatch_list'])}; baked (a text the sizes "
              f"do not change, or one compiled again where they do): "
              f"{', '.join(sorted({d['kernel'] for d in baked})) or 'none'}")
        print_symbolic_plan(report["symbolic_plan"], args.symbolic)
    print(f"{'#':>4} {'kernel':<22} {'workgroup':<12} {'grid':<16} {'invocations':>11} {'MACs':>11}  ops")
    for k, d in enumerate(report["dispatch_list"]):
        print(f"{k:>4} {d['kernel']:<22} {'x'.join(map(str, d['workgroup'])):<12} "
              f"{'x'.join(map(str, d['grid'])):<16} {d['invocations']:>11} {d['macs']:>11}  "
              f"{'+'.join(d['ops']) or d['label']}"
              + (f": {d['label'].rsplit(' [', 1)[0]}" if d["kernel"] in described or "silu(gate)" in d["label"]
                 else ""))
    return 0


def symbolic_plan_report(plan: Any) -> dict[str, Any]:
    """The symbolic plan new sizes are evaluated from (runtime/symbolic_plan.py), or why the model has none."""
    if plan is None:
        return {"made": False, "why": "the model's input sizes are static"}
    if isinstance(plan, str):
        return {"made": False, "why": plan}
    return {"made": True, **plan.report()}


def print_symbolic_plan(plan: dict[str, Any], every_dispatch: bool) -> None:
    """One line, and with --symbolic each dispatch's shape classes and versions."""
    if not plan["made"]:
        print(f"symbolic plan: none ({plan['why']}): each new size is planned (as LiteRT re-plans)")
        return
    ranges = ", ".join(f"{s} in [{lo}, {hi}]" for s, (lo, hi) in plan["range"].items())
    print(f"symbolic plan: made once from {plan['samples']} sampled sizes, {plan['expressions']} expressions over "
          f"{', '.join(plan['atoms'])}; serves {ranges} by evaluating them (no planning, no rendering, no compile)")
    print(f"  memory at run time: {plan['memory']}")
    for k, d in enumerate(plan["dispatches"]):
        if every_dispatch or d["rows"] is not None:
            classes = ", ".join(f"{c}: {v}" for c, v in d["versions"].items())
            rows = f"shape class by rows {d['rows']}" if d["rows"] is not None else "one version"
            print(f"  dispatch {k} {d['shader']}: {rows} -> {classes}")


def print_symbolic(rdp: dict[str, Any], every_op: bool) -> None:
    """Rank and Dimension Propagation (model/symbolic.py): the symbols, and per op its class (SoD²) and symbolic
    output shapes; the ops where planning splits (class 3 with run-time values, class 4) are marked."""
    ops = rdp["ops"]
    classes = {c: sum(1 for o in ops if o["class"] == c) for c in (1, 2, 3, 4)}
    symbolic = [o for o in ops if o["symbolic"]]
    splits = [o for o in ops if o["split"]]
    print(f"symbolic shapes (RDP, {rdp['rounds']} rounds): symbols {', '.join(rdp['symbols']) or 'none'}; ops by "
          f"class {classes}; {len(symbolic)} ops with symbolic sizes (a new size evaluates the symbolic plan, or "
          f"re-plans where there is none); "
          f"{len(splits)} split points")
    for name, value in rdp["bindings"].items():
        print(f"  {name} = {value} (found by propagation)")
    for text in rdp["conflicts"]:
        print(f"  conflict: {text}")
    for o in ops:
        if every_op or o["split"] or o in symbolic:
            mark = " SPLIT: " + o["how"] if o["split"] else ("" if o["how"] == "rule" else f" ({o['how']})")
            print(f"  op {o['index']:>4} {o['code']:<22} class {o['class']}: {' '.join(o['outputs'])}{mark}")


def add_parser(sub: Any) -> None:
    ins = sub.add_parser("inspect", help="partitions, dispatches, memory and kernels of a model")
    ins.add_argument("model", help="a .tflite path, a zoo name or a reference model name")
    ins.add_argument("--json", action="store_true", help="print the report as one JSON object")
    ins.add_argument("--dump-wgsl", metavar="DIR", help="write every generated WGSL source to DIR")
    ins.add_argument("--signature", metavar="KEY", help="report this signature's graph (get_signature_list())")
    ins.add_argument("--symbolic", action="store_true",
                     help="list every op's class and symbolic output shapes (by default: the symbolic ones only)")
    ins.add_argument("--resize", action="append", default=[], metavar="INDEX=D0,D1,...",
                     help="inspect the plan with input INDEX (its position) resized to this shape (repeatable)")
    add_engine_options(ins)
    ins.set_defaults(func=cmd_inspect)
