"""Small models that test modules of several tiers build (a test module never imports another test module)."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np

from gpuengine.model.builder import ModelBuilder
from gpuengine.model.ir import Quantization
from gpuengine.model.quantization import INT4


def conv_model(seed: int, cin: int, cout: int, size: int = 8) -> bytes:
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    x = mb.input("x", (1, size, size, cin))
    w = mb.const("w", (rng.standard_normal((cout, 3, 3, cin)) / 5).astype(np.float32))
    b = mb.const("b", rng.standard_normal(cout).astype(np.float32))
    mb.output(mb.op("CONV_2D", [x, w, b], (1, size, size, cout),
                    {"padding": "SAME", "stride_w": 1, "stride_h": 1, "fused_activation_function": "RELU"}))
    return mb.build()


def cpu_partition_model(rng: np.random.Generator) -> tuple[bytes, np.ndarray]:
    """CONV_2D (1x1, 3 -> 2 channels, weights drawn from rng) on the GPU, then CUMSUM, which LiteRT runs on the
    CPU; and the conv's weights."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 3))
    w = rng.standard_normal((2, 1, 1, 3)).astype(np.float32)
    y = mb.op("CONV_2D", [x, mb.const("w", w), mb.const("b", np.zeros(2, np.float32))], (1, 4, 4, 2),
              {"padding": "VALID", "stride_w": 1, "stride_h": 1})
    mb.output(mb.op("CUMSUM", [y, mb.const("axis", np.array(3, np.int32))], (1, 4, 4, 2)))
    return mb.build(), w


def int8_weights(rng: np.random.Generator, rows: int, cols: int, per_channel: bool = True,
                 ) -> tuple[np.ndarray, Quantization]:
    """Symmetric int8 weights as converters write them (per output channel, or per tensor)."""
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    scale = np.abs(w).max(axis=1) / 127 if per_channel else np.array([np.abs(w).max() / 127])
    q = np.clip(np.round(w / scale.reshape(-1, 1)), -127, 127).astype(np.int8)
    return q, Quantization(scale=scale.astype(np.float32), zero_point=np.zeros(scale.size, np.int64), axis=0)


def hybrid_fcs() -> tuple[bytes, list[int]]:
    """Hybrid FCs of several widths in one model (one compile): odd sizes, K not a multiple of 4, rows holding
    several input pixels (P > 1), per-tensor scales, a fused RELU, no bias."""
    rng = np.random.default_rng(1)
    mb = ModelBuilder()
    outs, inputs = [], []
    cases = [((3, 37), 11, True, "NONE", True), ((1, 576), 130, True, "NONE", False), ((5, 64), 7, False, "RELU", True),
             ((2, 3, 5), 9, True, "NONE", True), ((1, 1, 6), 1, True, "RELU6", True)]
    for k, (shape, o, per_channel, act, bias) in enumerate(cases):
        x = mb.input(f"x{k}", shape)
        inputs.append(x)
        i = int(np.prod(shape[-2:])) if len(shape) == 3 and shape[1] == 3 else shape[-1]
        q, quant = int8_weights(rng, o, i, per_channel)
        w = mb.const(f"w{k}", q, np.int8, quant)
        b = mb.const(f"b{k}", rng.standard_normal(o).astype(np.float32)) if bias else -1
        rows = int(np.prod(shape)) // i
        outs.append(mb.op("FULLY_CONNECTED", [x, w, b], (rows, o), {"fused_activation_function": act}))
    mb.output(*outs)
    return mb.build(), inputs


def gated_mlp(hybrid: bool, bias: bool, gate_kind: str = "SILU") -> tuple[bytes, int]:
    """A pre-norm gated MLP as litert-torch writes it: RMSNorm (MUL, MEAN, ADD, RSQRT, MUL, MUL), gate = FC(y),
    up = FC(y), LOGISTIC(gate), MUL(gate, ·), MUL(·, up) (gate_kind "GELU_TANH": GELU(gate, approximate), MUL(·, up),
    as for Gemma), then the down projection; 3 rows of 24 -> 16 -> 24."""
    from gpuengine.zoo.vit import rms_norm

    rng = np.random.default_rng(7)
    mb = ModelBuilder()
    x = mb.input("x", (3, 24))
    y = rms_norm(mb, x, (3, 24), rng.uniform(0.5, 1.5, 24))

    def fc(name: str, src: int, o: int, i: int) -> int:
        if hybrid:
            q, quant = int8_weights(rng, o, i)
            w = mb.const(name, q, np.int8, quant)
        else:
            w = mb.const(name, (rng.standard_normal((o, i)) / 4).astype(np.float32))
        b = mb.const(f"{name}_b", rng.standard_normal(o).astype(np.float32)) if bias else -1
        return mb.op("FULLY_CONNECTED", [src, w, b], (3, o))

    gate, up = fc("gate", y, 16, 24), fc("up", y, 16, 24)
    if gate_kind == "SILU":
        activated = mb.op("MUL", [gate, mb.op("LOGISTIC", [gate], (3, 16))], (3, 16))
    else:
        activated = mb.op("GELU", [gate], (3, 16), {"approximate": True})
    mb.output(fc("down", mb.op("MUL", [activated, up], (3, 16)), 24, 16))
    return mb.build(), x


