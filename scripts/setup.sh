#!/usr/bin/env bash
# One-time (idempotent) set-up on a fresh machine: a virtual environment with gpuengine and its test/plot
# extras, and — only when WebGPU finds no adapter — Mesa's software Vulkan driver (lavapipe).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test,plot]'

# Counts the adapters worth running on: a hardware GPU, or any Vulkan/Metal/D3D12 one. Mesa's OpenGL
# llvmpipe (present on most Linux images) does not count: lavapipe is the software driver we test on.
adapters() {
  XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} .venv/bin/python - <<'PY' 2>/dev/null || echo 0
import wgpu
good = [a for a in wgpu.gpu.enumerate_adapters_sync()
        if a.info.get("adapter_type") != "CPU" or a.info.get("backend_type") in ("Vulkan", "Metal", "D3D12")]
print(len(good))
PY
}
if [ "$(adapters | tail -n 1)" = "0" ]; then
  echo "setup: no GPU or Vulkan WebGPU adapter found; installing Mesa's software Vulkan driver (lavapipe)"
  SUDO=""
  if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
  if [ "$(adapters | tail -n 1)" = "0" ]; then
    echo "setup: still no usable WebGPU adapter; install a GPU driver with Vulkan support" >&2
    exit 1
  fi
fi
echo "setup: ready ($(.venv/bin/python -c 'import gpuengine; print("gpuengine", gpuengine.__version__)'))"
