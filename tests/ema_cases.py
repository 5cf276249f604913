"""EMA evaluation and Scaffold initialisers, as cases that run unchanged on both libraries.

A case is a function of an `api` namespace: `api.estimator` (`tf.compat.v1.estimator`
on the original, TF 2.15 + tensorflow-estimator; `keras_tpu_estimator.estimator`
here), `api.model_dir` (an empty temporary directory), `api.use_tpu` and
`api.strategy` (None, or a `MirroredStrategy` given as `train_distribute` /
`eval_distribute`). The original runs every case with `use_tpu=False`; this
library runs them on the CPU path and on the strategy path (default and
`MirroredStrategy`), compared with the same recorded values.

The program is tensorflow/tpu's ResNet / EfficientNet pattern on a tiny linear
model: TRAIN groups `ema.apply(trainable_variables())` after the optimizer's
update; EVAL and PREDICT return `scaffold_fn` with
`Scaffold(saver=Saver(ema.variables_to_restore()))`. `DEFAULTS` name -> case
returning JSON-able values; `scripts/record_ema_numbers.py` writes
`tests/recorded_ema_numbers.py`.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

Case = Callable[[Any], Any]
DEFAULTS: dict[str, Case] = {}

FEATURES = 3
DECAY = 0.5
X = np.linspace(-1.0, 1.0, 8 * FEATURES, dtype=np.float32).reshape(8, FEATURES)
Y = (X @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3).astype(np.float32)


def original_api(model_dir: str) -> types.SimpleNamespace:
    """The original's `api` namespace (TF 2.15 + tensorflow-estimator only)."""
    return types.SimpleNamespace(estimator=tf.compat.v1.estimator, model_dir=model_dir, use_tpu=False, strategy=None)


def _default(name: str) -> Callable[[Case], Case]:
    def register(case: Case) -> Case:
        assert name not in DEFAULTS, name
        DEFAULTS[name] = case
        return case

    return register


def train_input_fn(params: dict) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices(({"x": X}, Y)).repeat().batch(params["batch_size"], drop_remainder=True)


def eval_input_fn(params: dict) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices(({"x": X}, Y)).batch(params["batch_size"], drop_remainder=True)


def predict_input_fn(params: dict) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices({"x": X}).batch(params["batch_size"], drop_remainder=True)


def serving_input_receiver_fn(api: Any) -> Callable:
    def receiver_fn() -> Any:
        x = tf.compat.v1.placeholder(tf.float32, [None, FEATURES], name="x")
        return api.estimator.export.ServingInputReceiver({"x": x}, {"x": x})

    return receiver_fn


def linear(features: dict) -> tuple[Any, Any, Any]:
    """`(w, b, predictions)` of the linear model."""
    w = tf.compat.v1.get_variable("w", [FEATURES, 1], initializer=tf.compat.v1.zeros_initializer())
    b = tf.compat.v1.get_variable("b", [1], initializer=tf.compat.v1.constant_initializer(0.1))
    return w, b, tf.matmul(features["x"], w) + b