def channel_int4(rng: np.random.Generator, rows: int, cols: int, per_channel: bool = True,
                 ) -> tuple[np.ndarray, Quantization]:
    """Symmetric int4 values in -8..7 (the full range, -8 included) with a scale per row or per tensor."""
    q = rng.integers(-8, 8, (rows, cols)).astype(np.int8)
    scale = rng.uniform(0.01, 0.05, rows if per_channel else 1).astype(np.float32)
    return q, Quantization(scale=scale, zero_point=np.zeros(scale.size, np.int64), axis=0)


def block_int4(rng: np.random.Generator, rows: int, cols: int, block: int) -> tuple[np.ndarray, Quantization]:
    """Blockwise int4 as ai-edge-quantizer writes it: float16 scales rounded to bfloat16 (XNNPACK reads them so)."""
    q = rng.integers(-8, 8, (rows, cols)).astype(np.int8)
    scale = rng.uniform(0.01, 0.05, (rows, cols // block)).astype(np.float32)
    scale = (scale.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32).astype(np.float16)
    return q, Quantization(scale=np.zeros(0, np.float32), zero_point=np.zeros(0, np.int64), block_size=block,
                           block_scales=scale)


def int4_model() -> tuple[bytes, dict[int, np.ndarray], dict[str, int]]:
    """FCs of odd widths (K = 37, 20, 18 as 3 pixels of 6; not multiples of 8), bias or none, a fused RELU, a
    per-tensor scale, blockwise FCs (blocks of 32 and 128; rows of 16 pixels of 2 channels), int4 embedding tables
    (per row and blockwise), an int4 GATHER with its DEQUANTIZE, and gated MLPs (per-row and blockwise scales)
    whose gate and up projections merge into one int4 weight."""
    rng = np.random.default_rng(22)
    mb = ModelBuilder()
    feeds: dict[int, np.ndarray] = {}
    names: dict[str, int] = {}

    def fc(name: str, shape: tuple[int, ...], o: int, weights: tuple[np.ndarray, Quantization], bias: bool,
           act: str = "NONE", src: int | None = None) -> int:
        if src is None:
            src = mb.input(f"{name}_x", shape)
            feeds[src] = rng.standard_normal(shape).astype(np.float32)
        w = mb.int4_const(f"{name}_w", *weights)
        names[name] = w
        b = mb.const(f"{name}_b", rng.standard_normal(o).astype(np.float32)) if bias else -1
        rows = int(np.prod(shape)) // weights[0].shape[1]
        return mb.op("FULLY_CONNECTED", [src, w, b], (rows, o), {"fused_activation_function": act})

    outs = [fc("odd", (3, 37), 11, channel_int4(rng, 11, 37), True),
            fc("relu", (1, 20), 16, channel_int4(rng, 16, 20), False, "RELU"),
            fc("pixels", (2, 3, 6), 9, channel_int4(rng, 9, 18, per_channel=False), True),
            fc("wide", (1, 512), 64, channel_int4(rng, 64, 512), True),
            fc("block32", (2, 96), 12, block_int4(rng, 12, 96, 32), True),
            fc("block128", (1, 512), 64, block_int4(rng, 64, 512, 128), False),
            fc("block_pixels", (1, 16, 2), 8, block_int4(rng, 8, 32, 32), False)]
    ids = mb.input("ids", (5,), np.int32)
    feeds[ids] = np.array([0, 29, 3, 3, 17], np.int32)
    for name, (values, quant) in (("table", channel_int4(rng, 30, 20)), ("table_b32", block_int4(rng, 30, 64, 32))):
        names[name] = mb.int4_const(name, values, quant)
        outs.append(mb.op("EMBEDDING_LOOKUP", [ids, names[name]], (5, values.shape[1])))
    # GATHER keeps the type in LiteRT: int4 rows gathered, then DEQUANTIZE; one scale for the table (LiteRT 2.3
    # gathers int4 along axis 0 only: other axes come out as zeros)
    values, quant = channel_int4(rng, 30, 6, per_channel=False)
    names["gathered"] = mb.int4_const("gathered", values, quant)
    picked = mb.op("GATHER", [names["gathered"], ids], (5, 6), {"axis": 0}, dtype=np.int8)
    mb.tensors[picked] = dataclasses.replace(mb.tensors[picked], quantization=quant, type_code=INT4)
    outs.append(mb.op("DEQUANTIZE", [picked], (5, 6)))
    for prefix, k, make in (("", 24, channel_int4), ("b_", 64, lambda r, o, i: block_int4(r, o, i, 32))):
        x = mb.input(f"{prefix}mlp_x", (3, k))
        feeds[x] = rng.standard_normal((3, k)).astype(np.float32)
        gate = fc(f"{prefix}gate", (3, k), 16, make(rng, 16, k), False, src=x)
        up = fc(f"{prefix}up", (3, k), 16, make(rng, 16, k), False, src=x)
        silu = mb.op("MUL", [gate, mb.op("LOGISTIC", [gate], (3, 16))], (3, 16))
        outs.append(fc(f"{prefix}down", (3, 16), 24, channel_int4(rng, 24, 16), True,
                       src=mb.op("MUL", [silu, up], (3, 16))))
    mb.output(*outs)
    return mb.build(), feeds, names


SAME1 = {"padding": "SAME", "stride_h": 1, "stride_w": 1}


def _i32(mb: ModelBuilder, name: str, values: list[int]) -> int:
    return mb.const(name, np.array(values, np.int32))


def fcn_model() -> bytes:
    """x [1, -1, -1, 3] -> conv stride 2 (RELU6) -> depthwise -> RESIZE_BILINEAR to SLICE(SHAPE(x), [1], [2]) -> 1x1
    conv; and RESHAPE(depthwise, PACK(SHAPE(depthwise)[0], -1)) -> MEAN: shapes that depend on SHAPE's values."""
    rng = np.random.default_rng(0)
    mb = ModelBuilder()
    x = mb.input("x", (1, 8, 8, 3), shape_signature=(1, -1, -1, 3))
    zero8 = mb.const("zero8", np.zeros(8, np.float32))
    c = mb.op("CONV_2D", [x, mb.const("w", rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)), zero8],
              (1, 4, 4, 8), {"padding": "SAME", "stride_h": 2, "stride_w": 2, "fused_activation_function": "RELU6"},
              shape_signature=(1, -1, -1, 8))
    d = mb.op("DEPTHWISE_CONV_2D", [c, mb.const("dw", rng.normal(0, 0.3, (1, 3, 3, 8)).astype(np.float32)), zero8],
              (1, 4, 4, 8), {**SAME1, "depth_multiplier": 1}, shape_signature=(1, -1, -1, 8))
    s = mb.op("SHAPE", [x], (4,), {"out_type": 2}, dtype=np.int32)
    hw = mb.op("SLICE", [s, _i32(mb, "begin", [1]), _i32(mb, "size", [2])], (2,), dtype=np.int32)
    up = mb.op("RESIZE_BILINEAR", [d, hw], (1, 8, 8, 8), shape_signature=(1, -1, -1, 8))
    y = mb.op("CONV_2D", [up, mb.const("pw", rng.normal(0, 0.3, (2, 1, 1, 8)).astype(np.float32)),
                          mb.const("pb", np.zeros(2, np.float32))], (1, 8, 8, 2),
              {"padding": "VALID", "stride_h": 1, "stride_w": 1}, shape_signature=(1, -1, -1, 2))
    sd = mb.op("SHAPE", [d], (4,), {"out_type": 2}, dtype=np.int32)
    n = mb.op("STRIDED_SLICE", [sd, _i32(mb, "b0", [0]), _i32(mb, "e1", [1]), _i32(mb, "s1", [1])], (),
              {"shrink_axis_mask": 1}, dtype=np.int32)
    target = mb.op("PACK", [n, mb.const("minus1", np.array(-1, np.int32))], (2,), {"values_count": 2, "axis": 0},
                   dtype=np.int32)
    flat = mb.op("RESHAPE", [d, target], (1, 128), shape_signature=(1, -1))
    mb.output(y, mb.op("MEAN", [flat, _i32(mb, "axis", [1])], (1,), {"keep_dims": False}))
    return mb.build()


# -- language-model bundles (gpuengine.llm) -------------------------------------------------------------------------

TOKENIZER_TEXT = """The quick brown fox jumps over the lazy dog.
A language model reads tokens and writes tokens.
The GPU runs the decode loop while the host streams text.
Small models are good for tests because they compile quickly.
Once upon a time there was a little engine that could.
Rain falls on the green hills and the river runs to the sea.
She sells sea shells by the sea shore every summer morning.
Numbers like one two three four five six seven eight nine ten."""
PROMPT = "The quick brown fox"


def bnth_cache(data: bytes) -> bytes:
    """The decoder with its KV-cache inputs and outputs in [B, N, T, H] (a TRANSPOSE at the signature boundary):
    LiteRT-LM 0.18.1 reads the cache length from dimension 2 of the cache, the number of heads in litert-torch's
    default [B, T, N, H] layout, so it runs the toy decoder only this way."""
    from tflite.BuiltinOperator import BuiltinOperator

    from gpuengine.model.builder import write_model
    from gpuengine.model.ir import Op, Tensor
    from gpuengine.model.reader import read_model

    model = read_model(data)
    for sig in model.signatures:
        g = model.subgraphs[sig.subgraph]
        perm = len(g.tensors)
        g.tensors.append(Tensor(index=perm, name="bnth_perm", shape=(4,), dtype=np.dtype(np.int32),
                                data=np.array([0, 2, 1, 3], np.int32)))
        first, last = [], []
        for names, is_input in ((sig.inputs, True), (sig.outputs, False)):
            for name in sorted(n for n in names if n.startswith("kv_cache_")):
                t = names[name]
                old = g.tensors[t]
                new = len(g.tensors)
                b, positions, heads, width = old.shape
                g.tensors.append(Tensor(index=new, name=f"{old.name}_bnth", shape=(b, heads, positions, width),
                                        dtype=old.dtype))
                edge = [new, perm] if is_input else [t, perm]
                op = Op(index=0, code="TRANSPOSE", inputs=edge, outputs=[t] if is_input else [new],
                        builtin_code=BuiltinOperator.TRANSPOSE)
                (first if is_input else last).append(op)
                if is_input:
                    g.inputs = [new if x == t else x for x in g.inputs]
                else:
                    g.outputs = [new if x == t else x for x in g.outputs]
                names[name] = new
        g.ops = first + g.ops + last
        for k, op in enumerate(g.ops):
            op.index = k
    return write_model(model)


def build_bundle(directory: Path, model: Path, stop: int | None = None, max_tokens: int = 100,
                 templates: bool | dict[str, tuple[str, str]] = False, hf: bool = False, jinja: str = "",
                 name: str = "toy", sentencepiece: bytes | None = None, hf_tokenizer: Path | None = None) -> Path:
    """A .litertlm of `model`, a 150-piece SentencePiece tokenizer (or the serialized `sentencepiece` model) and
    LlmMetadata, with litert-lm-builder; templates: True for user/model prefix-suffix affixes, or {role: (prefix,
    suffix)}; jinja: a Jinja chat template (LlmMetadata.jinja_prompt_template)."""
    import sentencepiece as spm
    from litert_lm_builder import litertlm_builder as builder
    from litert_lm_builder.runtime.proto import llm_metadata_pb2

    if sentencepiece is None:
        proto = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(TOKENIZER_TEXT.splitlines() * 4), model_writer=proto,
                                       vocab_size=150, model_type="bpe", character_coverage=1.0, minloglevel=2)
        sentencepiece = proto.getvalue()
    tok = directory / "tokenizer.model"
    tok.write_bytes(sentencepiece)
    sp = spm.SentencePieceProcessor(model_proto=sentencepiece)
    md = llm_metadata_pb2.LlmMetadata()
    md.start_token.token_ids.ids.append(sp.bos_id())
    md.stop_tokens.add().token_ids.ids.append(sp.eos_id() if stop is None else stop)
    md.max_num_tokens = max_tokens
    if templates is True:
        md.prompt_templates.user.prefix, md.prompt_templates.user.suffix = "user: ", "\n"
        md.prompt_templates.model.prefix = "model: "
    elif templates:
        for role, (prefix, suffix) in templates.items():
            affixes = getattr(md.prompt_templates, role)
            affixes.prefix, affixes.suffix = prefix, suffix
    if jinja:
        md.jinja_prompt_template = jinja
    meta = directory / "metadata.pb"
    meta.write_bytes(md.SerializeToString())
    b = builder.LitertLmFileBuilder()
    b.add_llm_metadata(str(meta))
    if hf_tokenizer is not None:
        b.add_hf_tokenizer(str(hf_tokenizer))
    elif hf:
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers

        hf_tok = Tokenizer(models.BPE(unk_token="<unk>"))
        hf_tok.pre_tokenizer = pre_tokenizers.Whitespace()
        hf_tok.train_from_iterator(TOKENIZER_TEXT.splitlines(), trainers.BpeTrainer(
            vocab_size=140, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False))
        hf_tok.save(str(directory / "tokenizer.json"))
        b.add_hf_tokenizer(str(directory / "tokenizer.json"))
    else:
        b.add_sentencepiece_tokenizer(str(tok))
    b.add_tflite_model(str(model), builder.TfLiteModelType.PREFILL_DECODE)
    out = directory / f"{name}.litertlm"
    with open(out, "wb") as f:
        b.build(f)
    return out


