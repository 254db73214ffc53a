"""`gpuengine profile`: GPU time per dispatch, and where the host spends an invoke.

Host figures, medians over --runs invokes of `Interpreter.invoke()`:
* host_critical_ms: time inside invoke() that is neither the input upload, the output readback nor the span
  from submit until the results are mapped (the host waiting for the GPU). What remains is the host work an
  invoke cannot hide: handing the command buffer to the queue and the engine's own bookkeeping.
* host_overlapped_ms: recording the next invoke's command buffer, done while the GPU runs this one; it costs
  nothing as long as it is shorter than the GPU's work (gpu_span_ms), else the excess lengthens the wait.
* host_encode_ms: recording one invoke's command buffer (the same work, timed alone); host_record_us_per_dispatch:
  that per dispatch (the latency model's Device.record_raw_ns on this machine); recorded_calls: the host calls it
  makes (a pipeline or bind group is set only where it changes).
With --signature KEY, an invoke is one call of that signature in a loop carrying its state on the GPU (a decode
step: the KV cache bound to the last call's output buffers, only the other outputs read back), as a decode loop
runs it.
* sparse_blocks: per LASNet-style masked block the input feeds, its dense dispatches against spatially sparse
  execution at each patch size S on the same input, and the measured choice (tuning/sparse.py).
* control_flow: per WHILE / IF the host drives, medians per invoke of the decisions it made (one per IF, one per
  cond evaluation of a WHILE), the milliseconds deciding took and the milliseconds the chosen subgraphs ran
  (runtime/control_flow.ControlTiming), and the branch taken / iterations of the last invoke.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from .common import add_engine_options, at_least, feeds, interpreter, models, predicted_vs_measured
from .litert_runner import time_invokes


def host_figures(it: Any, runs: int, call: Any = None) -> dict[str, float]:
    """Median milliseconds per invoke of each host phase (see the module docstring); `call`: what an invoke is
    (default it.invoke; `it` is then anything with `compiled`)."""
    progs = it.compiled.gpu_programs
    call = call or it.invoke
    rows = []
    for _ in range(max(1, runs)):
        start = time.perf_counter()
        call()
        total = time.perf_counter() - start
        phases = [p.phases for p in progs]
        upload = sum(p.upload for p in phases)
        readback = sum(p.readback for p in phases)
        overlapped = sum(p.record_next for p in phases)
        wait = sum(p.wait for p in phases)
        submit = sum(p.submit for p in phases)
        rows.append((total, total - upload - readback - overlapped - wait, upload, readback, overlapped, wait, submit))
    med = np.median(np.array(rows), axis=0) * 1e3
    encodes = []
    for _ in range(max(10, runs)):  # timing the recording alone (median: one slow recording is no figure)
        start = time.perf_counter()
        for p in progs:
            p.encode_invoke()
        encodes.append(time.perf_counter() - start)
    encode = float(np.median(encodes)) * 1e3
    keys = ("invoke_ms", "host_critical_ms", "upload_ms", "readback_ms", "host_overlapped_ms", "gpu_wait_ms",
            "submit_ms")
    dispatches = sum(len(p.dispatches) for p in progs)
    return {**{k: float(v) for k, v in zip(keys, med)}, "host_encode_ms": encode,
            "host_record_us_per_dispatch": encode * 1e3 / dispatches if dispatches else 0.0,
            "recorded_calls": sum(p.recorded_calls for p in progs)}


def control_figures(it: Any, runs: int, call: Any = None) -> list[dict[str, Any]]:
    """Per host-driven WHILE / IF of the graph, medians over `runs` invokes of its ControlTiming."""
    programs = it.compiled.control_programs
    if not programs:
        return []
    call = call or it.invoke
    samples: list[list[tuple[int, float, float]]] = [[] for _ in programs]
    for _ in range(max(1, runs)):
        call()
        for k, p in enumerate(programs):
            samples[k].append((p.timing.decisions, p.timing.decide_s * 1e3, p.timing.run_s * 1e3))
    rows = []
    for p, got in zip(programs, samples):
        med = np.median(np.array(got), axis=0)
        rows.append({"op": p.op.code, "decisions": float(med[0]), "decide_ms": float(med[1]), "run_ms": float(med[2]),
                     "last": getattr(p, "taken", None) or f"{getattr(p, 'iterations', 0)} iterations"})
    return rows


def sparse_figures(it: Any, inputs: dict[int, Any], runs: int) -> list[dict[str, Any]]:
    """Per LASNet-style masked block of the model (passes/lasnet_blocks.py) whose input is a model input: the
    block's dense dispatches in the program timed, and spatially sparse execution (runtime/sparse_block.py) at
    each S on the profiled input, with the measured choice (tuning/sparse.py) at the input's activation rate."""
    from gpuengine.passes.lasnet_blocks import find_masked_blocks
    from gpuengine.runtime.sparse_block import SparseBlockRunner
    from gpuengine.runtime.timing import DispatchTimer
    from gpuengine.tuning.sparse import measure_block

    rows = []
    for prog in it.compiled.gpu_programs:
        for block in find_masked_blocks(prog.graph):
            if block.x not in inputs:
                continue  # only blocks the profiled input feeds directly are run here
            hot = [h for h, d in zip(prog.hot_dispatches, prog.dispatches) if set(d.spec.ops) & set(block.ops)]
            timer = DispatchTimer(prog)
            dense_ms = min(timer.span(runs=1, dispatches=hot, warmup_s=0) for _ in range(max(1, runs))) / 1e6
            times = measure_block(prog.gpu, block, dense_ms, runs=max(1, runs // 2))
            sparse, active = {}, {}
            for patch in times.none_ms:
                runner = SparseBlockRunner(prog.gpu, block, patch)
                runner.run(inputs[block.x])
                sparse[patch] = min(runner.time_ms(runs=1) for _ in range(max(1, runs)))
                active[patch] = f"{runner.active}/{runner.patches_total}"
            rate = _cell_rate(block, inputs[block.x])
            mode, size, _ = times.choose(rate)
            rows.append({"output": prog.graph.tensors[block.out].name, "rate": rate, "dense_ms": dense_ms,
                         "sparse_ms": sparse, "active": active, "choice": "dense" if mode == "dense" else
                         f"sparse S={size}"})
    return rows


def _cell_rate(block: Any, x: Any) -> float:
    """The fraction of the block's masker cells active on input x (numpy, as the masker computes it)."""
    h, w, c = block.shape
    pooled = np.asarray(x, np.float32).reshape(h // block.cell, block.cell, w // block.cell, block.cell, c)
    logits = pooled.mean(axis=(1, 3)) @ block.masker_weights + block.masker_bias
    return float((logits > block.threshold).mean())


def device_of(prog: Any) -> Any:
    """The latency model's description of a program's adapter: its fit (`gpuengine calibrate`), else the built-in
    one for its class (lavapipe for a software adapter)."""
    from gpuengine.latency import devices

    if prog.choices.tuned.latency is not None:
        return prog.choices.tuned.latency
    return devices.lavapipe() if prog.gpu.is_software else devices.for_target(prog.target)


def plot(rows: list[dict[str, Any]], path: str, adapter: str | None) -> None:
    """Predicted against measured, one point a dispatch (needs matplotlib)."""
    predicted_vs_measured([r["gpu_ns"] / 1e3 for r in rows], [r["predicted_ns"] / 1e3 for r in rows], path,
                          "measured us (profile)", "predicted us (latency model)", (adapter or "")[:48])


def run(args: argparse.Namespace) -> int:
    from gpuengine.latency.latency import predict_ns
    from gpuengine.lowering.kernels.dispatch_cost import dispatch_cost
    from gpuengine.lowering.kernels.prologue import model_ops
    from gpuengine.runtime.timing import DispatchTimer

    name, data = models(args)[0]
    it = interpreter(data, args)
    call = None
    if args.signature:
        it, call, e2e = signature_loop(it, args)
    else:
        inputs = feeds(it, [], seed=0)
        e2e, _ = time_invokes(it, inputs, args.runs, 3)
    graph = it.compiled.graph
    rows, total_ns, span_ns, pass_ns, method = [], 0.0, 0.0, 0.0, ""
    device = None
    for prog in it.compiled.gpu_programs:
        device = device_of(prog)
        timer = DispatchTimer(prog)
        timing = timer.measure(runs=args.runs)
        method = timing.method
        total_ns += sum(timing.per_dispatch_ns)
        span_ns += timing.total_ns  # the same runs, first to last timestamp
        pass_ns += timer.span(runs=args.runs)  # no timestamps between dispatches: what bench reports
        for k, (d, ns) in enumerate(zip(prog.dispatches, timing.per_dispatch_ns)):
            ops = [code for i in d.spec.ops for code in model_ops(graph.ops[i])]
            rows.append({"kernel": d.spec.shader, "ops": ops or [d.spec.label],
                         "workgroup": list(d.spec.workgroup), "grid": list(d.groups), "gpu_ns": ns,
                         "invocations": prog.launched(k), "macs": prog.macs(k),
                         "predicted_ns": predict_ns(dispatch_cost(d.spec, prog.graph, prog.precision), device),
                         "decomposition": d.spec.decomposition.to_json() if d.spec.decomposition else None})
    for r in rows:
        r["share"] = r["gpu_ns"] / total_ns if total_ns else 0.0
        r["error"] = (r["predicted_ns"] - r["gpu_ns"]) / r["gpu_ns"] if r["gpu_ns"] else None
    host = host_figures(it, args.runs, call)
    control = control_figures(it, args.runs, call)
    sparse = sparse_figures(it, inputs, args.runs) if not args.signature else []
    compiled = it.compiled
    report = {"model": name, "signature": args.signature, "adapter": compiled.gpu.name if compiled.gpu else None,
              "target": compiled.target.name if compiled.target else None, "method": method,
              "dispatches": rows, "gpu_total_ms": total_ns / 1e6, "gpu_span_ms": span_ns / 1e6,
              "gpu_pass_ms": pass_ns / 1e6, "predicted_ms": sum(r["predicted_ns"] for r in rows) / 1e6,
              "latency_model": device.source if device else None,
              **host, "control_flow": control, "sparse_blocks": sparse, "end_to_end_ms": e2e["median_ms"]}
    if args.plot:
        plot(rows, args.plot, report["adapter"])
    if args.json:
        print(json.dumps(report))
        return 0
    signature = f" (signature {args.signature!r})" if args.signature else ""
    print(f"model: {name}{signature}\nadapter: {report['adapter']} (target {report['target']}; timing: {method})")
    print(f"{'#':>4} {'kernel':<22} {'ops':<30} {'workgroup':<10} {'grid':<12} {'invocations':>11} {'gpu us':>9} "
          f"{'share':>6} {'pred us':>9} {'error':>6}")
    for k, r in enumerate(rows):
        print(f"{k:>4} {r['kernel']:<22} {'+'.join(r['ops'])[:30]:<30} {'x'.join(map(str, r['workgroup'])):<10} "
              f"{'x'.join(map(str, r['grid'])):<12} {r['invocations']:>11} {r['gpu_ns'] / 1e3:9.1f} {r['share']:6.1%}"
              f" {r['predicted_ns'] / 1e3:9.1f} {r['error'] if r['error'] is not None else 0:+6.0%}")
    print(f"GPU time: sum of dispatches {report['gpu_total_ms']:.3f} ms, span of those runs "
          f"{report['gpu_span_ms']:.3f} ms (timestamps between dispatches add their own cost); one pass without "
          f"them {report['gpu_pass_ms']:.3f} ms (what bench reports); latency model {report['predicted_ms']:.3f} ms "
          f"({report['latency_model']})")
    print(f"host per invoke: critical {report['host_critical_ms']:.3f} ms (submit {report['submit_ms']:.3f}), "
          f"upload {report['upload_ms']:.3f}, readback {report['readback_ms']:.3f}, waiting for the GPU "
          f"{report['gpu_wait_ms']:.3f}, recording the next invoke meanwhile {report['host_overlapped_ms']:.3f} ms")
    print(f"recording one invoke alone: {report['host_encode_ms']:.3f} ms ({report['host_record_us_per_dispatch']:.2f}"
          f" us per dispatch, {report['recorded_calls']} calls for {len(rows)} dispatches); end to end: "
          f"{report['end_to_end_ms']:.3f} ms per invoke")
    for b in sparse:
        print(f"masked block -> {b['output']} at activation rate {b['rate']:.2f}: dense {b['dense_ms']:.3f} ms; "
              "sparse (LASNet) " + ", ".join(f"S={p} {ms:.3f} ms ({b['active'][p]} patches)"
                                            for p, ms in b["sparse_ms"].items()) + f"; measured choice {b['choice']}")
    for c in control:
        print(f"host-driven {c['op']}: {c['decisions']:g} decision(s) per invoke, deciding {c['decide_ms']:.3f} ms, "
              f"running the chosen subgraphs {c['run_ms']:.3f} ms (last invoke: {c['last']})")
    return 0


def signature_loop(it: Any, args: argparse.Namespace) -> tuple[Any, Any, dict[str, float]]:
    """The signature runner, one call of it in a loop carrying its state on the GPU, and that call's median time."""
    from .bench import resident_call

    try:
        runner = it.get_signature_runner(args.signature)
    except ValueError as e:
        raise SystemExit(f"gpuengine profile: {e}") from None
    _, _, call = resident_call(runner)
    times = []
    for k in range(max(1, args.runs) + 3):
        start = time.perf_counter()
        call()
        if k >= 3:
            times.append(time.perf_counter() - start)
    return runner, call, {"median_ms": float(np.median(times) * 1e3)}


def add_parser(sub: Any) -> None:
    prof = sub.add_parser("profile", help="GPU time per dispatch (timestamp queries) and host time per invoke")
    prof.add_argument("models", nargs="?", help="model (default: the zoo's mobilenet_v2)")
    prof.add_argument("--runs", type=at_least(1), default=10, help="timed passes per dispatch (default 10)")
    prof.add_argument("--json", action="store_true", help="print the profile as JSON")
    prof.add_argument("--plot", default=None, help="save predicted vs measured per dispatch (needs matplotlib)")
    prof.add_argument("--signature", metavar="KEY", help="profile this signature's calls in a loop carrying its "
                      "state on the GPU (decode: the KV cache)")
    add_engine_options(prof)
    prof.set_defaults(func=run)
