#!/usr/bin/env bash
# The tests: set up, fetch the reference models (tests that need them skip with the reason if offline),
# lint, then the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
.venv/bin/gpuengine fetch-models || echo "test: reference models unavailable; the tests that need them will skip"
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q "$@"
