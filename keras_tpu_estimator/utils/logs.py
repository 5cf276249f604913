"""One logger hierarchy, `keras_tpu_estimator.*`, that follows TensorFlow's verbosity.

TPUEstimator logged through TensorFlow's logger, so old scripts show its
`loss = ..., step = ...` lines with `tf.compat.v1.logging.set_verbosity(INFO)`.
The package logger `keras_tpu_estimator` is placed under TensorFlow's logger
(`tensorflow`) in the logging tree: its level, when not set, is TensorFlow's,
and its records go to TensorFlow's handler and then to the root's. Setting a
level on `keras_tpu_estimator` itself still takes precedence.

Example:

```python
tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)   # shows the step lines
logging.getLogger("keras_tpu_estimator").setLevel(logging.WARNING)  # or only this package's
```
"""

from __future__ import annotations

import logging

ROOT = "keras_tpu_estimator"


def get_logger(name: str = ROOT) -> logging.Logger:
    """The logger `name` (a module's `__name__`, or a name under `keras_tpu_estimator`).

    Example:

    ```python
    _log = get_logger("keras_tpu_estimator.engine.driver")   # in that module: get_logger(__name__)
    assert _log.name == "keras_tpu_estimator.engine.driver"
    ```
    """
    package = logging.getLogger(ROOT)
    tensorflow = logging.getLogger("tensorflow")
    if package.parent is not tensorflow:
        # `Logger.parent` is what `logging` itself sets for dotted names; the
        # package name is not dotted under "tensorflow", so link it here.
        package.parent = tensorflow
    if not name.startswith(ROOT):
        raise ValueError(f"Logger names must start with {ROOT!r}. Received: {name!r}")
    return logging.getLogger(name)
