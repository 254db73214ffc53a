"""Time a model on LiteRT (CPU/XNNPACK or its GPU accelerator) in a separate process.

Run as `python -m gpuengine.tools.litert_runner IN.npz OUT.npz MODEL {cpu,gpu} RUNS WARMUP`; prints one JSON
line of timings. A separate process because a failing accelerator may abort its host process. `time_invokes`
is the one timing loop `bench` uses for gpuengine and LiteRT alike.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np


def stats(times_ms: list[float]) -> dict[str, float]:
    arr = np.asarray(times_ms, np.float64)
    return {"mean_ms": float(arr.mean()), "median_ms": float(np.median(arr)), "p90_ms": float(np.percentile(arr, 90))}


def run_cpu(model: bytes, feeds: dict[int, np.ndarray], runs: int, warmup: int) -> tuple[dict, dict[int, np.ndarray]]:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=model, num_threads=os.cpu_count())
    it.allocate_tensors()
    return time_invokes(it, feeds, runs, warmup)


def time_invokes(it: Any, feeds: dict[int, np.ndarray], runs: int, warmup: int) -> tuple[dict, dict]:
    """The paper's protocol on any Interpreter-like object (ours or LiteRT's): warm-ups skipped, then N
    end-to-end invokes (host inputs in, host outputs out)."""
    outs = [d["index"] for d in it.get_output_details()]
    times = []
    result: dict[int, np.ndarray] = {}
    for k in range(warmup + runs):
        start = time.perf_counter()
        for t, v in feeds.items():
            it.set_tensor(t, v)
        it.invoke()
        result = {t: it.get_tensor(t) for t in outs}
        if k >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
    return stats(times), result


def run_gpu(model: bytes, feeds: dict[int, np.ndarray], runs: int, warmup: int) -> tuple[dict, dict[int, np.ndarray]]:
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator
    from ai_edge_litert.options import GpuOptions, Options

    from gpuengine.model.reader import read_model

    graph = read_model(model).main
    cm = CompiledModel.from_buffer(model, options=Options(hardware_accelerators=HardwareAccelerator.GPU,
                                                          gpu_options=GpuOptions(enforce_f32=True)))
    if not cm.is_fully_accelerated():
        raise RuntimeError("LiteRT's GPU accelerator did not take the whole model")
    ins, outs = cm.create_input_buffers(0), cm.create_output_buffers(0)
    times = []
    result: dict[int, np.ndarray] = {}
    for k in range(warmup + runs):
        start = time.perf_counter()
        for buf, t in zip(ins, graph.inputs):
            buf.write(np.ascontiguousarray(feeds[t]))
        cm.run_by_index(0, ins, outs)
        for buf, t in zip(outs, graph.outputs):
            shape = graph.tensors[t].shape
            result[t] = np.asarray(buf.read(int(np.prod(shape)), np.float32)).reshape(shape)
        if k >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
    return stats(times), result


def main() -> int:
    in_path, out_path, model_path, accel, runs, warmup = sys.argv[1:7]
    with np.load(in_path) as z:
        feeds = {int(k): z[k] for k in z.files}
    model = open(model_path, "rb").read()
    fn = run_gpu if accel == "gpu" else run_cpu
    try:
        timing, outputs = fn(model, feeds, int(runs), int(warmup))
    except Exception as e:  # noqa: BLE001 - reported to the parent as data
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 0
    np.savez(out_path, **{str(k): v for k, v in outputs.items()})
    print(json.dumps(timing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
