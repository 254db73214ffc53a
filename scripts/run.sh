#!/usr/bin/env bash
# The main job: set up, then run the built-in default model on the GPU and check it against LiteRT.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
exec .venv/bin/gpuengine run "$@"
