"""A new input size, before and after one compile for many shapes (docs/design/symbolic-shapes.md): for the FCN
and the encoder of tests/builders.py, the time of resize_tensor_input + allocate_tensors (the host's planning part)
and of that plus the first invoke at five new sizes after the first, and the shader modules compiled there. Run it
on another checkout with PYTHONPATH to measure that one.

    .venv/bin/python scripts/dev/bench_new_shapes.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

import numpy as np  # noqa: E402
from builders import encoder_model, fcn_model  # noqa: E402
from wgpu.backends.wgpu_native import GPUDevice  # noqa: E402

import gpuengine  # noqa: E402

COMPILES = [0]
_create = GPUDevice.create_shader_module


def _counted(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
    COMPILES[0] += 1
    return _create(self, *args, **kwargs)


GPUDevice.create_shader_module = _counted
CASES = {
    "fcn [1,-1,-1,3]": (fcn_model, [(1, 12, 10, 3), (1, 16, 16, 3), (1, 7, 21, 3), (1, 30, 9, 3), (1, 24, 32, 3)]),
    "encoder [1,-1,16]": (encoder_model, [(1, 5, 16), (1, 13, 16), (1, 3, 16), (1, 20, 16), (1, 11, 16)]),
}


def main() -> None:
    print(f"gpuengine from {Path(gpuengine.__file__).parent}")
    for name, (build, shapes) in CASES.items():
        it = gpuengine.Interpreter(model_content=build())
        start = COMPILES[0]
        t0 = time.perf_counter()
        it.allocate_tensors()
        first_ms, first_compiles = (time.perf_counter() - t0) * 1e3, COMPILES[0] - start
        times, compiles, invokes = [], [], []
        for shape in shapes:
            start = COMPILES[0]
            t0 = time.perf_counter()
            it.resize_tensor_input(0, list(shape))
            it.allocate_tensors()  # the host's planning part (a symbolic plan: evaluating it)
            t1 = time.perf_counter()
            it.set_tensor(0, np.zeros(shape, np.float32))
            it.invoke()
            times.append((t1 - t0) * 1e3)
            invokes.append((time.perf_counter() - t0) * 1e3)
            compiles.append(COMPILES[0] - start)
        plan = getattr(it, "symbolic_plan", None)
        evaluated = f"; symbolic plan: {plan.last_ms['evaluate']:.2f} ms evaluating the expressions at the last" \
            if plan is not None and not isinstance(plan, str) else ""
        print(f"{name}: first allocation {first_ms:.0f} ms, {first_compiles} shader modules; new sizes: "
              f"allocate_tensors median {statistics.median(times):.1f} ms "
              f"(each {', '.join(f'{t:.1f}' for t in times)}),"
              f" resize + allocate + first invoke median {statistics.median(invokes):.1f} ms, shader modules "
              f"{sum(compiles)} ({', '.join(map(str, compiles))}){evaluated}")


if __name__ == "__main__":
    main()
