"""LiteRT's CompiledModel / TensorBuffer API on gpuengine: the same script runs on either after one import, buffers
chain models on the GPU, and every misuse raises the exception type LiteRT's CompiledModel raises."""

from __future__ import annotations

import importlib.util
import types

import numpy as np
import pytest
from builders import conv_model, cpu_partition_model
from helpers import REPO_ROOT, SHARED_MODELS

import gpuengine
from gpuengine import CompiledModel, HardwareAccelerator, Interpreter, TensorBuffer
from gpuengine.model.builder import ModelBuilder
from gpuengine.zoo.quantize import quantized_zoo_model
from gpuengine.zoo.tiny import tiny

litert_cm = pytest.importorskip("ai_edge_litert.compiled_model")
litert_tb = pytest.importorskip("ai_edge_litert.tensor_buffer")
litert_hw = pytest.importorskip("ai_edge_litert.hardware_accelerator")

TOY_LLM = SHARED_MODELS / "toy_decoder_kv.tflite"
EXAMPLE = REPO_ROOT / "examples" / "compiled_model.py"
OURS = types.SimpleNamespace(CompiledModel=CompiledModel, TensorBuffer=TensorBuffer,
                             HardwareAccelerator=HardwareAccelerator, accel=HardwareAccelerator.GPU)
LITERT = types.SimpleNamespace(CompiledModel=litert_cm.CompiledModel, TensorBuffer=litert_tb.TensorBuffer,
                               HardwareAccelerator=litert_hw.HardwareAccelerator,
                               accel=litert_hw.HardwareAccelerator.CPU)


def docs_example(api: types.SimpleNamespace, model: bytes, x: np.ndarray) -> np.ndarray:
    """LiteRT's documented CompiledModel example, written once against a namespace of either API."""
    m = api.CompiledModel.from_buffer(model, hardware_accel=api.accel)
    ins, outs = m.create_input_buffers(0), m.create_output_buffers(0)
    ins[0].write(x)
    m.run_by_index(0, ins, outs)
    req = m.get_output_buffer_requirements(0)
    n = req["buffer_size"] // 4
    return outs[0].read(n, np.float32)


def test_litert_docs_example_runs_unchanged():
    """The same function on LiteRT (CPU) and gpuengine: outputs as the Interpreter's, within LiteRT's."""
    model = tiny(3)
    x = np.random.default_rng(0).uniform(-1, 1, (1, 32, 32, 3)).astype(np.float32)
    ours, theirs = docs_example(OURS, model, x), docs_example(LITERT, model, x)
    it = Interpreter(model_content=model)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    np.testing.assert_array_equal(ours, it.get_tensor(it.get_output_details()[0]["index"]).reshape(-1))
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_module_names_match_litert():
    """`from X.compiled_model import CompiledModel, TensorBuffer, HardwareAccelerator` (and .tensor_buffer,
    .hardware_accelerator) work with X = gpuengine as with ai_edge_litert, and the flags have LiteRT's values."""
    import gpuengine.compiled_model as ours
    import gpuengine.hardware_accelerator as ours_hw
    import gpuengine.tensor_buffer as ours_tb

    for name in ("CompiledModel", "TensorBuffer", "HardwareAccelerator"):
        assert hasattr(ours, name) and hasattr(litert_cm, name)
    assert ours_tb.TensorBuffer is TensorBuffer and ours_hw.HardwareAccelerator is HardwareAccelerator
    assert {f.name: int(f) for f in HardwareAccelerator} == {f.name: int(f) for f in LITERT.HardwareAccelerator}
    m = CompiledModel.from_buffer(conv_model(1, 3, 5), hardware_accel=LITERT.HardwareAccelerator.GPU)
    assert isinstance(m, CompiledModel)  # LiteRT's own flag works too
    from ai_edge_litert.options import Options

    m = CompiledModel.from_buffer(conv_model(1, 3, 5), options=Options(hardware_accelerators=HardwareAccelerator.GPU))
    assert isinstance(m, CompiledModel)  # and LiteRT's grouped options


