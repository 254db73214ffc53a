#!/usr/bin/env bash
# One-time (idempotent) set-up on a fresh machine: a virtual environment with gpuengine and its test/plot
# extras, and — only when WebGPU finds no adapter — Mesa's software Vulkan driver (lavapipe).
# Installs only when pyproject.toml changed since the last install (its hash is kept in .venv); prints one line
# (pip's output goes to .venv/setup.log, shown when it fails).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
STAMP=.venv/gpuengine-setup.sha256
WANT="$(sha256sum pyproject.toml | cut -d' ' -f1) $(.venv/bin/python -c 'import sys; print(sys.version.split()[0])')"
did="up to date"
if [ ! -x .venv/bin/gpuengine ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  rm -f "$STAMP"
  if ! { .venv/bin/python -m pip install -q --upgrade pip && .venv/bin/python -m pip install -q -e '.[test,plot]'; } \
      >.venv/setup.log 2>&1; then
    tail -n 20 .venv/setup.log >&2
    echo "setup: pip install failed (the whole log: .venv/setup.log)" >&2
    exit 1
  fi
  echo "$WANT" >"$STAMP"
  did="installed"
fi

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
echo "setup: $did ($(.venv/bin/python -c 'import gpuengine; print("gpuengine", gpuengine.__version__)'))"
