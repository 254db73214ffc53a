"""LiteRT 2.x's CompiledModel example, on gpuengine or on LiteRT: the same code, one import apart.

Runs every signature of a model once on random inputs through TensorBuffers and prints each output's shape and
first values. With --litert the script imports ai_edge_litert's CompiledModel / HardwareAccelerator instead of
gpuengine's (and runs on LiteRT's CPU accelerator); nothing else changes.

With --generate N on a language model (a `decode` signature with `tokens`, `input_pos` and `kv_cache_*`, as
litert-torch writes them) it instead feeds a prompt and greedily generates N tokens through `decode`, passing
each step's KV-cache output buffers to the next step as its inputs: on gpuengine the cache never leaves the GPU.

Run: .venv/bin/python examples/compiled_model.py [MODEL.tflite | zoo name, default tiny] [--litert]
     .venv/bin/python examples/compiled_model.py ../shared/models/toy_decoder_kv.tflite --generate 8 [--litert]
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np


def generate(model: Any, prompt: list[int], steps: int) -> list[int]:
    """Greedy decoding through the `decode` signature, one token per run; the KV cache ping-pongs between two
    sets of TensorBuffers (one step's outputs are the next step's inputs)."""
    key = "decode"
    names = model.get_signature_list()[key]
    cache = [name for name in names["inputs"] if name.startswith("kv_cache")]
    inputs = {name: model.create_input_buffer_by_name(key, name) for name in names["inputs"]}
    sets = [{name: model.create_output_buffer_by_name(key, name) for name in names["outputs"]} for _ in range(2)]
    vocabulary = int(np.prod(model.get_output_tensor_details(key)["logits"]["shape"]))
    for name in cache:  # an empty cache
        shape = model.get_input_tensor_details(key)[name]["shape"]
        inputs[name].write(np.zeros(shape, np.float32))
    tokens, generated = list(prompt), []
    for position in range(len(prompt) + steps - 1):
        inputs["tokens"].write(np.array([[tokens[position]]], np.int32))
        inputs["input_pos"].write(np.array([position], np.int32))
        outputs = sets[position % 2]
        model.run_by_name(key, inputs, outputs)
        inputs.update({name: outputs[name] for name in cache})  # the next step reads this step's cache
        if position >= len(prompt) - 1:
            token = int(np.argmax(outputs["logits"].read(vocabulary, np.float32)))
            generated.append(token)
            tokens.append(token)
    return generated


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="tiny", help="a .tflite file or a gpuengine zoo model name")
    parser.add_argument("--litert", action="store_true", help="run on ai_edge_litert's CompiledModel (CPU)")
    parser.add_argument("--generate", type=int, default=0, metavar="N",
                        help="language model: generate N tokens greedily through the decode signature")
    args = parser.parse_args()
    if args.litert:
        from ai_edge_litert.compiled_model import CompiledModel
        from ai_edge_litert.hardware_accelerator import HardwareAccelerator

        accel = HardwareAccelerator.CPU
    else:
        from gpuengine import CompiledModel, HardwareAccelerator

        accel = HardwareAccelerator.GPU
    from gpuengine.tools.common import load_model  # a .tflite path, a zoo name or a reference-model name

    model = CompiledModel.from_buffer(load_model(args.model)[1], hardware_accel=accel)
    if args.generate:
        if "decode" not in model.get_signature_list():
            raise SystemExit(f"--generate needs a language model with a `decode` signature (e.g. "
                             f"../shared/models/toy_decoder_kv.tflite); {args.model} has "
                             f"{sorted(model.get_signature_list())}")
        prompt = [1, 5, 9, 2]
        print(f"{type(model).__module__}.CompiledModel, prompt {prompt}: {generate(model, prompt, args.generate)}")
        return 0
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