def test_queries_match_litert():
    model = conv_model(1, 3, 5)
    ours, theirs = OURS.CompiledModel.from_buffer(model), LITERT.CompiledModel.from_buffer(model)
    key = theirs.get_signature_by_index(0)["key"]
    for m in (ours, theirs):
        m.resize_input_tensor(0, [1, 8, 8, 3], strict=False)  # the same shape: nothing changes
    for query in (lambda m: m.get_signature_list(), lambda m: m.get_signature_by_index(0),
                  lambda m: m.get_num_signatures(), lambda m: m.get_signature_index(key),
                  lambda m: m.get_signature_index("nope"), lambda m: m.get_input_tensor_details(key),
                  lambda m: m.get_output_tensor_details(key), lambda m: m.get_input_buffer_requirements(0),
                  lambda m: m.get_output_buffer_requirements(0), lambda m: m.is_fully_accelerated(),
                  lambda m: [b.get_tensor_details() for b in m.create_input_buffers(0)],
                  lambda m: m.create_output_buffer_by_name(key, "conv_2d_0_0").get_tensor_details()):
        assert query(ours) == query(theirs)
    with ours as m:
        assert m.get_num_signatures() == 1
    with pytest.raises(AttributeError, match="closed"):
        ours.create_input_buffers(0)


def test_resize_runs_the_new_shape():
    model = conv_model(1, 3, 5)
    m = CompiledModel.from_buffer(model)
    m.resize_input_tensor(0, [1, 6, 4, 3], strict=False)
    assert m.get_output_tensor_details("<placeholder signature>")["conv_2d_0_0"]["shape"] == [1, 6, 4, 5]
    ins, outs = m.create_input_buffers(0), m.create_output_buffers(0)
    x = np.random.default_rng(1).uniform(-1, 1, (1, 6, 4, 3)).astype(np.float32)
    ins[0].write(x)
    m.run_by_index(0, ins, outs)
    it = Interpreter(model_content=model)
    it.resize_tensor_input(0, [1, 6, 4, 3])
    it.allocate_tensors()
    it.set_tensor(0, x)
    it.invoke()
    np.testing.assert_array_equal(outs[0].read(6 * 4 * 5, np.float32).reshape(1, 6, 4, 5),
                                  it.get_tensor(it.get_output_details()[0]["index"]))


def _dynamic_batch_model() -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", (1, 4), shape_signature=(-1, 4))
    mb.output(mb.op("ADD", [x, mb.const("one", np.ones((4,), np.float32))], (1, 4), shape_signature=(-1, 4)))
    return mb.build()


def dynamic_chain(api: types.SimpleNamespace) -> list:
    """a resized to batch 3 feeds b (batch 1 declared, dynamic): b takes the buffer's shape, as LiteRT does; its
    old output buffer is too small (RuntimeError), new ones fit. Also: destroying a bound input buffer is safe."""
    a = api.CompiledModel.from_buffer(_dynamic_batch_model(), hardware_accel=api.accel)
    b = api.CompiledModel.from_buffer(_dynamic_batch_model(), hardware_accel=api.accel)
    a.resize_input_tensor(0, [3, 4])
    a_in, a_out = a.create_input_buffers(0), a.create_output_buffers(0)
    a_in[0].write(np.arange(12, dtype=np.float32))
    a.run_by_index(0, a_in, a_out)
    seen = [a_out[0].get_tensor_details()]
    b_out = b.create_output_buffers(0)
    with pytest.raises(RuntimeError):
        b.run_by_index(0, a_out, b_out)
    seen.append(b.get_input_tensor_details(b.get_signature_by_index(0)["key"]))
    b_out = b.create_output_buffers(0)
    b.run_by_index(0, a_out, b_out)
    seen.append(b_out[0].read(12, np.float32).tolist())
    a_in[0].destroy()  # bound to a's input: the next run binds another before anything is submitted
    again = a.create_input_buffers(0)
    again[0].write(np.ones(12, np.float32))
    a.run_by_index(0, again, a_out)
    seen.append(a_out[0].read(12, np.float32).tolist())
    return seen


