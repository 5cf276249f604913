"""The errors training raises on NaN or Inf: each both Keras' `FloatingPointError` and the original's type.

Code written against TPUEstimator catches `tf.compat.v1.train.NanLossDuringTrainingError`
or `tf.errors.InvalidArgumentError` ("Gradient for ... is NaN"); Keras code
catches `FloatingPointError`. Both keep working.
"""

from __future__ import annotations

import tensorflow as tf


class NonFiniteVariableError(FloatingPointError, tf.errors.InvalidArgumentError):
    """A trainable variable holds NaN or Inf after an execution.

    Both a `FloatingPointError` (Keras' habit) and the original's
    `tf.errors.InvalidArgumentError` ("Gradient for ... is NaN"), so code that
    caught either keeps working.

    Example:

    ```python
    try:
        estimator.train(input_fn, max_steps=2)
    except tf.errors.InvalidArgumentError as error:  # or FloatingPointError
        print(error.message)
    ```
    """

    def __init__(self, message: str):
        tf.errors.InvalidArgumentError.__init__(self, None, None, message)


class NanLossError(FloatingPointError, tf.compat.v1.train.NanLossDuringTrainingError):
    """The training loss became NaN or Inf: the original's `NanLossDuringTrainingError`, and a
    `FloatingPointError` for Keras code.

    Example:

    ```python
    try:
        estimator.train(input_fn, max_steps=2)
    except tf.compat.v1.train.NanLossDuringTrainingError as error:
        print(error)  # "NaN loss during training. The training loss became nan ..."
    ```
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "NaN loss during training."
