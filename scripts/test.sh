#!/usr/bin/env bash
# The tests: set up, fetch the reference models (tests that need them skip with the reason if offline),
# lint, the whole suite, then every op test again with graph passes and fusion switched off, in fp16, and in
# fp16 with half the tensors kept in f32 (mixed precision).
# Each pytest run uses two worker processes (pytest-xdist): most of the time goes to compiling shaders on
# lavapipe, which is single-threaded per process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
.venv/bin/gpuengine fetch-models || echo "test: reference models unavailable; the tests that need them will skip"
.venv/bin/ruff check .
workers=${GPUENGINE_TEST_WORKERS:-2}
.venv/bin/python -m pytest -q -n "$workers" --dist loadfile -m "not timing" "$@"
echo "test: the timing tests alone (measured times held to the latency model's goal; no other worker loading the CPU)"
.venv/bin/python -m pytest -q -m timing "$@"
echo "test: op tests again with passes and fusion off (GPUENGINE_OPTIMIZE=0)"
GPUENGINE_OPTIMIZE=0 .venv/bin/python -m pytest -q -n "$workers" --dist loadfile tests/ops "$@"
echo "test: op tests again in fp16 (GPUENGINE_PRECISION=fp16, the fp16 tolerance)"
GPUENGINE_PRECISION=fp16 .venv/bin/python -m pytest -q -n "$workers" --dist loadfile tests/ops "$@"
echo "test: op tests again in fp16 with every odd-indexed tensor kept in f32 (mixed precision, GPUENGINE_TEST_MIXED)"
GPUENGINE_PRECISION=fp16 GPUENGINE_TEST_MIXED=odd .venv/bin/python -m pytest -q -n "$workers" --dist loadfile tests/ops "$@"
