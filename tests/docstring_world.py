"""The toy world the docstring examples may name: the user's model_fn, input_fns, model_dir, data.

Each name is built on demand, fresh for each example (`world(names, model_dir)`), so no
example sees another's state. Only names an example's prose calls the user's are here.
"""

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import tensorflow as tf

import keras_tpu_estimator as kte

ROWS = 8
WEIGHTS = np.array([[1.0], [-2.0], [3.0], [0.5]], np.float32)


def data(rows: int = ROWS) -> tuple[np.ndarray, np.ndarray]:
    """`x` [rows, 4] and `y = x @ WEIGHTS` [rows, 1], float32."""
    x = np.random.RandomState(0).randn(rows, 4).astype(np.float32)
    return x, x @ WEIGHTS


def model_fn(features, labels, mode, params):
    """A 2-layer regression: predictions y, class, probabilities; eval metric accuracy."""
    hidden = tf.compat.v1.layers.dense(features["x"], 8, activation=tf.nn.relu, name="hidden")
    y = tf.compat.v1.layers.dense(hidden, 1, name="out")
    predictions = {"y": y, "probabilities": tf.sigmoid(y), "class": tf.cast(y[:, 0] > 0, tf.int64)}
    if mode == kte.ModeKeys.PREDICT:
        return kte.TPUEstimatorSpec(mode, predictions=predictions)
    loss = tf.compat.v1.losses.mean_squared_error(labels, y)
    if mode == kte.ModeKeys.EVAL:
        def metric_fn(labels, y):
            return {"accuracy": tf.compat.v1.metrics.accuracy(labels > 0, y > 0)}
        return kte.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, y]))
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.05)
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def input_fn(params):
    """ROWS rows of (features, labels), repeated, in batches of params['batch_size']."""
    x, y = data()
    dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, y))
    return dataset.repeat().batch(params["batch_size"], drop_remainder=True)


def predict_input_fn(params):
    """ROWS rows of features, once."""
    x, _ = data()
    return tf.data.Dataset.from_tensor_slices({"x": x}).batch(params["batch_size"], drop_remainder=True)


def serving_input_receiver_fn():
    """A raw `x` [None, 4] float32 input."""
    x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
    return kte.export.ServingInputReceiver({"x": x}, {"x": x})


def _config(model_dir: str) -> kte.RunConfig:
    return kte.RunConfig(model_dir=model_dir, tpu_config=kte.TPUConfig(iterations_per_loop=1))


def _batches() -> dict[str, int]:
    return {"train_batch_size": 4, "eval_batch_size": 4, "predict_batch_size": 4}


def _model(model_dir: str) -> kte.EstimatorModel:
    return kte.EstimatorModel(model_fn, config=_config(model_dir), **_batches())


def _estimator(model_dir: str) -> kte.TPUEstimator:
    return kte.TPUEstimator(model_fn, config=_config(model_dir), **_batches())


_FACTORIES: dict[str, Callable[[str], Any]] = {
    "model_fn": lambda d: model_fn,
    "input_fn": lambda d: input_fn,
    "train_input_fn": lambda d: input_fn,
    "eval_input_fn": lambda d: input_fn,
    "predict_input_fn": lambda d: predict_input_fn,
    "serving_input_receiver_fn": lambda d: serving_input_receiver_fn,
    "receiver_fn": lambda d: serving_input_receiver_fn,
    "model_dir": lambda d: d,
    "x": lambda d: data()[0],
    "y": lambda d: data()[1],
    "model": _model,
    "estimator": _estimator,
}


def world(names: Iterable[str], model_dir: str) -> dict[str, Any]:
    """The world's values of those of `names` it has, fresh; `model_dir` an empty directory."""
    return {name: _FACTORIES[name](model_dir) for name in names if name in _FACTORIES}
