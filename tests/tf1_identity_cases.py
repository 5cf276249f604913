"""TF1 identity inside `model_fn`, run on the original (TF 2.15) and on this library.

Each case takes `api` (a namespace with `TPUEstimator`, `RunConfig`, `TPUConfig`,
`TPUEstimatorSpec`, and optionally `run_on`, a strategy for `RunConfig(train_distribute=...)`), a fresh `model_dir` and `use_tpu`, runs a small program as a
public TPU program writes it (`tf.compat.v1` variables, `v.op.name` maps, sets of
tensors, an `ExponentialMovingAverage` of `global_variables()`), and returns what it
saw as JSON-able values. `scripts/record_tf1_identity_numbers.py` records them on the
original's CPU path; `tests/test_tf1_identity.py` compares.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

BATCH = 8
CASES: dict[str, Callable[..., Any]] = {}


def case(function: Callable[..., Any]) -> Callable[..., Any]:
    CASES[function.__name__] = function
    return function


def original_api() -> types.SimpleNamespace:
    tpu = tf.compat.v1.estimator.tpu
    return types.SimpleNamespace(TPUEstimator=tpu.TPUEstimator, RunConfig=tpu.RunConfig,
                                 TPUConfig=tpu.TPUConfig, TPUEstimatorSpec=tpu.TPUEstimatorSpec)


def input_fn(params: dict) -> tf.data.Dataset:
    x = (np.arange(64, dtype=np.float32).reshape(32, 2) % 7) / 7
    y = x @ np.array([[0.5], [-1.5]], np.float32) + 0.25
    dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, y))
    return dataset.repeat().batch(params["batch_size"], drop_remainder=True)


def _estimator(api: Any, model_fn: Callable, model_dir: str, use_tpu: bool) -> Any:
    strategy = getattr(api, "run_on", None)  # this library's strategy path: the test's strategy
    distribute = {"train_distribute": strategy, "eval_distribute": strategy} if strategy else {}
    config = api.RunConfig(model_dir=model_dir, tpu_config=api.TPUConfig(iterations_per_loop=2), **distribute)
    return api.TPUEstimator(model_fn=model_fn, config=config, use_tpu=use_tpu,
                            train_batch_size=BATCH, eval_batch_size=BATCH)


def _linear(features: Any) -> tuple[Any, Any]:
    w = tf.compat.v1.get_variable("dense/w", [2, 1], initializer=tf.compat.v1.zeros_initializer())
    b = tf.compat.v1.get_variable("dense/b", [1], initializer=tf.compat.v1.zeros_initializer())
    return tf.matmul(features["x"], w) + b, w


def _trained_twice(api: Any, model_fn: Callable, model_dir: str, use_tpu: bool) -> dict:
    """Trains in two calls (two traces of TRAIN); the checkpoint's names and the `dense/` values."""
    estimator = _estimator(api, model_fn, model_dir, use_tpu)
    estimator.train(input_fn, max_steps=4)
    estimator.train(input_fn, max_steps=6)
    names = sorted(name for name, _ in tf.train.list_variables(estimator.latest_checkpoint()))
    values = {name: _rounded(estimator.get_variable_value(name)) for name in names if name.startswith("dense/")}
    return {"checkpoint_names": names, "values": values}


def _rounded(values: Any) -> Any:
    return np.round(np.asarray(values, np.float64), 5).tolist()


@case
def names_sets_and_fresh_collections(api: Any, model_dir: str, use_tpu: bool) -> dict:
    """`v.op.name` maps, tensors in sets and dicts, and what `global_variables()` holds when model_fn begins."""
    seen: list = []

    def model_fn(features, labels, mode, params):
        at_start = sorted(v.op.name for v in tf.compat.v1.global_variables())
        predictions, w = _linear(features)
        loss = tf.reduce_mean(tf.square(predictions - labels))
        by_name = {v.op.name: v for v in tf.compat.v1.trainable_variables()}
        members = {loss, predictions, w}
        keyed = {w: "w", loss: "loss"}
        step = tf.compat.v1.train.get_global_step()
        seen.append([mode, at_start, sorted(by_name), len(members), keyed[w], loss in members,
                     w.op.name, step.op.name])
        train_op = None
        if mode == "train":
            optimizer = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9)
            train_op = optimizer.minimize(loss, step)
        return api.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    estimator = _estimator(api, model_fn, model_dir, use_tpu)
    estimator.train(input_fn, max_steps=4)
    estimator.train(input_fn, max_steps=6)
    result = estimator.evaluate(input_fn, steps=2)
    distinct = sorted({tuple(map(str, s)) for s in seen})
    return {"seen": [list(s) for s in distinct], "loss": round(float(result["loss"]), 5),
            "global_step": int(result["global_step"])}


