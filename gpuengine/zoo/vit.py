"""ViT-tiny: a 4-layer ViT-style image encoder with the op patterns converters emit, seeded random weights.

8x8 patches of a 64x64x3 image (a CONV_2D 8x8 stride 8, then RESHAPE) give 64 tokens of width 64, plus a learned
position embedding. Each of the 4 pre-norm layers: LayerNorm, multi-head self-attention (4 heads of 16: Q, K, V
as FULLY_CONNECTED, the head split RESHAPE [1, 64, 4, 16] + TRANSPOSE [0, 2, 1, 3], QK^T as BATCH_MATMUL with
adj_y or on a TRANSPOSE'd K, SOFTMAX, ·V, the merge TRANSPOSE + RESHAPE, the output projection and a residual
ADD), LayerNorm, a GELU MLP (64 -> 128 -> 64) and a residual ADD; then a final LayerNorm, MEAN over the tokens,
a 10-class FULLY_CONNECTED head and SOFTMAX. The LayerNorms are written as converters write them, in several
forms (`layer_norm`): Keras' (MEAN, SQUARED_DIFFERENCE, MEAN, ADD, RSQRT, MUL, MUL, SUB, ADD), the same with a
NEG of the mean, TF's (SUB, MUL, SQRT, DIV) and litert-torch's (SUB, SQUARE, RSQRT, MUL, MUL, ADD).
Weights: Xavier-like, the query/key projections scaled up so attention is not uniform (checked: the softmax
rows' maxima are well above 1/64). Input [1, 64, 64, 3] in [-1, 1], output [1, 10] probabilities.
"""

from __future__ import annotations

import math

import numpy as np

from ..model.builder import ModelBuilder

