#!/usr/bin/env bash
# The test suite: set-up, lint, then pytest (CPU only; 4 logical CPU devices).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
TF_CPP_MIN_LOG_LEVEL=2 .venv/bin/python -m pytest -q "$@"