def test_dynamic_input_takes_its_buffers_shape():
    assert dynamic_chain(OURS) == dynamic_chain(LITERT)


@pytest.mark.parametrize("build", [lambda: quantized_zoo_model(tiny(1), 1, "tiny int8"),
                                   lambda: cpu_partition_model(np.random.default_rng(5))[0]],
                         ids=["int8 inputs and outputs", "a CPU partition"])
def test_host_paths_give_the_interpreters_outputs(build):
    """int8 inputs and outputs cross through the host (the GPU holds real values), and a model with a CPU partition
    runs its programs in turn: the buffers get what the Interpreter gives."""
    model = build()
    m = CompiledModel.from_buffer(model)
    it = Interpreter(model_content=model)
    it.allocate_tensors()
    ins, outs = m.create_input_buffers(0), m.create_output_buffers(0)
    rng = np.random.default_rng(6)
    for buffer, d in zip(ins, it.get_input_details()):
        value = (rng.integers(-128, 128, d["shape"]) if d["dtype"] == np.int8
                 else rng.uniform(-1, 1, d["shape"])).astype(d["dtype"])
        buffer.write(value)
        it.set_tensor(d["index"], value)
    m.run_by_index(0, ins, outs)
    it.invoke()
    for buffer, d in zip(outs, it.get_output_details()):
        got = buffer.read(int(np.prod(d["shape"])), d["dtype"]).reshape(d["shape"])
        np.testing.assert_array_equal(got, it.get_tensor(d["index"]))
    assert m.is_fully_accelerated() == all(p.device == "gpu" for p in it.compiled.plan.partitions)


def test_chained_models_map_one_staging_buffer_per_frame(count_maps):  # noqa: F811 - the imported fixture
    """a's output buffer is b's input buffer: b reads it on the GPU (no readback, no copy); only reading b's output
    maps a staging buffer, once per frame. Results equal the Interpreter's host path bit for bit."""
    a = CompiledModel.from_buffer(conv_model(1, 3, 5))
    b = CompiledModel.from_buffer(conv_model(2, 5, 4))
    a_in, middle, b_out = a.create_input_buffers(0), a.create_output_buffers(0), b.create_output_buffers(0)
    frames = [np.random.default_rng(k).uniform(-1, 1, (1, 8, 8, 3)).astype(np.float32) for k in range(3)]
    ia, ib = Interpreter(model_content=conv_model(1, 3, 5)), Interpreter(model_content=conv_model(2, 5, 4))
    ia.allocate_tensors()
    ib.allocate_tensors()
    a.run_by_index(0, a_in, middle)  # the first run of each compiles and binds: not counted
    b.run_by_index(0, middle, b_out)
    count_maps["maps"] = 0
    for x in frames:
        a_in[0].write(x)
        a.run_by_index(0, a_in, middle)
        b.run_by_index(0, middle, b_out)
        got = b_out[0].read(8 * 8 * 4, np.float32).reshape(1, 8, 8, 4)
        maps = count_maps["maps"]
        ia.set_tensor(0, x)
        ia.invoke()
        ib.set_tensor(0, ia.get_tensor(ia.get_output_details()[0]["index"]))
        ib.invoke()
        np.testing.assert_array_equal(got, ib.get_tensor(ib.get_output_details()[0]["index"]))
        count_maps["maps"] = maps
    assert count_maps["maps"] == len(frames)
    assert b.signature_runner().compiled.gpu_programs[0].uploaded == {}  # its input was never uploaded


