#!/usr/bin/env bash
# A reduced suite on the oldest supported TensorFlow (2.20, the newest tensorflow-tpu) with
# the Keras of its release (3.11), in its own venv: the device loop, the facade, host calls, padding,
# export (V1 and V2), the fake-TPU trace, the original's numbers and the original's API checks,
# install() and the runner (TPU VMs have tensorflow-tpu 2.20).
# MirroredStrategy variants run for the device loop only (the main step runs them all on the
# current TensorFlow), and `slow` end-to-end runs not at all: the step stays a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-tf2.20 TF_PIN="tensorflow-cpu==2.20.* keras==3.11.*" bash scripts/setup.sh
export TF_CPP_MIN_LOG_LEVEL=2
.venv-tf2.20/bin/python -c "import tensorflow as tf, keras; print('TensorFlow', tf.__version__, 'Keras', keras.__version__)"
.venv-tf2.20/bin/python -m pytest -q -m "not slow and not multiworker and not install" -k "not mirrored4 or test_loop" \
  tests/test_loop.py tests/test_estimator.py tests/test_host.py tests/test_padding.py \
  tests/test_export.py tests/test_export_v2.py tests/test_tpu.py tests/test_original_parity.py \
  tests/test_original_api.py tests/test_namespace.py tests/test_session_hooks.py tests/test_install.py \
  tests/test_keras_face.py tests/test_keras_methods.py tests/test_model_dir.py tests/test_model_dir_lock.py \
  tests/test_migration.py