@case
def init_from_checkpoint_by_op_name(api: Any, model_dir: str, use_tpu: bool) -> dict:
    """`init_from_checkpoint(ckpt, {v.op.name: v})`, as BERT-style programs load a pretrained model."""

    def train_fn(features, labels, mode, params):
        predictions, _ = _linear(features)
        loss = tf.reduce_mean(tf.square(predictions - labels))
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.2)
        return api.TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, tf.compat.v1.train.get_global_step()))

    first = _estimator(api, train_fn, os.path.join(model_dir, "first"), use_tpu)
    first.train(input_fn, max_steps=5)
    checkpoint = first.latest_checkpoint()

    def warm_fn(features, labels, mode, params):
        predictions, _ = _linear(features)
        loss = tf.reduce_mean(tf.square(predictions - labels))
        assignment = {v.op.name: v for v in tf.compat.v1.trainable_variables()}
        tf.compat.v1.train.init_from_checkpoint(checkpoint, assignment)
        return api.TPUEstimatorSpec(mode, loss=loss)

    second = _estimator(api, warm_fn, os.path.join(model_dir, "second"), use_tpu)
    loaded = second.evaluate(input_fn, steps=1)
    trained = first.evaluate(input_fn, steps=1)
    return {"loaded_loss": round(float(loaded["loss"]), 5), "trained_loss": round(float(trained["loss"]), 5)}


@case
def moving_average_as_resnet_picks_it(api: Any, model_dir: str, use_tpu: bool) -> dict:
    """ResNet's EMA: trainable variables plus every global `moving_*` variable, trained in two calls (two traces).

    Were `global_variables()` to hold the shadows on the second trace, the EMA would
    average its own `moving_scale/ExponentialMovingAverage`.
    """

    def model_fn(features, labels, mode, params):
        predictions, _ = _linear(features)
        loss = tf.reduce_mean(tf.square(predictions - labels))
        scale = tf.compat.v1.get_variable("dense/moving_scale", [], trainable=False,
                                          initializer=tf.compat.v1.ones_initializer())
        step = tf.compat.v1.train.get_global_step()
        train_op = None
        if mode == "train":
            update = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9).minimize(loss, step)
            tracked = scale.assign(0.5 * scale + 0.25)  # the same on every replica
            averaged = tf.compat.v1.trainable_variables() + [
                v for v in tf.compat.v1.global_variables() if "moving_" in v.op.name
            ]
            ema = tf.compat.v1.train.ExponentialMovingAverage(0.5)
            with tf.control_dependencies([update, tracked]):
                train_op = ema.apply(averaged)
        return api.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    return _trained_twice(api, model_fn, model_dir, use_tpu)


@case
def moving_average_of_global_variables(api: Any, model_dir: str, use_tpu: bool) -> dict:
    """`ema.apply(global_variables())` after `minimize`: the optimizer's slots (made in `merge_call`) averaged too."""

    def model_fn(features, labels, mode, params):
        predictions, _ = _linear(features)
        loss = tf.reduce_mean(tf.square(predictions - labels))
        step = tf.compat.v1.train.get_global_step()
        train_op = None
        if mode == "train":
            update = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9).minimize(loss, step)
            averaged = [v for v in tf.compat.v1.global_variables() if v.op.name != "global_step"]
            ema = tf.compat.v1.train.ExponentialMovingAverage(0.5)
            with tf.control_dependencies([update]):
                train_op = ema.apply(averaged)
        return api.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    return _trained_twice(api, model_fn, model_dir, use_tpu)


def paired_input_fn(params: dict) -> tf.data.Dataset:
    """Each global batch of 8 is one pair of rows 4 times: every replica's share has the batch's statistics."""
    pairs = (np.arange(16, dtype=np.float32).reshape(4, 2, 2) % 5) / 5
    x = np.concatenate([np.tile(pair, (BATCH // 2, 1)) for pair in pairs])
    y = x @ np.array([[1.0], [-0.5]], np.float32)
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat().batch(params["batch_size"], drop_remainder=True)


@case
def moving_average_of_batch_norm_statistics(api: Any, model_dir: str, use_tpu: bool) -> dict:
    """tf.compat.v1 batch norm's `moving_mean` found by `'moving_' in v.op.name` in every trace, and averaged."""

    def model_fn(features, labels, mode, params):
        net = tf.compat.v1.layers.dense(features["x"], 3, name="dense",
                                        kernel_initializer=tf.compat.v1.constant_initializer(0.5))
        net = tf.compat.v1.layers.batch_normalization(net, training=mode == "train", momentum=0.5, name="bn")
        loss = tf.reduce_mean(tf.square(tf.reduce_sum(net, 1, keepdims=True) - labels))
        step = tf.compat.v1.train.get_global_step()
        train_op = None
        if mode == "train":
            with tf.control_dependencies(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)):
                update = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, step)
            averaged = tf.compat.v1.trainable_variables() + [
                v for v in tf.compat.v1.global_variables() if "moving_" in v.op.name
            ]
            with tf.control_dependencies([update]):
                train_op = tf.compat.v1.train.ExponentialMovingAverage(0.5).apply(averaged)
        return api.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    estimator = _estimator(api, model_fn, model_dir, use_tpu)
    estimator.train(paired_input_fn, max_steps=4)
    names = sorted(name for name, _ in tf.train.list_variables(estimator.latest_checkpoint()))
    values = {name: _rounded(estimator.get_variable_value(name)) for name in names if name.startswith("bn/moving")}
    return {"checkpoint_names": names, "values": values}