def test_interpreter_buffers_are_tensor_buffers():
    """Interpreter.output_buffer hands out the same TensorBuffer class: it reads back, unpacks as (buffer, dtype),
    and is a CompiledModel's input as it is; a buffer of another device is refused as LiteRT refuses a buffer it
    cannot register (RuntimeError)."""
    device = gpuengine.get_device()
    it = Interpreter(model_content=conv_model(1, 3, 5), device=device)
    it.allocate_tensors()
    x = np.random.default_rng(2).uniform(-1, 1, (1, 8, 8, 3)).astype(np.float32)
    it.set_tensor(0, x)
    it.invoke()
    out = it.output_buffer(0)
    assert isinstance(out, TensorBuffer)
    want = it.get_tensor(it.get_output_details()[0]["index"])
    np.testing.assert_array_equal(out.read(320, np.float32).reshape(want.shape), want)
    buffer, dtype = out
    assert buffer.size >= 1280 and dtype == np.float32
    b = CompiledModel.from_buffer(conv_model(2, 5, 4), device=device)
    outs = b.create_output_buffers(0)
    b.run_by_index(0, [out], outs)
    ib = Interpreter(model_content=conv_model(2, 5, 4))
    ib.allocate_tensors()
    ib.set_tensor(0, want)
    ib.invoke()
    np.testing.assert_array_equal(outs[0].read(256, np.float32).reshape(1, 8, 8, 4),
                                  ib.get_tensor(ib.get_output_details()[0]["index"]))
    it.allocate_tensors()  # a new allocation: the interpreter's old buffers are stale
    with pytest.raises(RuntimeError, match="compiled again"):
        out.read(320, np.float32)
    with pytest.raises(RuntimeError, match="compiled again"):
        b.run_by_index(0, [out], outs)
    other = device.adapter.request_device_sync()
    foreign = TensorBuffer.allocate(other, np.float32, (1, 8, 8, 5))
    with pytest.raises(RuntimeError, match="another GPU device"):
        b.run_by_index(0, [foreign], outs)
    host = TensorBuffer.create_from_host_memory(np.ascontiguousarray(want), device=other)
    b.run_by_index(0, [host], outs)  # host memory of any device is fed through the host
    np.testing.assert_array_equal(outs[0].read(256, np.float32).reshape(1, 8, 8, 4),
                                  ib.get_tensor(ib.get_output_details()[0]["index"]))


def test_buffer_bytes_round_trip():
    """write / read copy bytes as LiteRT does (no conversion); a write of a few int8 keeps the bytes after them."""
    for api in (OURS, LITERT):
        buffer = api.TensorBuffer.create_from_host_memory(np.arange(8, dtype=np.int8))
        buffer.write(np.array([9, 9, 9], np.int8))
        assert buffer.read(8, np.int8).tolist() == [9, 9, 9, 3, 4, 5, 6, 7]
        floats = api.TensorBuffer.create_from_host_memory(np.zeros(4, np.float32))
        floats.write(np.arange(4, dtype=np.int32))
        assert floats.read(4, np.int32).tolist() == [0, 1, 2, 3]


def test_cpu_accelerator_runs_on_litert():
    with pytest.warns(UserWarning, match="runs on LiteRT's CPU CompiledModel"):
        m = CompiledModel.from_buffer(conv_model(1, 3, 5), hardware_accel=HardwareAccelerator.CPU)
    assert isinstance(m, litert_cm.CompiledModel)
    with pytest.raises(RuntimeError, match="no NPU"):
        CompiledModel.from_buffer(conv_model(1, 3, 5), hardware_accel=HardwareAccelerator.NPU)


