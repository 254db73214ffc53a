"""The WebGPU implementations the engine runs on, and what differs between them, in one place.

"wgpu" (the default): wgpu-py on wgpu-native, whose WGSL compiler is naga. "dawn": wgpudawn (`pip install
'gpuengine[dawn]'`), wgpu-py's API on Dawn, Chrome's implementation, whose WGSL compiler is Tint. Both packages
have the same API, enums and flags, so the runtime uses either through it; what differs is here:
  * the package's name (`wgpu` or `wgpudawn`; the two install side by side, each only its own module);
  * the name of the subgroup feature (wgpu-native: `subgroup`, Dawn and the spec: `subgroups`): the engine says
    `subgroup` (latency/target.py, device.WANTED_FEATURES), `engine_features` and `native_features` translate;
  * the enable directives of a shader (lowering/codegen.py render(webgpu=...));
  * Dawn's Null backend: where Dawn finds no GPU it still offers an adapter that compiles shaders (Tint's full
    validation) and runs nothing. The engine uses it for compile-only work (`inspect`, `--dump-wgsl`, the CI's
    compile check) and refuses to run on it (COMPILE_ONLY).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from types import ModuleType
from typing import Any

from ..errors import AdapterError
from ..lowering.codegen import IMPLEMENTATIONS

PACKAGES = {"wgpu": "wgpu", "dawn": "wgpudawn"}
NAMES = {"wgpu": "wgpu-native", "dawn": "Dawn"}  # for messages
INSTALL = {"wgpu": "pip install wgpu", "dawn": "pip install 'gpuengine[dawn]'"}
# the engine's feature name -> each implementation's, where they differ
_FEATURES = {"dawn": {"subgroup": "subgroups"}}
NULL_BACKEND = "Null"
COMPILE_ONLY = ("Dawn (webgpu='dawn') found no GPU adapter, only its Null backend, which compiles shaders but "
                "runs nothing: use webgpu='wgpu' (env GPUENGINE_WEBGPU=wgpu) to run here, or a machine with a "
                "Vulkan, Metal or D3D12 GPU for Dawn")


def check(webgpu: str) -> str:
    """The implementation's name, checked (ValueError naming the choices)."""
    if webgpu not in IMPLEMENTATIONS:
        raise ValueError(f"webgpu {webgpu!r} is not one of {', '.join(IMPLEMENTATIONS)} (argument or env "
                         "GPUENGINE_WEBGPU)")
    return webgpu


def package(webgpu: str) -> ModuleType:
    """The Python package of an implementation (AdapterError saying how to install it when missing)."""
    try:
        return importlib.import_module(PACKAGES[check(webgpu)])
    except ImportError as e:
        raise AdapterError(f"WebGPU implementation {webgpu!r} ({NAMES[webgpu]}) is not installed: "
                           f"{INSTALL[webgpu]} ({e})") from e


def native_features(webgpu: str, features: list[str] | tuple[str, ...]) -> list[str]:
    """The engine's feature names as the implementation spells them."""
    table = _FEATURES.get(webgpu, {})
    return [table.get(f, f) for f in features]


def engine_features(webgpu: str, features: Any) -> frozenset[str]:
    """An implementation's feature names as the engine spells them."""
    back = {native: ours for ours, native in _FEATURES.get(webgpu, {}).items()}
    return frozenset(back.get(str(f), str(f)) for f in features)


def implementation_of(device: Any) -> str:
    """Which implementation made a device (a user's own device passed as the `device` option)."""
    module = type(device).__module__
    return "dawn" if module.startswith(PACKAGES["dawn"]) else "wgpu"


def is_null(adapter: Any) -> bool:
    """Whether an adapter is Dawn's Null backend (compiles shaders, runs nothing)."""
    return adapter.info.get("backend_type") == NULL_BACKEND


_null_lock = threading.Lock()


def null_adapter() -> Any:
    """Dawn's Null adapter. wgpudawn gives it out only when its request names the Null backend, which it reads from
    the environment variable WGPU_BACKEND_TYPE at each request: set for that one request, then restored (and
    wgpudawn's warning that it forces a backend silenced: here that is the point). A new adapter each time: an
    adapter gives one device."""
    dawn = package("dawn")
    with _null_lock:
        before = os.environ.get("WGPU_BACKEND_TYPE")
        os.environ["WGPU_BACKEND_TYPE"] = NULL_BACKEND
        log = logging.getLogger(PACKAGES["dawn"])
        level = log.level
        log.setLevel(logging.ERROR)
        try:
            return dawn.gpu.request_adapter_sync(power_preference="high-performance")
        except Exception as e:  # noqa: BLE001 - a broken install must become an actionable error
            raise AdapterError(f"Dawn could not give its Null adapter ({e})") from e
        finally:
            log.setLevel(level)
            if before is None:
                del os.environ["WGPU_BACKEND_TYPE"]
            else:
                os.environ["WGPU_BACKEND_TYPE"] = before


def compile_error(device: Any, source: str, pipeline: bool = True) -> str | None:
    """None when `device`'s WGSL compiler takes `source` (create_shader_module, then create_compute_pipeline with
    the layout derived from the shader unless not `pipeline`), else its message. Both implementations raise a
    validation error at the call."""
    try:
        module = device.create_shader_module(code=source)
        if pipeline:
            device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
    except Exception as e:  # noqa: BLE001 - the compiler's message is the result
        return str(e)
    return None


def extras(webgpu: str) -> ModuleType:
    """The implementation's module of non-standard functions (write_timestamp inside a pass: the same signature
    in both)."""
    return importlib.import_module({"wgpu": "wgpu.backends.wgpu_native.extras",
                                    "dawn": "wgpudawn.backends.dawn.extras"}[check(webgpu)])


def is_buffer(value: Any) -> bool:
    """Whether `value` is a GPUBuffer of either implementation."""
    for webgpu in IMPLEMENTATIONS:
        try:
            module = importlib.import_module(PACKAGES[webgpu])
        except ImportError:
            continue
        if isinstance(value, module.GPUBuffer):
            return True
    return False


def buffer_with_data(device: Any, data: bytes, usage: int) -> Any:
    """A buffer holding `data`. On Dawn through create_buffer + write_buffer: where Dawn is out of memory (its Null
    device has 512 MiB) its mapped-at-creation range is NULL and wgpudawn's create_buffer_with_data writes there
    (a segmentation fault); create_buffer raises GPUOutOfMemoryError instead."""
    if implementation_of(device) == "wgpu":
        return device.create_buffer_with_data(data=data, usage=usage)
    buffer = device.create_buffer(size=(len(data) + 3) & ~3, usage=usage | package("dawn").BufferUsage.COPY_DST)
    device.queue.write_buffer(buffer, 0, data if len(data) % 4 == 0 else data + b"\0" * (-len(data) % 4))
    return buffer
