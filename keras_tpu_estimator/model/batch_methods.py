"""Keras' single-batch methods on `EstimatorModel`: one step of `model_fn` on one batch.

`train_on_batch` runs one training step (one global step), `test_on_batch`
one evaluation step (metrics restart, as each TPUEstimator `evaluate` did),
`predict_on_batch` one prediction step. None of them runs callbacks, as in
Keras. The batch is arrays (or a dict of them), as Keras takes it; its rows
are the global batch of that step.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import tensorflow as tf

from keras_tpu_estimator.contract import ModeKeys
from keras_tpu_estimator.engine import NanLossError
from keras_tpu_estimator.inputs import keras_input, refuse_keras_arguments


def _one_batch(method: str, x: Any, y: Any) -> tf.data.Dataset:
    """A dataset of exactly the batch `(x, y)` (or `x`)."""
    if callable(x) or isinstance(x, tf.data.Dataset) or x is None:
        raise ValueError(
            f"{method} takes one batch of NumPy arrays or tensors (or a dict of them). For an "
            "input_fn or a dataset, use fit / evaluate / predict with `steps=1`."
        )
    batch = keras_input(x, y)
    leaves = tf.nest.flatten(batch)
    if not all(isinstance(leaf, np.ndarray | tf.Tensor) for leaf in leaves):
        batch = tf.nest.map_structure(np.asarray, batch)
    return tf.data.Dataset.from_tensors(batch)


class SingleBatchMethods:
    """`train_on_batch`, `test_on_batch` and `predict_on_batch` of `EstimatorModel` (a mixin).

    Example:

    ```python
    loss = model.train_on_batch({"x": x[:4]}, y[:4])    # one global step
    model.test_on_batch({"x": x[:4]}, y[:4], return_dict=True)
    model.predict_on_batch({"x": x[:4]})["probabilities"]
    ```
    """

    def train_on_batch(
        self,
        x: Any,
        y: Any = None,
        sample_weight: Any = None,
        class_weight: Any = None,
        return_dict: bool = False,
    ) -> float | dict:
        """Runs one training step of `model_fn` on the batch; returns its loss.

        Raises:
            NanLossError: the loss is NaN or Inf (as `fit` without `TerminateOnNaN`).
        """
        refuse_keras_arguments("train_on_batch", sample_weight=sample_weight, class_weight=class_weight)
        dataset = self._runner.distribute_input(_one_batch("train_on_batch", x, y), ModeKeys.TRAIN)
        with self._runner.host.running(ModeKeys.TRAIN):
            result, scalars = self._driver.run_one(ModeKeys.TRAIN, self.make_train_function(), iter(dataset), 1)
            self._driver.forget_iterator()
        self._driver.check_variables(result, scalars)
        loss = scalars[1] / max(scalars[2], 1e-12)
        if not math.isfinite(loss):
            raise NanLossError(
                f"NaN loss during training. The training loss became {loss} in train_on_batch "
                f"at global step {self.global_step}."
            )
        return {"loss": loss} if return_dict else loss

    def test_on_batch(
        self, x: Any, y: Any = None, sample_weight: Any = None, return_dict: bool = False
    ) -> float | dict:
        """Runs one evaluation step on the batch; the loss, or every metric with `return_dict`."""
        refuse_keras_arguments("test_on_batch", sample_weight=sample_weight)
        return self.evaluate(_one_batch("test_on_batch", x, y), verbose=0, return_dict=return_dict)

    def predict_on_batch(self, x: Any) -> Any:
        """Runs one prediction step on the batch; returns `model_fn`'s predictions as NumPy."""
        return self.predict(_one_batch("predict_on_batch", x, None), verbose=0)
