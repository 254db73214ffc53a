"""BERT-tiny: a 2-layer BERT-style text encoder fed int32 token ids, with the op patterns converters emit.

Inputs: `input_ids` [1, 32] int32 token ids in [-VOCAB, VOCAB) (a negative id counts from the end, as converters
allow: the graph maps ids < 0 to ids + VOCAB with int32 LESS, ADD and SELECT_V2 before the lookup) and
`token_type_ids` [1, 32] int32 segment ids in {0, 1}. Embeddings: word (GATHER of a [VOCAB, 64] table by the
fixed-up ids), position (GATHER of a [32, 64] table by the constant positions 0..31) and segment (GATHER of a
[2, 64] table), summed and LayerNorm'd. Each of the 2 post-norm layers: multi-head self-attention (4 heads of 16:
Q, K, V as FULLY_CONNECTED, the head split RESHAPE [1, 32, 4, 16] + TRANSPOSE [0, 2, 1, 3], QK^T as BATCH_MATMUL
adj_y, a MUL by 1/sqrt(16), SOFTMAX, ·V, the merge TRANSPOSE + RESHAPE, the output projection), residual ADD,
LayerNorm, a GELU MLP (64 -> 128 -> 64), residual ADD, LayerNorm. The LayerNorms are written in the converter
forms of zoo/vit.py's `layer_norm` (Keras, Keras with NEG, TF SQRT+DIV, litert-torch). Outputs: the sequence
[1, 32, 64] and the pooled [CLS] vector [1, 64] (STRIDED_SLICE of token 0, FULLY_CONNECTED, TANH).
Weights: Xavier-like, query/key scaled up so attention is peaked but not one-hot, the pooler small enough that
TANH is not saturated.
"""

from __future__ import annotations

import math

import numpy as np

from ..model.builder import ModelBuilder
from .vit import LN_STYLES, Shape, layer_norm, scaled_softmax_context, split_heads

VOCAB, TOKENS, WIDTH, HEADS, LAYERS, MLP, TYPES = 1000, 32, 64, 4, 2, 128, 2
EPSILON = 1e-12  # BERT's LayerNorm epsilon


