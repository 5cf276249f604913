#!/usr/bin/env bash
# The main job end to end: set-up, then the bundled TPUEstimator-style example.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
TF_CPP_MIN_LOG_LEVEL=2 .venv/bin/python -m keras_tpu_estimator.examples.synthetic_mlp "$@"
