#!/usr/bin/env bash
# The test suite: set-up, lint, pytest (CPU only; 4 logical CPU devices), then the
# multi-process MultiWorkerMirroredStrategy tests, the install check (a tensorflow-cpu venv
# gets no second TensorFlow) and a reduced suite on the oldest supported TensorFlow, each as
# a separate step. Extra arguments go to the first pytest run; it and the oldest-TensorFlow
# step run on PYTEST_WORKERS processes (pytest-xdist, default 2: one per CI core).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
export TF_CPP_MIN_LOG_LEVEL=2
.venv/bin/python -m pytest -q -n "${PYTEST_WORKERS:-2}" -m "not multiworker and not install" "$@"
.venv/bin/python -m pytest -q -m multiworker
.venv/bin/python -m pytest -q -m install tests/package/test_install.py
bash scripts/test_oldest_tf.sh
