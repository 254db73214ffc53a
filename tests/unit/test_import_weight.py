"""`import gpuengine` loads the engine and its API, not the tools around it: no LiteRT (ai_edge_litert), no LiteRT
oracle (gpuengine.oracle), no float64 reference executor (gpuengine.reference), no offline mixed-precision
search. Run in a fresh interpreter, so what other tests imported does not count."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("ai_edge_litert", "gpuengine.oracle", "gpuengine.reference", "gpuengine.mixed_precision", "gpuengine.tools")


def loaded_after(statement: str) -> list[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_import_gpuengine_loads_no_oracle_reference_or_litert() -> None:
    modules = loaded_after("import gpuengine")
    heavy = [m for m in modules if m.startswith(HEAVY)]
    assert not heavy, f"import gpuengine loads {heavy}"


def test_public_names_import_unchanged() -> None:
    modules = loaded_after("from gpuengine import CompiledModel, HardwareAccelerator, Interpreter, InvokeJob, "
                           "SignatureRunner, TensorBuffer, get_device")
    assert "gpuengine.api.interpreter" in modules
    assert not [m for m in modules if m.startswith(HEAVY)]


def test_litert_module_names_import() -> None:
    """LiteRT's module names work with the package swapped (gpuengine.compiled_model, .interpreter, ...)."""
    modules = loaded_after("from gpuengine.compiled_model import CompiledModel, HardwareAccelerator, TensorBuffer\n"
                           "from gpuengine.interpreter import Interpreter, SignatureRunner\n"
                           "from gpuengine.tensor_buffer import TensorBuffer\n"
                           "from gpuengine.hardware_accelerator import HardwareAccelerator")
    assert not [m for m in modules if m.startswith(HEAVY)]
