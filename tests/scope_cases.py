"""One TPUEstimator program run with its strategy in scope, in `RunConfig`, or resolved.

A tf.compat.v1 `model_fn` in the style of public TPU programs (a
`get_variable` kernel, `tf.compat.v1.layers.dense`, `CrossShardOptimizer` on
the TPU path, a `training_hooks` hook recording the loss each step, TF1
metrics in `eval_metrics`). `run(estimator_module, model_dir, use_tpu)` trains
it for `STEPS` steps at a global batch of `BATCH`, evaluates and predicts, and
returns what it saw. `scripts/record_scope_numbers.py` runs it on the original
(TF 2.15, `use_tpu=False`: without a TPU the original's TPU path did not run)
and writes `tests/recorded_scope_numbers.py`; `tests/test_strategy_scope.py`
runs it here under each way of choosing the strategy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

BATCH = 16
STEPS = 4
FEATURES = 3
_TPU: list = []  # the `tpu` module make_estimator was given (its TPUEstimatorSpec)


def data(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(seed)
    x = rng.randn(rows, FEATURES).astype(np.float32)
    y = (x @ np.array([[1.0], [2.0], [-1.0]], np.float32) + 0.5).astype(np.float32)
    return x, y


def make_input_fn(rows: int, seed: int, repeat: bool) -> Any:
    def input_fn(params):
        x, y = data(rows, seed)
        dataset = tf.data.Dataset.from_tensor_slices((x, y))
        if repeat:
            dataset = dataset.repeat()
        return dataset.batch(params["batch_size"], drop_remainder=True)

    return input_fn


class LossRecorder(tf.compat.v1.train.SessionRunHook):
    """Records the loss tensor after each run (each step off a TPU)."""

    losses: list = []

    def __init__(self, loss: tf.Tensor):
        self._loss = loss

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._loss)

    def after_run(self, run_context, run_values):
        LossRecorder.losses.append(float(run_values.results))


def metric_fn(labels, predictions):
    return {
        "mae": tf.compat.v1.metrics.mean_absolute_error(labels, predictions),
        "rmse": tf.compat.v1.metrics.root_mean_squared_error(labels, predictions),
    }


def model_fn(features, labels, mode, params):
    hidden = tf.compat.v1.layers.dense(
        features, 4, activation=tf.nn.tanh, name="hidden",
        kernel_initializer=tf.compat.v1.constant_initializer(
            np.random.RandomState(7).randn(FEATURES, 4).astype(np.float32) * 0.5))
    kernel = tf.compat.v1.get_variable("out/kernel", [4, 1], initializer=tf.compat.v1.zeros_initializer())
    bias = tf.compat.v1.get_variable("out/bias", [1], initializer=tf.compat.v1.zeros_initializer())
    predictions = tf.matmul(hidden, kernel) + bias
    spec = _TPU[-1].TPUEstimatorSpec
    if mode == "infer":
        return spec(mode, predictions={"y": predictions})
    loss = tf.compat.v1.losses.mean_squared_error(labels, predictions)
    if mode == "eval":
        return spec(
            mode, loss=loss, eval_metrics=(metric_fn, [labels, predictions]))
    optimizer = tf.compat.v1.train.MomentumOptimizer(0.1, momentum=0.9)
    if params["use_tpu"]:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return spec(
        mode, loss=loss, train_op=train_op, training_hooks=[LossRecorder(loss)])


def make_estimator(tpu: Any, model_dir: str, use_tpu: bool, train_distribute: Any = None) -> Any:
    """`tpu` is `tf.compat.v1.estimator.tpu` on the original, `keras_tpu_estimator.estimator.tpu` here."""
    _TPU.append(tpu)
    config = tpu.RunConfig(
        model_dir=model_dir, save_checkpoints_steps=1000, train_distribute=train_distribute,
        tpu_config=tpu.TPUConfig(iterations_per_loop=1))
    return tpu.TPUEstimator(
        model_fn=model_fn, config=config, use_tpu=use_tpu,
        train_batch_size=BATCH, eval_batch_size=BATCH, predict_batch_size=BATCH)


def run(estimator: Any) -> dict:
    """Trains `STEPS` steps, evaluates 2 batches and predicts 1: the losses, metrics, predictions, weights."""
    LossRecorder.losses = []
    estimator.train(make_input_fn(64, 0, True), max_steps=STEPS)
    metrics = estimator.evaluate(make_input_fn(2 * BATCH, 1, False))
    predictions = [float(p["y"][0]) for p in estimator.predict(make_input_fn(BATCH, 2, False))]
    return {
        "losses": list(LossRecorder.losses),
        "evaluate": {key: float(value) for key, value in sorted(metrics.items())},
        "predictions": predictions,
        "out_kernel": [float(v) for v in np.ravel(estimator.get_variable_value("out/kernel"))],
    }
