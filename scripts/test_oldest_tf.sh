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
.venv-tf2.20/bin/python -m pytest -q -n "${PYTEST_WORKERS:-2}" -m "not slow and not multiworker and not install" -k "not mirrored4 or test_loop" \
  tests/engine/test_loop.py tests/facade/test_estimator.py tests/host/test_host_functions.py \
  tests/host/test_runner.py tests/host/test_global_step.py \
  tests/inputs/test_padding.py tests/export/test_saved_model.py tests/export/test_export_v2.py \
  tests/distribute/test_fake_tpu.py tests/parity/test_original_parity.py \
  tests/parity/test_original_api.py tests/migration/test_namespace.py \
  tests/callbacks/test_session_hooks.py tests/package/test_install.py tests/model/test_keras_face.py \
  tests/model/test_keras_methods.py tests/model_dir/test_contents.py tests/model_dir/test_lock.py \
  tests/migration/test_migration.py
