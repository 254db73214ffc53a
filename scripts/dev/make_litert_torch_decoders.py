"""Converts litert-torch decoders of several families (random weights) into .tflite fixtures and measurement models.

Needs a venv of its own with litert-torch==0.10.0 and tensorflow-cpu; litert-torch is NOT a
dependency of gpuengine and this script is never imported by it.  Each model is a family's real configuration from
``litert_torch.generative.examples`` cut small (1-2 layers, narrow width / MLP / vocab) but keeping what the engine
must handle: the real head dim, query-heads-per-KV-head ratio, norms, activations, RoPE, masks and cache layout.
Weights are seeded random, 1/sqrt(fan_in); norm scales 1 (as ../shared/models/make_smollm_4l_int8.py).

Usage: python scripts/dev/make_litert_torch_decoders.py OUTDIR [--only NAME] [--list]
"""
from __future__ import annotations

import argparse
import copy
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from litert_torch.generative.examples.gemma3 import decoder as gemma3_decoder
from litert_torch.generative.examples.llama import llama
from litert_torch.generative.examples.qwen import qwen, qwen3
from litert_torch.generative.examples.smollm import smollm
from litert_torch.generative.examples.tiny_llama import tiny_llama
from litert_torch.generative.layers import kv_cache
from litert_torch.generative.utilities import converter, export_config, model_builder


@dataclass
class Recipe:
    """One model to convert: its config builder, model class and export settings."""

    config: Callable[[], object]
    model_class: type = model_builder.DecoderOnlyModel
    quantize: str = "dynamic_int8"
    prefill: int = 8
    kv_cache: int = 64
    transposed_cache: bool = False


def _cut(config, layers: int, width: int | None = None, mlp: int | None = None, vocab: int | None = None,
         heads: tuple[int, int] | None = None, pick_blocks: list[int] | None = None):
    """A copy of `config` with fewer layers (optionally the blocks at `pick_blocks`) and a smaller width/MLP/vocab;
    `heads` = (query heads, KV heads) keeps the family's head dim and its query-heads-per-KV-head ratio."""
    config = copy.deepcopy(config)
    if isinstance(config.block_configs, list):
        blocks = [config.block_configs[i] for i in (pick_blocks or range(layers))]
        config.block_configs = blocks
    config.num_layers = layers
    for block in (config.block_configs if isinstance(config.block_configs, list) else [config.block_configs]):
        if mlp is not None:
            block.ff_config.intermediate_size = mlp
        if heads is not None:
            block.attn_config.num_heads, block.attn_config.num_query_groups = heads
    if width is not None:
        config.embedding_dim = width
        if config.embedding_scale is not None:
            config.embedding_scale = width**0.5
    if vocab is not None:
        config.vocab_size = vocab
    return config


def _smollm_135m():
    return smollm.get_model_config()


def _gemma3_1b():
    # Blocks 0 (local sliding window, rope base 10k) and 5 (global, rope base 1M) of Gemma 3 1B: head dim 256,
    # 4 query heads on 1 KV head, q/k RMSNorm, GELU-tanh gated MLP, embedding scale; window cut to 16 positions
    # so that prefill + 32 decode steps slide past it.
    config = _cut(gemma3_decoder.get_decoder_config_1b(), 2, width=64, mlp=128, vocab=256, pick_blocks=[0, 5])
    for block in config.block_configs:
        block.attn_config.sliding_window_size = 16
    return config


def _gemma3_270m_real_vocab():
    config = _cut(gemma3_decoder.get_decoder_config_270m(), 1, mlp=256, pick_blocks=[5])
    return config


def _qwen25_05b():  # head dim 64, 14 query heads on 2 KV heads (7:1), qkv bias
    return _cut(qwen.get_0_5b_model_config(), 2, width=64, mlp=128, vocab=256, heads=(7, 1))


def _qwen3_06b():  # head dim 128, 16 on 8 (2:1), q/k RMSNorm
    return _cut(qwen3.get_0_6b_model_config(), 2, width=64, mlp=128, vocab=256, heads=(4, 2))


def _llama32_1b():  # head dim 64, 32 on 8 (4:1), llama3 RoPE scaling
    return _cut(llama.get_1b_model_config(), 2, width=64, mlp=128, vocab=256, heads=(4, 1))


