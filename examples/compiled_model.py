"""LiteRT 2.x's CompiledModel example, on gpuengine or on LiteRT: the same code, one import apart.

Runs every signature of a model once on random inputs through TensorBuffers and prints each output's shape and
first values. With --litert the script imports ai_edge_litert's CompiledModel / HardwareAccelerator instead of
gpuengine's (and runs on LiteRT's CPU accelerator); nothing else changes.

Run: .venv/bin/python examples/compiled_model.py [MODEL.tflite | zoo name, default tiny] [--litert]
"""

from __future__ import annotations

import argparse
import os

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="tiny", help="a .tflite file or a gpuengine zoo model name")
    parser.add_argument("--litert", action="store_true", help="run on ai_edge_litert's CompiledModel (CPU)")
    args = parser.parse_args()
    if args.litert:
        from ai_edge_litert.compiled_model import CompiledModel
        from ai_edge_litert.hardware_accelerator import HardwareAccelerator

        accel = HardwareAccelerator.CPU
    else:
        from gpuengine import CompiledModel, HardwareAccelerator

        accel = HardwareAccelerator.GPU
    if os.path.exists(args.model):
        model = CompiledModel.from_file(args.model, hardware_accel=accel)
    else:
        from gpuengine import zoo

        model = CompiledModel.from_buffer(zoo.get(args.model), hardware_accel=accel)

    rng = np.random.default_rng(0)
    print(f"{type(model).__module__}.CompiledModel, fully accelerated: {model.is_fully_accelerated()}")
    for index, (key, names) in enumerate(model.get_signature_list().items()):
        inputs, outputs = model.create_input_buffers(index), model.create_output_buffers(index)
        details = model.get_input_tensor_details(key)
        for buffer, name in zip(inputs, names["inputs"]):
            d = details[name]
            if d["dtype"] in ("float32", "float16"):
                value = rng.uniform(-1, 1, d["shape"]).astype(d["dtype"])
            else:  # integer inputs (token ids, positions, quantized images): small values every model accepts
                value = np.zeros(d["shape"], d["dtype"])
            buffer.write(value)
        model.run_by_index(index, inputs, outputs)
        for buffer, (name, d) in zip(outputs, model.get_output_tensor_details(key).items()):
            count = int(np.prod(d["shape"]))
            values = buffer.read(count, np.dtype(d["dtype"]))
            print(f"{key} -> {name} {d['dtype']} {d['shape']}: {np.array2string(values[:4], precision=4)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