def encoder_model(width: int = 16, heads: int = 2, seq: int = 8) -> bytes:
    """x [1, -1, width]: one self-attention block with a dynamic sequence length. FC q/k/v (keep_num_dims) ->
    RESHAPE to [1, -1, heads, width/heads] -> TRANSPOSE -> BATCH_MATMUL(q, k^T) -> SOFTMAX -> BATCH_MATMUL(., v) ->
    TRANSPOSE -> RESHAPE [1, -1, width] -> ADD x -> layer norm (MEAN, SQUARED_DIFFERENCE, RSQRT, MUL, ADD) -> FC."""
    rng = np.random.default_rng(1)
    dh = width // heads
    mb = ModelBuilder()
    x = mb.input("x", (1, seq, width), shape_signature=(1, -1, width))
    dyn = (1, -1, width)

    def fc(v: int, name: str) -> int:
        w = mb.const(f"{name}_w", rng.normal(0, 0.25, (width, width)).astype(np.float32))
        b = mb.const(f"{name}_b", rng.normal(0, 0.1, width).astype(np.float32))
        return mb.op("FULLY_CONNECTED", [v, w, b], (1, seq, width), {"keep_num_dims": True}, shape_signature=dyn)

    split = _i32(mb, "split_heads", [1, -1, heads, dh])
    perm = _i32(mb, "perm", [0, 2, 1, 3])

    def heads_of(v: int) -> int:
        r = mb.op("RESHAPE", [v, split], (1, seq, heads, dh), shape_signature=(1, -1, heads, dh))
        return mb.op("TRANSPOSE", [r, perm], (1, heads, seq, dh), shape_signature=(1, heads, -1, dh))

    q, k, v = heads_of(fc(x, "q")), heads_of(fc(x, "k")), heads_of(fc(x, "v"))
    scores = mb.op("BATCH_MATMUL", [q, k], (1, heads, seq, seq), {"adj_x": False, "adj_y": True},
                   shape_signature=(1, heads, -1, -1))
    probs = mb.op("SOFTMAX", [scores], (1, heads, seq, seq), {"beta": float(1 / np.sqrt(dh))},
                  shape_signature=(1, heads, -1, -1))
    ctx = mb.op("BATCH_MATMUL", [probs, v], (1, heads, seq, dh), {"adj_x": False, "adj_y": False},
                shape_signature=(1, heads, -1, dh))
    back = mb.op("TRANSPOSE", [ctx, perm], (1, seq, heads, dh), shape_signature=(1, -1, heads, dh))
    merged = mb.op("RESHAPE", [back, _i32(mb, "merge_heads", [1, -1, width])], (1, seq, width), shape_signature=dyn)
    h = mb.op("ADD", [merged, x], (1, seq, width), shape_signature=dyn)
    axis = _i32(mb, "last", [-1])
    mean = mb.op("MEAN", [h, axis], (1, seq, 1), {"keep_dims": True}, shape_signature=(1, -1, 1))
    var = mb.op("MEAN", [mb.op("SQUARED_DIFFERENCE", [h, mean], (1, seq, width), shape_signature=dyn), axis],
                (1, seq, 1), {"keep_dims": True}, shape_signature=(1, -1, 1))
    inv = mb.op("RSQRT", [mb.op("ADD", [var, mb.const("eps", np.array([1e-5], np.float32))], (1, seq, 1),
                                shape_signature=(1, -1, 1))], (1, seq, 1), shape_signature=(1, -1, 1))
    centered = mb.op("SUB", [h, mean], (1, seq, width), shape_signature=dyn)
    normed = mb.op("MUL", [centered, inv], (1, seq, width), shape_signature=dyn)
    mb.output(fc(normed, "out"))
    return mb.build()


