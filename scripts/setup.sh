#!/usr/bin/env bash
# Creates .venv (if missing) and installs the package with its test extras, without ever
# replacing an installed TensorFlow: the [cpu] extra only when the venv has none, and
# tf_keras (TF1 layers, used by the tests) at the installed TensorFlow's version, --no-deps.
# TF_EXTRA=gpu (or tpu) picks another TensorFlow distribution for a fresh venv; VENV=dir
# another venv.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
has_tf=$("$VENV/bin/python" -c "import importlib.util; print(int(importlib.util.find_spec('tensorflow') is not None))")
if [ "$has_tf" = 1 ]; then
  "$VENV/bin/python" -m pip install --quiet -e ".[test]"
elif [ -n "${TF_PIN:-}" ]; then   # requirements, e.g. TF_PIN="tensorflow-cpu==2.20.* keras==3.11.*"
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install --quiet $TF_PIN -e ".[test]"
else
  "$VENV/bin/python" -m pip install --quiet -e ".[${TF_EXTRA:-cpu},test]"
fi
"$VENV/bin/python" -m pip install --quiet --no-deps "$("$VENV/bin/python" -m keras_tpu_estimator.versions tf_keras)"