def _tiny_llama():  # head dim 64, 32 on 4 (8:1)
    return _cut(tiny_llama.get_model_config(), 2, width=64, mlp=128, vocab=256, heads=(8, 1))


def _gqa16():  # no family here has 16:1; TinyLlama's block with 16 query heads on 1 KV head
    return _cut(tiny_llama.get_model_config(), 1, width=64, mlp=128, vocab=256, heads=(16, 1))


RECIPES: dict[str, Recipe] = {
    "smollm_135m_int8": Recipe(_smollm_135m, smollm.SmolLM, prefill=32, kv_cache=256),
    "gemma3_1b_2l_int8": Recipe(_gemma3_1b, gemma3_decoder.Decoder),
    "gemma3_1b_2l_f32": Recipe(_gemma3_1b, gemma3_decoder.Decoder, quantize="none"),
    "qwen25_2l_int8": Recipe(_qwen25_05b, qwen.Qwen),
    "qwen25_2l_f32": Recipe(_qwen25_05b, qwen.Qwen, quantize="none"),
    "qwen3_2l_int8": Recipe(_qwen3_06b, qwen3.Qwen3),
    "qwen3_2l_f32": Recipe(_qwen3_06b, qwen3.Qwen3, quantize="none"),
    "llama32_2l_int8": Recipe(_llama32_1b, llama.Llama),
    "llama32_2l_f32": Recipe(_llama32_1b, llama.Llama, quantize="none"),
    "llama32_2l_int8_bnth": Recipe(_llama32_1b, llama.Llama, transposed_cache=True),
    "llama32_2l_f32_bnth": Recipe(_llama32_1b, llama.Llama, quantize="none", transposed_cache=True),
    "qwen3_2l_f32_bnth": Recipe(_qwen3_06b, qwen3.Qwen3, quantize="none", transposed_cache=True),
    "qwen3_2l_int8_bnth": Recipe(_qwen3_06b, qwen3.Qwen3, transposed_cache=True),
    "tiny_llama_2l_int8": Recipe(_tiny_llama, tiny_llama.TinyLlama),
    "tiny_llama_2l_f32": Recipe(_tiny_llama, tiny_llama.TinyLlama, quantize="none"),
    "gqa16_1l_f32": Recipe(_gqa16, tiny_llama.TinyLlama, quantize="none"),
    "llama32_2l_int4_block32": Recipe(_llama32_1b, llama.Llama, quantize="dynamic_int4_block32"),
    "gemma3_270m_1l_realvocab_int8": Recipe(_gemma3_270m_real_vocab, gemma3_decoder.Decoder, prefill=32,
                                            kv_cache=256),
}


def build(name: str, outdir: str) -> str:
    """Converts recipe `name` into OUTDIR/<name>.tflite (random seeded weights) and returns the path."""
    recipe = RECIPES[name]
    config = recipe.config()
    torch.manual_seed(0)
    model = recipe.model_class(config, mask_cache_size=recipe.kv_cache).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 1:
                parameter.copy_(torch.ones_like(parameter))
            else:
                parameter.copy_(torch.randn_like(parameter) / (parameter.shape[-1] ** 0.5))
    export = export_config.ExportConfig()
    if recipe.transposed_cache:
        export.kvcache_layout = kv_cache.KV_LAYOUT_TRANSPOSED
    converter.convert_to_tflite(model, output_path=outdir, output_name_prefix=name, prefill_seq_len=recipe.prefill,
                                kv_cache_max_len=recipe.kv_cache, quantize=recipe.quantize, config=config,
                                export_config=export)
    produced = [f for f in os.listdir(outdir) if f.startswith(name) and f.endswith(".tflite")]
    target = os.path.join(outdir, name + ".tflite")
    for f in produced:  # the converter appends its own suffix (quantization, cache size); keep our name
        if os.path.join(outdir, f) != target:
            os.replace(os.path.join(outdir, f), target)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir")
    parser.add_argument("--only", action="append", help="recipe name (repeatable); default all")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    if args.list:
        print("\n".join(RECIPES))
        return
    os.makedirs(args.outdir, exist_ok=True)
    for name in args.only or RECIPES:
        start = time.time()
        path = build(name, args.outdir)
        print(f"{name}: {os.path.getsize(path) / 1e6:.2f} MB in {time.time() - start:.0f} s -> {path}", flush=True)


if __name__ == "__main__":
    main()
