"""Migration: the names of the removed `tf.estimator` resolve to this library.

`install()` points `tf.estimator`, `tf.compat.v1.estimator` and the module paths programs
import (`tensorflow_estimator.python.estimator...`) at this package, so an unchanged
program runs: `python -m keras_tpu_estimator script.py ARGS...` calls it first.

Example (not run by the docs tests: `install()` changes TensorFlow for the rest of the process):

```text
import keras_tpu_estimator
keras_tpu_estimator.install()
import tensorflow as tf   # tf.estimator.tpu.TPUEstimator is keras_tpu_estimator's
```
"""

from .install import (
    install,
    installed,
)

__all__ = [
    "install",
    "installed",
]
