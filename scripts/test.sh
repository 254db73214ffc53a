#!/usr/bin/env bash
# The tests: set up, fetch the reference models (tests that need them skip with the reason if offline), then the
# stages: lint; the unit tier alone (tests/unit: no GPU adapter, no LiteRT; seconds); the rest of the suite
# (tests/ops, tests/models, tests/api, tests/llm); the timing tests alone; then every op test again with graph
# passes and fusion switched off, in fp16, and in fp16 with half the tensors kept in f32 (mixed precision).
# Every stage runs even after another failed; one summary line per stage at the end; the exit status is non-zero
# when any stage failed. Arguments are passed to every pytest run (e.g. -x, -k NAME).
# Each pytest run of the GPU tiers uses two worker processes (pytest-xdist): most of the time goes to compiling
# shaders on lavapipe, which is single-threaded per process.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || { echo "test: setup failed; nothing can run" >&2; exit 1; }
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
.venv/bin/gpuengine fetch-models || echo "test: reference models unavailable; the tests that need them will skip"
workers=${GPUENGINE_TEST_WORKERS:-2}
names=()
results=()

stage() {  # stage NAME DESCRIPTION COMMAND...: run COMMAND, remember whether it passed
    local name=$1 description=$2
    shift 2
    echo "test: $name: $description"
    if "$@"; then results+=(passed); else results+=(failed); fi
    names+=("$name")
}

pytest_run() { .venv/bin/python -m pytest -q "$@"; }

stage lint "ruff" .venv/bin/ruff check .
stage unit "the unit tier alone (no GPU adapter, no LiteRT)" pytest_run tests/unit "$@"
stage suite "the other tiers (ops, models, api, llm), timing tests aside" \
    pytest_run -n "$workers" --dist loadfile -m "not timing" --ignore=tests/unit "$@"
stage timing "the timing tests alone (measured times held to the latency model's goal; no other worker loading \
the CPU)" pytest_run -m timing "$@"
stage ops-unoptimized "op tests again with passes and fusion off (GPUENGINE_OPTIMIZE=0)" \
    env GPUENGINE_OPTIMIZE=0 .venv/bin/python -m pytest -q -n "$workers" --dist loadfile tests/ops "$@"
stage ops-fp16 "op tests again in fp16 (GPUENGINE_PRECISION=fp16, the fp16 tolerance)" \
    env GPUENGINE_PRECISION=fp16 .venv/bin/python -m pytest -q -n "$workers" --dist loadfile tests/ops "$@"
stage ops-mixed "op tests again in fp16 with every odd-indexed tensor kept in f32 (mixed precision, \
GPUENGINE_TEST_MIXED)" env GPUENGINE_PRECISION=fp16 GPUENGINE_TEST_MIXED=odd \
    .venv/bin/python -m pytest -q -n "$workers" --dist loadfile tests/ops "$@"

status=0
echo "test: summary"
for k in "${!names[@]}"; do
    printf 'test: %-16s %s\n' "${names[$k]}" "${results[$k]}"
    [[ ${results[$k]} == passed ]] || status=1
done
exit "$status"