class _Bert:
    def __init__(self, seed: int) -> None:
        self.mb = ModelBuilder(f"gpuengine.zoo bert_tiny (random weights, seed={seed})")
        self.rng = np.random.default_rng(seed)

    def dense(self, x: int, shape: Shape, out: int, name: str, gain: float = 1.0) -> int:
        """FULLY_CONNECTED keeping the leading dims (keep_num_dims), Xavier-scaled weights, small bias."""
        w = self.rng.normal(0.0, gain / math.sqrt(shape[-1]), (out, shape[-1])).astype(np.float32)
        bias = self.rng.normal(0.0, 0.02, (out,)).astype(np.float32)
        mb = self.mb
        return mb.op("FULLY_CONNECTED", [x, mb.const(f"{name}/weights", w), mb.const(f"{name}/bias", bias)],
                     (*shape[:-1], out), {"keep_num_dims": True}, name=name)

    def norm(self, x: int, style: str, name: str) -> int:
        gamma = (1.0 + self.rng.normal(0.0, 0.1, WIDTH)).astype(np.float32)
        beta = self.rng.normal(0.0, 0.05, WIDTH).astype(np.float32)
        return layer_norm(self.mb, x, (1, TOKENS, WIDTH), style, gamma, beta, eps=EPSILON, name=name)

    def embeddings(self, ids: int, types: int) -> int:
        """Word + position + segment embeddings, each a GATHER; negative ids fixed up first."""
        mb, seq, shape = self.mb, (1, TOKENS), (1, TOKENS, WIDTH)
        negative = mb.op("LESS", [ids, mb.const("ids/zero", np.array(0, np.int32))], seq, dtype=np.bool_,
                         name="ids/negative")
        wrapped = mb.op("ADD", [ids, mb.const("ids/vocab", np.array(VOCAB, np.int32))], seq, dtype=np.int32,
                        name="ids/wrapped")
        fixed = mb.op("SELECT_V2", [negative, wrapped, ids], seq, dtype=np.int32, name="ids/fixed")

        def table(name: str, rows: int, ids_t: int) -> int:
            values = self.rng.normal(0.0, 0.5, (rows, WIDTH)).astype(np.float32)
            return mb.op("GATHER", [mb.const(f"{name}/table", values), ids_t], shape, {"axis": 0}, name=name)

        positions = mb.const("position_ids", np.arange(TOKENS, dtype=np.int32).reshape(seq))
        x = mb.op("ADD", [table("word_embeddings", VOCAB, fixed), table("position_embeddings", TOKENS, positions)],
                  shape, name="embeddings/add_position")
        x = mb.op("ADD", [x, table("token_type_embeddings", TYPES, types)], shape, name="embeddings/add_type")
        return self.norm(x, "keras", "embeddings/ln")

    def heads(self, t: int, name: str) -> int:
        return split_heads(self.mb, t, name, TOKENS, HEADS, WIDTH)

    def attention(self, x: int, layer: int) -> int:
        mb, name, shape = self.mb, f"layer{layer}/attention", (1, TOKENS, WIDTH)
        q = self.dense(x, shape, WIDTH, f"{name}/query", gain=2.0)
        k = self.dense(x, shape, WIDTH, f"{name}/key", gain=2.0)
        v = self.dense(x, shape, WIDTH, f"{name}/value")
        qh, kh, vh = self.heads(q, f"{name}/q"), self.heads(k, f"{name}/k"), self.heads(v, f"{name}/v")
        scores_shape = (1, HEADS, TOKENS, TOKENS)
        scores = mb.op("BATCH_MATMUL", [qh, kh], scores_shape, {"adj_y": True}, name=f"{name}/scores")
        merged = scaled_softmax_context(mb, scores, vh, name, TOKENS, HEADS, WIDTH)
        return self.dense(merged, shape, WIDTH, f"{name}/output")

    def build(self) -> bytes:
        mb, shape = self.mb, (1, TOKENS, WIDTH)
        ids = mb.input("input_ids", (1, TOKENS), np.int32)
        types = mb.input("token_type_ids", (1, TOKENS), np.int32)
        x = self.embeddings(ids, types)
        for layer in range(LAYERS):
            x = mb.op("ADD", [x, self.attention(x, layer)], shape, name=f"layer{layer}/residual1")
            x = self.norm(x, LN_STYLES[(2 * layer + 1) % len(LN_STYLES)], f"layer{layer}/ln1")
            h = mb.op("GELU", [self.dense(x, shape, MLP, f"layer{layer}/mlp1")], (1, TOKENS, MLP),
                      {"approximate": False}, name=f"layer{layer}/gelu")
            x = mb.op("ADD", [x, self.dense(h, (1, TOKENS, MLP), WIDTH, f"layer{layer}/mlp2")], shape,
                      name=f"layer{layer}/residual2")
            x = self.norm(x, LN_STYLES[(2 * layer + 2) % len(LN_STYLES)], f"layer{layer}/ln2")
        cls = mb.op("STRIDED_SLICE", [x, mb.const("cls/begin", np.array([0, 0, 0], np.int32)),
                                      mb.const("cls/end", np.array([1, 1, WIDTH], np.int32)),
                                      mb.const("cls/strides", np.array([1, 1, 1], np.int32))],
                    (1, WIDTH), {"shrink_axis_mask": 2}, name="pooler/cls")
        pooled = mb.op("TANH", [self.dense(cls, (1, WIDTH), WIDTH, "pooler/dense", gain=0.7)], (1, WIDTH),
                       name="pooler/tanh")
        mb.output(x)
        mb.output(pooled)
        return mb.build()


def token_ids(seed: int = 0, negative: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Valid inputs for bert_tiny: ([1, 32] ids in [0, VOCAB), a few written negatively (-VOCAB..-1, the same
    rows), [CLS]-like id 1 first; [1, 32] segment ids, 0 for the first half and 1 after)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, (1, TOKENS)).astype(np.int32)
    ids[0, 0] = 1
    if negative:
        ids[0, 1::7] -= VOCAB
    types = (np.arange(TOKENS) >= TOKENS // 2).astype(np.int32).reshape(1, TOKENS)
    return ids, types


def bert_tiny(seed: int = 0) -> bytes:
    """BERT-tiny: int32 ids (negative-index fix-up), word/position/segment GATHER embeddings, LayerNorm, 2 post-norm
    layers (width 64, 4 heads, GELU MLP 128), [CLS] pooler (FULLY_CONNECTED + TANH)."""
    return _Bert(seed).build()
