"""TF1 summaries inside `model_fn`, run on the original (TF 2.15) and on this library alike.

Each case takes `api` (`estimator`: `tf.compat.v1.estimator` or `kte.estimator`;
`model_dir`; `strategy`: a `MirroredStrategy` or None) and returns the event
files' `{directory: {tag: [[step, value], ...]}}` (`train` is `model_dir`,
`eval` its evaluation directory). `scripts/record_summaries_numbers.py` records
the original's in `tests/recorded_summaries_numbers.py`.
"""

from __future__ import annotations

import glob
import os
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

CASES: dict[str, Callable[[types.SimpleNamespace], dict]] = {}
TF1_TAGS = ("my_loss", "my_predictions", "my_note", "my_image/image/0", "my_image/image/1", "train/train/lr")


def data() -> tuple[np.ndarray, np.ndarray]:
    x = (np.arange(64, dtype=np.float32).reshape(16, 4) % 7) / 7.0
    return x, x.sum(axis=1, keepdims=True) * 0.5 + 0.1


def input_fn(params: dict | None = None) -> tf.data.Dataset:
    x, y = data()
    batch = (params or {}).get("batch_size", 4)
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat().batch(batch, drop_remainder=True)


def make_model_fn(estimator: Any, tpu_spec: bool) -> Callable:
    """A linear model whose model_fn writes TF1 summaries, as EfficientDet's non-TPU branch does."""

    def model_fn(features, labels, mode, params):
        w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.constant_initializer(0.1))
        predictions = tf.matmul(features["x"], w)
        loss = tf.reduce_mean(tf.square(predictions - labels))
        tf.compat.v1.summary.scalar("my_loss", loss)
        tf.compat.v1.summary.histogram("my_predictions", predictions)
        tf.compat.v1.summary.text("my_note", tf.constant("step summary"))
        tf.compat.v1.summary.image("my_image", tf.reshape(features["x"], [-1, 2, 2, 1]), max_outputs=2)
        # Not of the global step: the original's read of it raced the train_op's increment
        # (0.1 / (1 + step) gave the step before the update at most steps, after it at some).
        tf.compat.v1.summary.scalar("lr", 0.1 * tf.reduce_mean(labels), family="train")
        train_op = None
        if mode == "train":
            optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
            train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
        if tpu_spec:
            metrics = (lambda y, p: {"mae": tf.compat.v1.metrics.mean_absolute_error(y, p)}, [labels, predictions])
            return estimator.tpu.TPUEstimatorSpec(
                mode, loss=loss, train_op=train_op, eval_metrics=metrics if mode == "eval" else None)
        metric_ops = {"mae": tf.compat.v1.metrics.mean_absolute_error(labels, predictions)}
        return estimator.EstimatorSpec(
            mode, loss=loss, train_op=train_op, eval_metric_ops=metric_ops if mode == "eval" else None)

    return model_fn


def _value(value: Any) -> Any:
    if value.HasField("simple_value"):
        return round(float(value.simple_value), 5)
    if value.HasField("histo"):
        h = value.histo
        return {"min": round(h.min, 5), "max": round(h.max, 5), "num": h.num, "sum": round(h.sum, 5),
                "sum_squares": round(h.sum_squares, 5), "buckets": len(h.bucket)}
    if value.HasField("image"):  # not the PNG bytes: zlib versions may differ
        return {"height": value.image.height, "width": value.image.width, "colorspace": value.image.colorspace}
    array = tf.make_ndarray(value.tensor)
    return array.item().decode() if array.dtype == object else round(float(array), 5)


def events(directory: str) -> dict[str, list]:
    """`{tag: [[step, value], ...]}` of the event files directly in `directory`."""
    found: dict[str, list] = {}
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                found.setdefault(value.tag, []).append([int(event.step), _value(value)])
    return {tag: sorted(found[tag], key=lambda pair: pair[0]) for tag in sorted(found)}


def all_events(model_dir: str) -> dict[str, dict]:
    result = {"train": events(model_dir)}
    for sub in sorted(glob.glob(os.path.join(model_dir, "eval*"))):
        result[os.path.basename(sub)] = events(sub)
    return result


def _case(name: str) -> Callable:
    def register(case: Callable) -> Callable:
        CASES[name] = case
        return case

    return register


def _estimator(api: Any, save_summary_steps: int = 2, distribute: bool = False) -> Any:
    strategy = api.strategy if distribute else None
    config = api.estimator.RunConfig(model_dir=api.model_dir, save_summary_steps=save_summary_steps,
                                     train_distribute=strategy, eval_distribute=strategy)
    return api.estimator.Estimator(make_model_fn(api.estimator, False), config=config, params={})


def _tpu_estimator(api: Any, save_summary_steps: int = 2, iterations: int = 1, distribute: bool = False) -> Any:
    config = api.estimator.tpu.RunConfig(
        model_dir=api.model_dir, save_summary_steps=save_summary_steps,
        train_distribute=api.strategy if distribute else None,
        tpu_config=api.estimator.tpu.TPUConfig(iterations_per_loop=iterations))
    return api.estimator.tpu.TPUEstimator(make_model_fn(api.estimator, True), config=config, use_tpu=False,
                                          train_batch_size=4, eval_batch_size=4)


@_case("Estimator, save_summary_steps=2, 7 steps, evaluate")
def _plain(api):
    estimator = _estimator(api)
    estimator.train(lambda: input_fn(), steps=7)
    estimator.evaluate(lambda: input_fn(), steps=3)
    return all_events(api.model_dir)


@_case("Estimator, save_summary_steps=4, 6 steps")
def _plain_no_last(api):
    _estimator(api, save_summary_steps=4).train(lambda: input_fn(), steps=6)
    return all_events(api.model_dir)


@_case("TPUEstimator use_tpu=False, iterations_per_loop=1")
def _cpu_path(api):
    _tpu_estimator(api).train(input_fn, steps=7)
    return all_events(api.model_dir)


@_case("TPUEstimator use_tpu=False, iterations_per_loop=3, save_summary_steps=4, evaluate")
def _cpu_path_loops(api):
    estimator = _tpu_estimator(api, save_summary_steps=4, iterations=3)
    estimator.train(input_fn, steps=9)
    estimator.evaluate(input_fn, steps=3)
    return all_events(api.model_dir)


@_case("TPUEstimator use_tpu=False, two train calls (3 + 4 steps)")
def _cpu_path_resumed(api):
    _tpu_estimator(api).train(input_fn, steps=3)
    _tpu_estimator(api).train(input_fn, steps=4)
    return all_events(api.model_dir)


STRATEGY: dict[str, Callable] = {}


def _strategy_case(name: str) -> Callable:
    def register(case: Callable) -> Callable:
        STRATEGY[name] = case
        return case

    return register


@_strategy_case("Estimator train_distribute, save_summary_steps=2, 7 steps")
def _plain_mirrored(api):
    _estimator(api, distribute=True).train(lambda: input_fn(), steps=7)
    return all_events(api.model_dir)


@_strategy_case("TPUEstimator use_tpu=False train_distribute, iterations_per_loop=3")
def _cpu_path_mirrored(api):
    _tpu_estimator(api, iterations=3, distribute=True).train(input_fn, steps=7)
    return all_events(api.model_dir)
