#!/usr/bin/env bash
# The test suite: set-up, lint, pytest (CPU only; 4 logical CPU devices), then the
# multi-process MultiWorkerMirroredStrategy tests as a separate step.
# Extra arguments go to the first pytest run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
export TF_CPP_MIN_LOG_LEVEL=2
.venv/bin/python -m pytest -q -m "not multiworker" "$@"
.venv/bin/python -m pytest -q -m multiworker
