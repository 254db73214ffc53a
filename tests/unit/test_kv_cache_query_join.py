"""passes/kv_cache_in_place.py joins a layer's query rotation to its KV-cache write where the zoo's decoders rotate
the query after the write (litert-torch's exports rotate it before): one dispatch from the QKV projection to the
attention, and the position math folded into it (no CAST / MUL / COS / SIN dispatch left outside the layers). Without a
device description passes/fuse_kv_write_into_projection.py then makes that write the QKV projection's epilogue: the
write's groups are read from its KV_EPILOGUE option there."""

from __future__ import annotations

from gpuengine.model.ops import GROUPS, KV_CACHE_WRITE, KV_EPILOGUE, QUERY, ROPE
from gpuengine.model.reader import read_model
from gpuengine.passes.pipeline import run_passes
from gpuengine.zoo.decoder import DecoderConfig, decoder

CONFIG = DecoderConfig(layers=2, width=128, heads=3, kv_heads=1, head_dim=64, mlp=256, vocab=64, cache=32, prefill=4)


def decode_graph():
    model = read_model(decoder(CONFIG, seed=7))
    return model, model.subgraphs[{s.key: s.subgraph for s in model.signatures}["decode"]]


def test_the_query_rotation_after_the_write_joins_it():
    model, graph = decode_graph()
    after = run_passes(graph, model=model)
    groups = [op.opt(GROUPS) for op in after.ops if op.code == KV_CACHE_WRITE]
    groups += [dict(op.opt(KV_EPILOGUE)[2])[GROUPS] for op in after.ops if op.opt(KV_EPILOGUE)]
    assert len(groups) == CONFIG.layers
    for g in groups:  # K and V, then the query's rotation (ROPE semantics), in one op
        assert [x[3] if len(x) > 3 else None for x in g] == [None, None, QUERY], g
    codes = {op.code for op in after.ops}
    assert ROPE not in codes and not codes & {"CAST", "COS", "SIN"}, sorted(codes)