JSON_TEXT = """{"name": "Ada", "age": 36, "ok": true}
{"city": "Paris", "items": [1, 2, 3], "price": 12.5, "open": false, "note": null}
{"id": 7, "tags": ["red", "green", "blue"], "nested": {"a": 0, "b": -4}}
The quick brown fox jumps over the lazy dog. 0123456789
"""

CHATML_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                   "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def json_bundle(directory: Path, seed: int = 1) -> Path:
    """A .litertlm whose tokenizer can spell any JSON (a byte-level BPE: every byte a token, a few merges; <s> 1,
    </s> 2), a zoo decoder of that vocabulary (random int8 weights, 256 positions) and a ChatML Jinja template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from gpuengine.zoo.decoder import DecoderConfig, decoder

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(JSON_TEXT.splitlines() * 4, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    path = directory / "json_tokenizer.json"
    tokenizer.save(str(path))
    model = directory / "json_decoder.tflite"
    model.write_bytes(decoder(DecoderConfig(vocab=tokenizer.get_vocab_size(), cache=256, prefill=16), seed=seed))
    return build_bundle(directory, model, max_tokens=256, jinja=CHATML_TEMPLATE, name="json", hf_tokenizer=path)


def runtime_reshape_model() -> bytes:
    """x [-1, 6] -> RELU -> RESHAPE to a target given as an int32 input -> TANH: a shape only a run tells."""
    mb = ModelBuilder()
    x = mb.input("x", (2, 6), shape_signature=(-1, 6))
    target = mb.input("target", (2,), np.int32)
    r = mb.op("RELU", [x], (2, 6), shape_signature=(-1, 6))
    y = mb.op("RESHAPE", [r, target], (3, 4), shape_signature=(-1, -1))
    mb.output(mb.op("TANH", [y], (3, 4), shape_signature=(-1, -1)))
    return mb.build()


def boundary_model(signature: tuple[int, ...] | None = None) -> bytes:
    """ids (1, 1) int32 -> EMBEDDING_LOOKUP (+ x (1, 8)) -> y (1, 8); img (1, 2, 2, 3) * 2 -> z; pos (1,) int32 ->
    CAST + 1 -> p (1,); x * 3 reshaped -> w (1, 1, 8), an output whose alias root is another tensor; x times an 8x8
    matrix -> v (a kernel offering decompositions): x, ids, pos qualify as inputs and y, w, v as outputs; img, z
    (three channels over four pixels) and p (a padded vec4 written by a kernel) do not."""
    mb = ModelBuilder()
    ids = mb.input("ids", (1, 1), np.int32)
    x = mb.input("x", (1, 8), shape_signature=signature)
    img = mb.input("img", (1, 2, 2, 3))
    pos = mb.input("pos", (1,), np.int32)
    table = mb.const("table", np.arange(16 * 8, dtype=np.float32).reshape(16, 8) / 100)
    rows = mb.op("EMBEDDING_LOOKUP", [mb.op("RESHAPE", [ids, mb.const("flat", np.array([1], np.int32))], (1,),
                                            dtype=np.int32), table], (1, 8))
    y = mb.op("ADD", [rows, x], (1, 8), {"fused_activation_function": "NONE"}, name="y")
    z = mb.op("MUL", [img, mb.const("two", np.array(2.0, np.float32))], (1, 2, 2, 3),
              {"fused_activation_function": "NONE"}, name="z")
    p = mb.op("ADD", [mb.op("CAST", [pos], (1,)), mb.const("one", np.array([1.0], np.float32))], (1,),
              {"fused_activation_function": "NONE"}, name="p")
    tripled = mb.op("MUL", [x, mb.const("three", np.array(3.0, np.float32))], (1, 8),
                    {"fused_activation_function": "NONE"})
    w = mb.op("RESHAPE", [tripled, mb.const("shape", np.array([1, 1, 8], np.int32))], (1, 1, 8), name="w")
    weights = (np.arange(64, dtype=np.float32).reshape(8, 8) % 7 - 3) / 10
    v = mb.op("FULLY_CONNECTED", [x, mb.const("weights", weights), -1], (1, 8), {"fused_activation_function": "NONE"},
              name="v")
    mb.output(y, z, p, w, v)
    return mb.build()
