"""Next-token sampler of a GPU decode loop (shaders/sampler.wgsl): argmax, top-k, top-p and temperature with a
seeded counter-based generator, reading a decode step's logits buffer and writing the next step's token and
position where the decode signature reads them, so a decode step needs no host round trip but the 4 bytes of
its token id. gpuengine/llm/sampling.py is the same sampler in numpy (the host loop, and the test's reference).

Not a TFLite op: a dispatch the language-model layer appends to a decode signature's submission
(SignatureRunner.submit(after=...)). Only numbers made here are baked into the WGSL.
"""

from __future__ import annotations

import numpy as np

from .. import codegen

MAX_TOP_K = 64  # candidates the GPU sampler keeps (rounds of a workgroup argmax); top-p works within them
LANES = 256
HISTORY = 8  # the state buffer's header (u32 words) before the token history
STEP, SEED, TOP_K, TOP_P, TEMPERATURE, NEXT_TOKEN, NEXT_POSITION, MASKED = range(8)  # header words (NEXT_*: f32 bits)


def source(vocab: int) -> str:
    """The sampler's WGSL for a vocabulary of `vocab` logits."""
    if not 0 < vocab < 1 << 24:
        raise ValueError(f"vocabulary of {vocab} tokens: ids must be exact in f32 (< 2^24)")
    return codegen.load_template("sampler").substitute(VOCAB=codegen.literal(int(vocab)),
                                                         MAX_K=codegen.literal(MAX_TOP_K),
                                                         LANES=codegen.literal(LANES),
                                                         HISTORY=codegen.literal(HISTORY))


def header(seed: int, top_k: int, top_p: float, temperature: float, step: int = 0, masked: bool = False
           ) -> np.ndarray:
    """The state buffer's header words for these settings (what the host writes before a generation); masked: only
    the tokens set in the `allowed` bitmask (binding 4) are drawn."""
    words = np.zeros(HISTORY, np.uint32)
    words[MASKED] = int(masked)
    words[STEP] = step
    words[SEED] = int(seed) & 0xFFFFFFFF
    words[TOP_K] = max(1, min(int(top_k), MAX_TOP_K))
    words[TOP_P] = np.float32(top_p).view(np.uint32)
    words[TEMPERATURE] = np.float32(temperature).view(np.uint32)
    return words