Shape = tuple[int, ...]
IMAGE, PATCH, WIDTH, HEADS, LAYERS, MLP, CLASSES = 64, 8, 64, 4, 4, 128, 10
TOKENS = (IMAGE // PATCH) ** 2
LN_STYLES = ("keras", "keras_neg", "tf", "torch")  # the forms layer_norm writes; layers cycle through them
EPSILON = 1e-6


def layer_norm(mb: ModelBuilder, x: int, shape: Shape, style: str, gamma: np.ndarray | None,
               beta: np.ndarray | None, eps: float = EPSILON, name: str = "ln", scale_shape: Shape | None = None,
               ) -> int:
    """LayerNorm over the last axis of x written as ops the way a converter writes it (`style`, see LN_STYLES;
    also "sqrt_outside": (x - mean) / (sqrt(var) + eps)). gamma / beta None: no scale / offset op.
    scale_shape: the shape gamma and beta are stored in (default [C]; e.g. [1, 1, C] broadcasts the same)."""
    row = (*shape[:-1], 1)
    axis = mb.const(f"{name}/axis", np.array([len(shape) - 1], np.int32))
    eps_t = mb.const(f"{name}/epsilon", np.array(eps, np.float32))
    c = shape[-1]
    sshape = scale_shape or (c,)
    g = mb.const(f"{name}/gamma", np.asarray(gamma, np.float32).reshape(sshape)) if gamma is not None else None
    b = mb.const(f"{name}/beta", np.asarray(beta, np.float32).reshape(sshape)) if beta is not None else None

    def op(code: str, inputs: list[int], out: Shape, options: dict | None = None) -> int:
        result = mb.op(code, inputs, out, options, name=f"{name}/{code.lower()}")
        assert isinstance(result, int)
        return result

    mean = op("MEAN", [x, axis], row, {"keep_dims": True})
    if style in ("keras", "keras_neg"):
        var = op("MEAN", [op("SQUARED_DIFFERENCE", [x, mean], shape), axis], row, {"keep_dims": True})
        inv = op("RSQRT", [op("ADD", [var, eps_t], row)], row)
        if g is not None:
            inv = op("MUL", [inv, g], shape)
        inv_shape = shape if g is not None else row
        scaled = op("MUL", [x, inv], shape)
        if style == "keras":
            shift = op("MUL", [mean, inv], inv_shape)
            out = op("SUB", [b, shift], shape) if b is not None else op("NEG", [shift], inv_shape)
            return op("ADD", [scaled, out], shape)
        shift = op("MUL", [op("NEG", [mean], row), inv], inv_shape)
        return op("ADD", [scaled, op("ADD", [shift, b], shape) if b is not None else shift], shape)
    centered = op("SUB", [x, mean], shape)
    if style == "tf":
        var = op("MEAN", [op("MUL", [centered, centered], shape), axis], row, {"keep_dims": True})
        y = op("DIV", [centered, op("SQRT", [op("ADD", [eps_t, var], row)], row)], shape)
    elif style == "sqrt_outside":
        var = op("MEAN", [op("SQUARE", [centered], shape), axis], row, {"keep_dims": True})
        y = op("DIV", [centered, op("ADD", [op("SQRT", [var], row), eps_t], row)], shape)
    elif style == "torch":
        var = op("MEAN", [op("SQUARE", [centered], shape), axis], row, {"keep_dims": True})
        y = op("MUL", [centered, op("RSQRT", [op("ADD", [var, eps_t], row)], row)], shape)
    else:
        raise ValueError(f"unknown LayerNorm style {style!r}")
    if g is not None:
        y = op("MUL", [y, g], shape)
    if b is not None:
        y = op("ADD", [y, b], shape)
    return y


def rms_norm(mb: ModelBuilder, x: int, shape: Shape, weight: np.ndarray | None, eps: float = 1e-5,
             name: str = "rms", square: str = "MUL") -> int:
    """RMSNorm as litert-torch decomposes it: MUL(x, x) (or SQUARE), MEAN, ADD eps, RSQRT, MUL x[, MUL weight]."""
    row = (*shape[:-1], 1)
    axis = mb.const(f"{name}/axis", np.array([len(shape) - 1], np.int32))
    sq = mb.op(square, [x, x] if square == "MUL" else [x], shape, name=f"{name}/square")
    ms = mb.op("MEAN", [sq, axis], row, {"keep_dims": True}, name=f"{name}/mean")
    r = mb.op("RSQRT", [mb.op("ADD", [ms, mb.const(f"{name}/eps", np.array([eps], np.float32))], row)], row)
    y = mb.op("MUL", [x, r], shape, name=f"{name}/normalized")
    if weight is not None:
        y = mb.op("MUL", [y, mb.const(f"{name}/weight", np.asarray(weight, np.float32))], shape,
                  name=f"{name}/scaled")
    return y


def split_heads(mb: ModelBuilder, t: int, name: str, tokens: int, heads: int, width: int) -> int:
    """[1, T, H*D] -> RESHAPE [1, T, H, D] -> TRANSPOSE [1, H, T, D], as converters split attention heads."""
    d = width // heads
    split = mb.op("RESHAPE", [t, mb.const(f"{name}/split_shape", np.array([1, tokens, heads, d], np.int32))],
                  (1, tokens, heads, d), name=f"{name}/split")
    return mb.op("TRANSPOSE", [split, mb.const(f"{name}/perm", np.array([0, 2, 1, 3], np.int32))],
                 (1, heads, tokens, d), name=f"{name}/heads")


def scaled_softmax_context(mb: ModelBuilder, scores: int, vh: int, name: str, tokens: int, heads: int,
                           width: int) -> int:
    """Scores [1, H, T, T] scaled by 1/sqrt(D), SOFTMAX, times V [1, H, T, D], heads merged back to [1, T, H*D]."""
    d, scores_shape, shape = width // heads, (1, heads, tokens, tokens), (1, tokens, width)
    scores = mb.op("MUL", [scores, mb.const(f"{name}/scale", np.array(1.0 / math.sqrt(d), np.float32))],
                   scores_shape, name=f"{name}/scaled_scores")
    probs = mb.op("SOFTMAX", [scores], scores_shape, {"beta": 1.0}, name=f"{name}/softmax")
    ctx = mb.op("BATCH_MATMUL", [probs, vh], (1, heads, tokens, d), name=f"{name}/context")
    merged = mb.op("TRANSPOSE", [ctx, mb.const(f"{name}/merge_perm", np.array([0, 2, 1, 3], np.int32))],
                   (1, tokens, heads, d), name=f"{name}/merge")
    return mb.op("RESHAPE", [merged, mb.const(f"{name}/merge_shape", np.array(shape, np.int32))], shape,
                 name=f"{name}/merged")


class _Vit:
    def __init__(self, seed: int, ln_styles: tuple[str, ...] = LN_STYLES) -> None:
        self.mb = ModelBuilder(f"gpuengine.zoo vit_tiny (random weights, seed={seed})")
        self.rng = np.random.default_rng(seed)
        self.ln_styles = ln_styles

    def dense(self, x: int, shape: Shape, out: int, name: str, gain: float = 1.0, act: str = "NONE") -> int:
        """FULLY_CONNECTED keeping the leading dims (keep_num_dims), Xavier-scaled weights, small bias."""
        fan_in = shape[-1]
        w = self.rng.normal(0.0, gain / math.sqrt(fan_in), (out, fan_in)).astype(np.float32)
        bias = self.rng.normal(0.0, 0.02, (out,)).astype(np.float32)
        mb = self.mb
        return mb.op("FULLY_CONNECTED", [x, mb.const(f"{name}/weights", w), mb.const(f"{name}/bias", bias)],
                     (*shape[:-1], out), {"fused_activation_function": act, "keep_num_dims": True}, name=name)

    def norm_params(self) -> tuple[np.ndarray, np.ndarray]:
        return (1.0 + self.rng.normal(0.0, 0.1, WIDTH)).astype(np.float32), \
            self.rng.normal(0.0, 0.05, WIDTH).astype(np.float32)

    def heads(self, t: int, name: str) -> int:
        return split_heads(self.mb, t, name, TOKENS, HEADS, WIDTH)

    def attention(self, x: int, layer: int) -> int:
        mb, d, name = self.mb, WIDTH // HEADS, f"layer{layer}/attention"
        shape = (1, TOKENS, WIDTH)
        # Q and K larger than Xavier: with LayerNorm'd inputs, logits of std ~3 give peaked, not one-hot, rows.
        q = self.dense(x, shape, WIDTH, f"{name}/query", gain=2.0)
        k = self.dense(x, shape, WIDTH, f"{name}/key", gain=2.0)
        v = self.dense(x, shape, WIDTH, f"{name}/value")
        qh, kh, vh = self.heads(q, f"{name}/q"), self.heads(k, f"{name}/k"), self.heads(v, f"{name}/v")
        scores_shape = (1, HEADS, TOKENS, TOKENS)
        if layer % 2 == 0:  # Keras: K^T through adj_y
            scores = mb.op("BATCH_MATMUL", [qh, kh], scores_shape, {"adj_y": True}, name=f"{name}/scores")
        else:  # an explicit TRANSPOSE of K, as some converters write it
            kt = mb.op("TRANSPOSE", [kh, mb.const(f"{name}/kt_perm", np.array([0, 1, 3, 2], np.int32))],
                       (1, HEADS, d, TOKENS), name=f"{name}/key_transposed")
            scores = mb.op("BATCH_MATMUL", [qh, kt], scores_shape, name=f"{name}/scores")
        merged = scaled_softmax_context(mb, scores, vh, name, TOKENS, HEADS, WIDTH)
        return self.dense(merged, shape, WIDTH, f"{name}/output")

    def build(self) -> bytes:
        mb = self.mb
        image = mb.input("image", (1, IMAGE, IMAGE, 3))
        g = IMAGE // PATCH
        w = self.rng.normal(0.0, 1.0 / math.sqrt(PATCH * PATCH * 3), (WIDTH, PATCH, PATCH, 3)).astype(np.float32)
        patches = mb.op("CONV_2D", [image, mb.const("patch/weights", w),
                                    mb.const("patch/bias", np.zeros(WIDTH, np.float32))], (1, g, g, WIDTH),
                        {"padding": "VALID", "stride_w": PATCH, "stride_h": PATCH}, name="patch/conv")
        shape = (1, TOKENS, WIDTH)
        tokens = mb.op("RESHAPE", [patches, mb.const("patch/shape", np.array(shape, np.int32))], shape,
                       name="patch/tokens")
        x = mb.op("ADD", [tokens, mb.const("position", self.rng.normal(0.0, 0.5, shape).astype(np.float32))],
                  shape, name="position/add")
        for layer in range(LAYERS):
            styles = self.ln_styles
            style = styles[layer % len(styles)]
            h = layer_norm(mb, x, shape, style, *self.norm_params(), name=f"layer{layer}/ln1")
            x = mb.op("ADD", [x, self.attention(h, layer)], shape, name=f"layer{layer}/residual1")
            h = layer_norm(mb, x, shape, styles[(layer + 1) % len(styles)], *self.norm_params(),
                           name=f"layer{layer}/ln2")
            h = mb.op("GELU", [self.dense(h, shape, MLP, f"layer{layer}/mlp1")], (1, TOKENS, MLP),
                      {"approximate": False}, name=f"layer{layer}/gelu")
            x = mb.op("ADD", [x, self.dense(h, (1, TOKENS, MLP), WIDTH, f"layer{layer}/mlp2")], shape,
                      name=f"layer{layer}/residual2")
        x = layer_norm(mb, x, shape, "keras", *self.norm_params(), name="final_ln")
        pooled = mb.op("MEAN", [x, mb.const("pool/axis", np.array([1], np.int32))], (1, WIDTH),
                       {"keep_dims": False}, name="pool")
        logits = self.dense(pooled, (1, WIDTH), CLASSES, "head", gain=3.0)
        mb.output(mb.op("SOFTMAX", [logits], (1, CLASSES), {"beta": 1.0}, name="probabilities"))
        return mb.build()


def vit_tiny(seed: int = 0, ln_styles: tuple[str, ...] = LN_STYLES) -> bytes:
    """ViT-tiny: patch conv, 4 pre-norm transformer layers (width 64, 4 heads, GELU MLP 128), final LayerNorm,
    mean pooling, 10-class head and SOFTMAX. ln_styles: the LayerNorm forms the layers cycle through."""
    return _Vit(seed, ln_styles).build()