@pytest.mark.skipif(not TOY_LLM.exists(), reason=f"{TOY_LLM} not present (see ../shared/models/README.md)")
def test_decoder_signatures_by_name(count_maps):  # noqa: F811 - the imported fixture
    """The toy decoder's decode signature through run_by_name, two steps with the KV cache passed from one
    step's output buffers to the next step's inputs on the GPU: logits and caches as the SignatureRunner's (host
    path), and as LiteRT's."""
    from ai_edge_litert.interpreter import Interpreter as LiteRtInterpreter

    m = CompiledModel.from_file(str(TOY_LLM))
    theirs = litert_cm.CompiledModel.from_file(str(TOY_LLM))
    key = "decode"
    assert m.get_signature_list() == theirs.get_signature_list()
    details = m.get_input_tensor_details(key)
    assert details == theirs.get_input_tensor_details(key)
    assert m.get_output_tensor_details(key) == theirs.get_output_tensor_details(key)
    rng = np.random.default_rng(4)
    feeds = {n: rng.standard_normal(d["shape"]).astype(np.float32) * 0.1 for n, d in details.items()
             if d["dtype"] == "float32"}
    ins = {n: m.create_input_buffer_by_name(key, n) for n in details}
    outs = [{n: m.create_output_buffer_by_name(key, n) for n in m.get_signature_list()[key]["outputs"]}
            for _ in range(2)]
    for n, v in feeds.items():
        ins[n].write(v)
    runner = Interpreter(model_path=str(TOY_LLM)).get_signature_runner(key)
    reference = LiteRtInterpreter(model_path=str(TOY_LLM)).get_signature_runner(key)
    state = dict(feeds)
    for step, token in enumerate((7, 11)):
        ins["tokens"].write(np.array([[token]], np.int32))
        ins["input_pos"].write(np.array([step], np.int32))
        inputs = dict(ins) if step == 0 else {**ins, **{n: outs[0][n] for n in feeds}}  # the cache stays on the GPU
        count_maps["maps"] = 0
        m.run_by_name(key, inputs, outs[step])
        read = {n: buffer.read(buffer.size, np.float32).reshape(buffer.shape) for n, buffer in outs[step].items()}
        assert count_maps["maps"] == 1  # token ids come from write()'s host copy; all five outputs: one map
        host = {"tokens": np.array([[token]], np.int32), "input_pos": np.array([step], np.int32), **state}
        want, oracle = runner(**host), reference(**host)
        for n, got in read.items():
            np.testing.assert_allclose(got, want[n], rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(got, oracle[n], rtol=1e-4, atol=1e-4)
        state = {n: want[n] for n in feeds}
    uploaded = m.signature_runner(key).compiled.gpu_programs[0].uploaded  # the last step's host uploads
    assert set(uploaded) == {details["tokens"]["index"], details["input_pos"]["index"]}
    # examples/compiled_model.py's greedy decode loop: the same tokens on LiteRT and on gpuengine
    spec = importlib.util.spec_from_file_location("compiled_model_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.generate(m, [1, 5, 9, 2], 4) == example.generate(theirs, [1, 5, 9, 2], 4)
    decode = m._signatures[m.get_signature_index(key)]
    assert decode.copied == {t for n, t in decode.sig.inputs.items() if n in feeds}  # ping-pong: copy mode


# -- misuse: each case runs against LiteRT's CompiledModel (CPU) and gpuengine's; both must raise the same type --
def _other_dtype_input(ns):
    ns.model.run_by_index(0, [ns.api.TensorBuffer.create_from_host_memory(np.zeros((1, 8, 8, 3), np.int32))],
                          ns.outs)


MISUSE = {
    "write an unsupported dtype": lambda ns: ns.ins[0].write(np.zeros(192, np.float64)),
    "write a list": lambda ns: ns.ins[0].write([1.0, 2.0]),
    "write more than the buffer holds": lambda ns: ns.ins[0].write(np.zeros(193, np.float32)),
    "read past the end": lambda ns: ns.outs[0].read(321, np.float32),
    "read an unsupported dtype": lambda ns: ns.outs[0].read(4, np.float64),
    "read a negative count": lambda ns: ns.outs[0].read(-1, np.float32),
    "write a destroyed buffer": lambda ns: ns.destroyed.write(np.zeros(4, np.float32)),
    "read a destroyed buffer": lambda ns: ns.destroyed.read(4, np.float32),
    "details of a destroyed buffer": lambda ns: ns.destroyed.get_tensor_details(),
    "run a destroyed buffer": lambda ns: ns.model.run_by_index(0, [ns.destroyed], ns.outs),
    "run a numpy array": lambda ns: ns.model.run_by_index(0, [np.zeros((1, 8, 8, 3), np.float32)], ns.outs),
    "run an unknown signature by name": lambda ns: ns.model.run_by_name("nope", {}, {}),
    "run a signature index out of range": lambda ns: ns.model.run_by_index(1, ns.ins, ns.outs),
    "run with too few inputs": lambda ns: ns.model.run_by_index(0, [], ns.outs),
    "run with too many outputs": lambda ns: ns.model.run_by_index(0, ns.ins, ns.outs + ns.outs),
    "run with inputs and outputs swapped": lambda ns: ns.model.run_by_index(0, ns.outs, ns.ins),
    "run an input of another size": lambda ns: ns.model.run_by_index(
        0, [ns.api.TensorBuffer.create_from_host_memory(np.zeros(10, np.float32))], ns.outs),
    "run an input of another dtype": _other_dtype_input,
    "run_by_name without the outputs": lambda ns: ns.model.run_by_name(ns.key, {"x": ns.ins[0]}, {}),
    "details of an unknown signature": lambda ns: ns.model.get_input_tensor_details("nope"),
    "output details of an unknown signature": lambda ns: ns.model.get_output_tensor_details("nope"),
    "buffer of an unknown input": lambda ns: ns.model.create_input_buffer_by_name(ns.key, "nope"),
    "buffer of an unknown signature": lambda ns: ns.model.create_output_buffer_by_name("nope", "x"),
    "buffers of a signature out of range": lambda ns: ns.model.create_input_buffers(1),
    "requirements of an input out of range": lambda ns: ns.model.get_input_buffer_requirements(5),
    "requirements of a signature out of range": lambda ns: ns.model.get_output_buffer_requirements(0, 3),
    "strict resize of a static input": lambda ns: ns.model.resize_input_tensor(0, [1, 16, 16, 3]),
    "resize an input out of range": lambda ns: ns.model.resize_input_tensor(4, [1, 8, 8, 3], strict=False),
    "resize by an unknown signature": lambda ns: ns.model.resize_input_tensor_by_name("nope", "x", [1, 8, 8, 3]),
    "resize by an unknown input": lambda ns: ns.model.resize_input_tensor_by_name(ns.key, "y", [1, 8, 8, 3]),
    "host memory from a list": lambda ns: ns.api.TensorBuffer.create_from_host_memory([1.0, 2.0]),
    "host memory of an unsupported dtype": lambda ns: ns.api.TensorBuffer.create_from_host_memory(np.zeros(3)),
    "host memory not C-contiguous": lambda ns: ns.api.TensorBuffer.create_from_host_memory(
        np.zeros((4, 4), np.float32).T),
    "a model file that does not exist": lambda ns: ns.api.CompiledModel.from_file("/nonexistent/model.tflite"),
    "a buffer that is not a model": lambda ns: ns.api.CompiledModel.from_buffer(b"not a tflite model" * 4),
    "both options and hardware_accel": lambda ns: ns.api.CompiledModel.from_buffer(
        ns.data, hardware_accel=ns.api.accel, options=object()),
    "run a closed model": lambda ns: ns.closed.run_by_index(0, ns.ins, ns.outs),
}


@pytest.fixture(scope="module")
def both_apis():
    data = conv_model(1, 3, 5)
    result = {}
    for name, api in (("litert", LITERT), ("gpuengine", OURS)):
        model = api.CompiledModel.from_buffer(data, hardware_accel=api.accel)
        ins, outs = model.create_input_buffers(0), model.create_output_buffers(0)
        ins[0].write(np.ones((1, 8, 8, 3), np.float32))
        model.run_by_index(0, ins, outs)
        closed = api.CompiledModel.from_buffer(data, hardware_accel=api.accel)
        closed.close()
        result[name] = types.SimpleNamespace(api=api, data=data, model=model, ins=ins, outs=outs, closed=closed,
                                             key=model.get_signature_by_index(0)["key"])
    return result


@pytest.mark.parametrize("case", list(MISUSE))
def test_misuse_raises_litert_exception_type(both_apis, case):
    raised = {}
    for name, ns in both_apis.items():
        ns.destroyed = ns.api.TensorBuffer.create_from_host_memory(np.zeros(4, np.float32))
        ns.destroyed.destroy()
        with pytest.raises(Exception) as info:  # noqa: B017 - the type is what is compared
            MISUSE[case](ns)
        raised[name] = info.type
    assert raised["litert"] in (ValueError, RuntimeError, AttributeError)  # the table holds only LiteRT's errors
    assert issubclass(raised["gpuengine"], raised["litert"]), raised
