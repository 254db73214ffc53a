"""The Interpreter picks the tuning cache up (tests/unit/test_tuning.py: the search on a fake timer, the cache
format)."""

from __future__ import annotations

import numpy as np
import pytest

from gpuengine.tuning.cache import TuningCache


@pytest.mark.parametrize("model", ["tiny"])
def test_interpreter_uses_the_tuning_cache(tmp_path, model):
    from gpuengine import Interpreter, zoo
    from gpuengine.runtime.program import GpuProgram

    data = zoo.get(model)
    plain = Interpreter(model_content=data, workgroup_cache=str(tmp_path / "none.json"))
    plain.allocate_tensors()
    prog = next(p for p in plain.compiled.programs if isinstance(p, GpuProgram))
    index = next(i for i, t in enumerate(prog.tunable) if t)
    spec = prog.dispatches[index].spec
    chosen = (1, 1, 1) if tuple(spec.workgroup) != (1, 1, 1) else (2, 1, 1)
    cache = TuningCache(tmp_path / "tuned.json")
    cache.record(prog.gpu.cache_key(), prog.gpu.name, prog.signature(spec), chosen, 1.0, 0.5)
    cache.save()
    tuned = Interpreter(model_content=data, workgroup_cache=str(cache.path))
    tuned.allocate_tensors()
    assert tuned.compiled.tuned_dispatches >= 1
    tuned_prog = next(p for p in tuned.compiled.programs if isinstance(p, GpuProgram))
    assert tuple(tuned_prog.dispatches[index].spec.workgroup) == chosen
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, plain.get_input_details()[0]["shape"]).astype(np.float32)
    outs = []
    for it in (plain, tuned):
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        outs.append(it.get_tensor(it.get_output_details()[0]["index"]))
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6, atol=1e-7)