def ema_model_fn(style: str, api: Any) -> Callable:
    """The EMA program; `style` says where the Saver is built (`scaffold_fn`, `model_fn`, `estimator_spec`)."""
    tpu = api.estimator.tpu

    def model_fn(features, labels, mode, params):
        spec = tpu_model_fn(features, labels, mode, params)
        if style == "estimator_spec":  # a plain Estimator's model_fn: EstimatorSpec(scaffold=...)
            return spec.as_estimator_spec()
        return spec

    def tpu_model_fn(features, labels, mode, params):
        _, _, predictions = linear(features)
        global_step = tf.compat.v1.train.get_global_step()
        ema = tf.compat.v1.train.ExponentialMovingAverage(DECAY, num_updates=global_step)
        if mode == api.estimator.ModeKeys.PREDICT:
            loss = None
        else:
            loss = tf.compat.v1.losses.mean_squared_error(labels, predictions)
        if mode == api.estimator.ModeKeys.TRAIN:
            optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
            if api.use_tpu:
                optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
            train_op = optimizer.minimize(loss, global_step)
            with tf.control_dependencies([train_op]):
                train_op = tf.group(ema.apply(tf.compat.v1.trainable_variables()))
            return tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)
        restore = ema.variables_to_restore()
        scaffold_fn = None
        if style == "scaffold_fn":  # ResNet, EfficientNet, MnasNet: the Saver is built in scaffold_fn

            def scaffold_fn():
                return tf.compat.v1.train.Scaffold(saver=tf.compat.v1.train.Saver(restore))
        else:  # EfficientDet and others: built in model_fn
            saver = tf.compat.v1.train.Saver(restore, max_to_keep=1)

            def scaffold_fn():
                return tf.compat.v1.train.Scaffold(saver=saver)
        if mode == api.estimator.ModeKeys.EVAL:

            def metric_fn(labels, predictions):
                return {"mae": tf.compat.v1.metrics.mean_absolute_error(labels, predictions)}

            return tpu.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, predictions]),
                                        scaffold_fn=scaffold_fn)
        return tpu.TPUEstimatorSpec(mode, predictions={"y": predictions}, scaffold_fn=scaffold_fn)

    return model_fn


def estimator_for(api: Any, model_fn: Callable) -> Any:
    config = api.estimator.tpu.RunConfig(
        model_dir=api.model_dir, save_checkpoints_steps=100,
        tpu_config=api.estimator.tpu.TPUConfig(iterations_per_loop=2),
        train_distribute=api.strategy, eval_distribute=api.strategy,
    )
    return api.estimator.tpu.TPUEstimator(
        model_fn, config=config, use_tpu=api.use_tpu, train_batch_size=4, eval_batch_size=4,
        predict_batch_size=4, export_to_tpu=False,
    )


def plain_estimator_for(api: Any, model_fn: Callable) -> Any:
    config = api.estimator.RunConfig(model_dir=api.model_dir, train_distribute=api.strategy,
                                     eval_distribute=api.strategy)
    return api.estimator.Estimator(
        lambda features, labels, mode, params: model_fn(features, labels, mode, dict(params, batch_size=4)),
        config=config, params={})


def _floats(values: Any) -> list:
    return [round(float(v), 6) for v in np.ravel(values)]


def _batched(input_fn: Callable) -> Callable:
    return lambda: input_fn({"batch_size": 4})


def ema_run(api: Any, style: str, plain: bool = False) -> dict:
    """Train, evaluate (same and fresh estimator), predict, export and serve, train on."""
    make = plain_estimator_for if plain else estimator_for
    model_fn = ema_model_fn(style, api)
    fit = _batched(train_input_fn) if plain else train_input_fn
    evaluate = _batched(eval_input_fn) if plain else eval_input_fn
    predict = _batched(predict_input_fn) if plain else predict_input_fn
    estimator = make(api, model_fn)
    estimator.train(fit, max_steps=6)
    result: dict = {
        "raw_w": _floats(estimator.get_variable_value("w")),
        "shadow_w": _floats(estimator.get_variable_value("w/ExponentialMovingAverage")),
        "eval_after_train": {k: round(float(v), 5) for k, v in estimator.evaluate(evaluate, steps=2).items()},
    }
    fresh = make(api, model_fn)  # a new estimator: EVAL is its first call
    result["eval_first"] = {k: round(float(v), 5) for k, v in fresh.evaluate(evaluate, steps=2).items()}
    result["predictions"] = [_floats(p["y"]) for p in fresh.predict(predict)]
    export_dir = fresh.export_saved_model(os.path.join(api.model_dir, "export"), serving_input_receiver_fn(api))
    served = tf.saved_model.load(os.fsdecode(export_dir), tags=["serve"]).signatures["serving_default"]
    result["served"] = _floats(served(x=tf.constant(X[:2]))["y"])
    estimator.train(fit, steps=2)  # training goes on from the raw weights
    result["raw_w_after_more_training"] = _floats(estimator.get_variable_value("w"))
    return result


@_default("EMA: Saver built in scaffold_fn (ResNet)")
def ema_saver_in_scaffold_fn(api: Any) -> dict:
    return ema_run(api, "scaffold_fn")


