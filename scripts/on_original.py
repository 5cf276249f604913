"""Runs a program on the original TPUEstimator as TF 1.x ran it: `python scripts/on_original.py SCRIPT ARGS...`.

Under TensorFlow 2.15 + tensorflow-estimator 2.15 (never a project dependency).
TF 1.x programs wrote `tf.estimator.tpu.*` on `import tensorflow as tf`,
where `tf.estimator` was the v1 namespace; TF 2.x moved it to
`tf.compat.v1.estimator`, so this sets `tf.estimator` to that namespace and
changes nothing else before running the script as `python SCRIPT ARGS` would.
"""

import os
import runpy
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

if not tf.__version__.startswith("2.15."):
    sys.exit(f"Run this under TensorFlow 2.15 (the original); found {tf.__version__}.")
tf.estimator = tf.compat.v1.estimator
script, sys.argv = sys.argv[1], sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(script))
runpy.run_path(script, run_name="__main__")