@_default("EMA: Saver built in model_fn, scaffold_fn returns it")
def ema_saver_in_model_fn(api: Any) -> dict:
    return ema_run(api, "model_fn")


@_default("EMA: plain Estimator, EstimatorSpec(scaffold=Scaffold(saver=...))")
def ema_estimator_spec_scaffold(api: Any) -> dict:
    return ema_run(api, "estimator_spec", plain=True)


@_default("EMA: raw evaluation without a Scaffold saver")
def raw_evaluation(api: Any) -> dict:
    def model_fn(features, labels, mode, params):
        spec = ema_model_fn("scaffold_fn", api)(features, labels, mode, params)
        if mode != api.estimator.ModeKeys.TRAIN:
            spec = spec._replace(scaffold_fn=None)
        return spec

    estimator = estimator_for(api, model_fn)
    estimator.train(train_input_fn, max_steps=6)
    return {k: round(float(v), 5) for k, v in estimator.evaluate(eval_input_fn, steps=2).items()}


def resnet_bn_model_fn(api: Any) -> Callable:
    """tensorflow/tpu ResNet's EMA: `ema_vars` are the trainable variables and batch norm's moving statistics."""
    tpu = api.estimator.tpu

    def model_fn(features, labels, mode, params):
        training = mode == api.estimator.ModeKeys.TRAIN
        kernel = np.linspace(-1.0, 1.0, FEATURES * 4, dtype=np.float32).reshape(FEATURES, 4)
        hidden = tf.compat.v1.layers.dense(features["x"], 4, kernel_initializer=tf.compat.v1.constant_initializer(kernel))
        hidden = tf.compat.v1.layers.batch_normalization(hidden, momentum=0.5, training=training)
        predictions = tf.compat.v1.layers.dense(tf.nn.relu(hidden), 1,
                                                kernel_initializer=tf.compat.v1.constant_initializer(0.1))
        global_step = tf.compat.v1.train.get_global_step()
        ema = tf.compat.v1.train.ExponentialMovingAverage(DECAY, num_updates=global_step)
        ema_vars = tf.compat.v1.trainable_variables() + [
            v for v in tf.compat.v1.global_variables() if "moving_mean" in v.name or "moving_variance" in v.name]
        if mode == api.estimator.ModeKeys.PREDICT:
            restore = ema.variables_to_restore(ema_vars)
            return tpu.TPUEstimatorSpec(mode, predictions={"y": predictions}, scaffold_fn=lambda: (
                tf.compat.v1.train.Scaffold(saver=tf.compat.v1.train.Saver(restore))))
        loss = tf.compat.v1.losses.mean_squared_error(labels, predictions)
        if training:
            optimizer = tf.compat.v1.train.MomentumOptimizer(0.05, 0.9)
            if api.use_tpu:
                optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
            with tf.control_dependencies(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)):
                train_op = optimizer.minimize(loss, global_step)
            with tf.control_dependencies([train_op]):
                train_op = tf.group(ema.apply(ema_vars))
            return tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)
        restore = ema.variables_to_restore(ema_vars)

        def scaffold_fn():
            return tf.compat.v1.train.Scaffold(saver=tf.compat.v1.train.Saver(restore))

        return tpu.TPUEstimatorSpec(mode, loss=loss, scaffold_fn=scaffold_fn)

    return model_fn


@_default("EMA: ResNet's ema_vars with batch norm moving statistics")
def ema_resnet_batch_norm(api: Any) -> dict:
    estimator = estimator_for(api, resnet_bn_model_fn(api))
    estimator.train(train_input_fn, max_steps=6)
    fresh = estimator_for(api, resnet_bn_model_fn(api))
    return {
        "moving_mean": _floats(estimator.get_variable_value("batch_normalization/moving_mean")),
        "eval_first": {k: round(float(v), 5) for k, v in fresh.evaluate(eval_input_fn, steps=2).items()},
        "predictions": [_floats(p["y"]) for p in fresh.predict(predict_input_fn)],
    }
