"""The plain `tf.estimator.Estimator`, as cases that run unchanged on both libraries.

Each case is a function of an `api` namespace:

- `api.estimator`: `tf.compat.v1.estimator` on the original (TF 2.15 +
  tensorflow-estimator 2.15), `keras_tpu_estimator.estimator` here;
- `api.load_global_step`: `_load_global_step_from_checkpoint_dir` of
  `tensorflow.python.estimator.estimator` / `keras_tpu_estimator.plain_estimator`;
- `api.model_dir`: an empty temporary directory of the case's own;
- `api.strategy`: a `MirroredStrategy` over 4 logical CPUs (STRATEGY cases only), else None.

`ERRORS`: each case makes one call the original rejects; recorded as
`[exception type, normalised message]`. `DEFAULTS` and `STRATEGY`: each
returns a JSON-able value. `scripts/record_estimator_numbers.py` runs them on
the original and writes `tests/recorded_estimator_numbers.py`;
`tests/test_plain_estimator.py` and `tests/test_cpu_path_distribute.py` compare.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

try:
    from tests.original_api_cases import normalise, tf_config
except ImportError:  # run from scripts/ with tests/ on sys.path
    from original_api_cases import normalise, tf_config

Case = Callable[[Any], Any]
ERRORS: dict[str, Case] = {}
DEFAULTS: dict[str, Case] = {}
STRATEGY: dict[str, Case] = {}
__all__ = ["DEFAULTS", "ERRORS", "STRATEGY", "normalise", "original_api"]


def original_api(model_dir: str, strategy: Any = None) -> types.SimpleNamespace:
    """The original's `api` namespace (TF 2.15 + tensorflow-estimator only)."""
    from tensorflow.python.estimator import estimator as estimator_module

    return types.SimpleNamespace(estimator=tf.compat.v1.estimator, model_dir=model_dir, strategy=strategy,
                                 load_global_step=estimator_module._load_global_step_from_checkpoint_dir)


def _register(table: dict[str, Case], name: str) -> Callable[[Case], Case]:
    def register(case: Case) -> Case:
        assert name not in table, name
        table[name] = case
        return case

    return register


def _error(name: str) -> Callable[[Case], Case]:
    return _register(ERRORS, name)


def _default(name: str) -> Callable[[Case], Case]:
    return _register(DEFAULTS, name)


def _strategy(name: str) -> Callable[[Case], Case]:
    return _register(STRATEGY, name)


# --- a small program: 4 features, 3 classes, constant initial weights ------------------------------
FEATURES, CLASSES = 4, 3
KERNEL = np.linspace(-0.5, 0.5, FEATURES * CLASSES, dtype=np.float32).reshape(FEATURES, CLASSES)


def data(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(seed)
    x = rng.randn(rows, FEATURES).astype(np.float32)
    return x, (np.argmax(x[:, :CLASSES], axis=1)).astype(np.int64)


def input_fn_of(rows: int = 16, batch: int = 4, seed: int = 0, repeat: bool = False) -> Callable:
    def input_fn(params):
        del params
        x, y = data(rows, seed)
        dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, y))
        return (dataset.repeat() if repeat else dataset).batch(batch)

    return input_fn


def make_model_fn(spec: Any, hooks: list | None = None, extra_metrics: Callable | None = None,
                  spec_args: dict | None = None) -> Callable:
    """A `model_fn` whose spec class, hooks and extra metrics are closed over (params are deep-copied)."""

    def model_fn(features, labels, mode, params):
        logits = tf.compat.v1.layers.dense(features["x"], CLASSES, name="logits",
                                           kernel_initializer=tf.compat.v1.constant_initializer(KERNEL))
        classes = tf.argmax(logits, axis=1)
        if mode == "infer":
            predictions = {"classes": classes, "probabilities": tf.nn.softmax(logits)}
            return spec(mode, predictions=predictions, prediction_hooks=hooks or [])
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
        if mode == "eval":
            def metric_fn(labels, classes):
                metrics = {"accuracy": tf.compat.v1.metrics.accuracy(labels, classes)}
                return {**metrics, **(extra_metrics(labels, classes) if extra_metrics else {})}

            if spec.__name__ == "TPUEstimatorSpec":
                return spec(mode, loss=loss, eval_metrics=(metric_fn, [labels, classes]))
            return spec(mode, loss=loss, eval_metric_ops=metric_fn(labels, classes), evaluation_hooks=hooks or [])
        train_op = tf.compat.v1.train.GradientDescentOptimizer(params.get("learning_rate", 0.5)).minimize(
            loss, global_step=tf.compat.v1.train.get_global_step())
        return spec(mode, loss=loss, train_op=train_op, training_hooks=hooks or [], **(spec_args or {}))

    return model_fn


def estimator_of(api: Any, fn: Callable | None = None, config: Any = None, spec: Any = None,
                 hooks: list | None = None, extra_metrics: Callable | None = None,
                 spec_args: dict | None = None, **params: Any) -> Any:
    fn = fn or make_model_fn(spec or api.estimator.EstimatorSpec, hooks, extra_metrics, spec_args)
    config = config or api.estimator.RunConfig(
        model_dir=api.model_dir, train_distribute=api.strategy, eval_distribute=api.strategy)
    return api.estimator.Estimator(fn, config=config, params=params or None)


def plain(results: dict) -> dict:
    """Evaluation results as `{key: [NumPy type name, value]}`."""
    return {key: [type(value).__name__, value.item()] for key, value in sorted(results.items())}


class CountingHook(tf.compat.v1.train.SessionRunHook):
    """Counts `begin`, `after_create_session`, `after_run` and `end` calls."""

    def __init__(self):
        self.calls = {"begin": 0, "after_create_session": 0, "after_run": 0, "end": 0}

    def begin(self):
        self.calls["begin"] += 1

    def after_create_session(self, session, coord):
        self.calls["after_create_session"] += 1

    def after_run(self, run_context, run_values):
        self.calls["after_run"] += 1

    def end(self, session):
        self.calls["end"] += 1


# --- errors --------------------------------------------------------------------------------------
@_error("constructor.model_fn=None")
def _(api):
    api.estimator.Estimator(None, model_dir=api.model_dir)


@_error("constructor.config=object()")
def _(api):
    api.estimator.Estimator(make_model_fn(None), config=object())


@_error("constructor.model_fn without features")
def _(api):
    api.estimator.Estimator(lambda inputs, labels: None, model_dir=api.model_dir)


@_error("constructor.params given, model_fn without params")
def _(api):
    api.estimator.Estimator(lambda features, labels, mode: None, model_dir=api.model_dir, params={"a": 1})


@_error("constructor.model_fn with an unexpected argument")
def _(api):
    api.estimator.Estimator(lambda features, labels, hparams: None, model_dir=api.model_dir)


@_error("constructor.model_dir differs from config.model_dir")
def _(api):
    config = api.estimator.RunConfig(model_dir=os.path.join(api.model_dir, "a"))
    api.estimator.Estimator(make_model_fn(None), model_dir=os.path.join(api.model_dir, "b"), config=config)


@_error("constructor.subclass overrides train")
def _(api):
    class Overriding(api.estimator.Estimator):
        def train(self, input_fn, hooks=None, steps=None, max_steps=None, saving_listeners=None):
            return self

    Overriding(make_model_fn(api.estimator.EstimatorSpec), model_dir=api.model_dir)


@_error("train.model_fn returns a TPUEstimatorSpec")
def _(api):
    estimator_of(api, spec=api.estimator.tpu.TPUEstimatorSpec).train(input_fn_of(), steps=1)


@_error("train.model_fn returns a dict")
def _(api):
    estimator_of(api, fn=lambda features, labels, mode, params: {"loss": 1.0}).train(input_fn_of(), steps=1)


@_error("train.steps and max_steps")
def _(api):
    estimator_of(api).train(input_fn_of(), steps=1, max_steps=2)


@_error("train.steps=0")
def _(api):
    estimator_of(api).train(input_fn_of(), steps=0)


@_error("train.max_steps=-1")
def _(api):
    estimator_of(api).train(input_fn_of(), max_steps=-1)


@_error("train.hooks=[object()]")
def _(api):
    estimator_of(api).train(input_fn_of(), steps=1, hooks=[object()])


@_error("train.saving_listeners=[object()]")
def _(api):
    estimator_of(api).train(input_fn_of(), steps=1, saving_listeners=[object()])


@_error("train.saving_listeners without a checkpoint schedule")
def _(api):
    config = api.estimator.RunConfig(model_dir=api.model_dir, save_checkpoints_steps=None,
                                     save_checkpoints_secs=None)
    estimator_of(api, config=config).train(
        input_fn_of(), steps=1, saving_listeners=[tf.compat.v1.train.CheckpointSaverListener()])


@_error("train.input_fn returns labels, model_fn takes none")
def _(api):
    def no_labels(features, mode, params):
        return make_model_fn(api.estimator.EstimatorSpec)(features, None, mode, params)

    estimator_of(api, fn=no_labels).train(input_fn_of(), steps=1)


@_error("train.on an evaluator task")
def _(api):
    cluster = {"chief": ["host0:2222"], "worker": ["host1:2222"]}
    with tf_config({"cluster": cluster, "task": {"type": "evaluator", "index": 0}}):
        config = api.estimator.RunConfig(model_dir=api.model_dir)
    try:
        estimator_of(api, config=config).train(input_fn_of(), steps=1)
    except ValueError as error:  # the config's repr differs between the libraries
        raise ValueError(str(error).split("Current configuration")[0]) from None


@_error("evaluate.steps=0")
def _(api):
    estimator_of(api).evaluate(input_fn_of(), steps=0)


@_error("evaluate.eval_metric_ops has loss")
def _(api):
    estimator_of(api, extra_metrics=lambda labels, classes: {
        "loss": tf.compat.v1.metrics.mean(tf.cast(labels, tf.float32))}).evaluate(input_fn_of())


@_error("evaluate.eval_metric_ops has global_step")
def _(api):
    estimator_of(api, extra_metrics=lambda labels, classes: {
        "global_step": tf.compat.v1.metrics.mean(tf.cast(labels, tf.float32))}).evaluate(input_fn_of())


@_error("get_variable_value before train")
def _(api):
    estimator_of(api).get_variable_value("logits/bias")


@_error("get_variable_names before train")
def _(api):
    estimator_of(api).get_variable_names()


@_error("predict.predict_keys of tensor predictions")
def _(api):
    def tensor_predictions(features, labels, mode, params):
        return api.estimator.EstimatorSpec(mode, predictions=features["x"])

    next(estimator_of(api, fn=tensor_predictions).predict(input_fn_of(), predict_keys=["x"]))


@_error("predict.predict_keys none of the predictions")
def _(api):
    next(estimator_of(api).predict(input_fn_of(), predict_keys=["nope"]))


@_error("export_saved_model before train")
def _(api):
    estimator_of(api).export_saved_model(os.path.join(api.model_dir, "export"), serving_input_receiver_fn(api))


@_error("export_saved_model without a receiver fn")
def _(api):
    estimator_of(api).export_saved_model(os.path.join(api.model_dir, "export"), None)


def serving_input_receiver_fn(api: Any) -> Callable:
    def receiver_fn():
        x = tf.compat.v1.placeholder(tf.float32, [None, FEATURES], name="x")
        return api.estimator.export.ServingInputReceiver({"x": x}, {"x": x})

    return receiver_fn


# --- results -------------------------------------------------------------------------------------
@_default("load_global_step: no checkpoint, then after train(steps=3)")
def _(api):
    before = api.load_global_step(api.model_dir)
    estimator_of(api).train(input_fn_of(repeat=True), steps=3)
    after = api.load_global_step(api.model_dir)
    return [[type(before).__name__, int(before)], [type(after).__name__, int(after)]]


@_default("train, evaluate, predict, export: values and types")
def _(api):
    estimator = estimator_of(api)
    estimator.train(input_fn_of(repeat=True), steps=2.5)  # the stop hook ends at the first step >= 2.5
    results = plain(estimator.evaluate(input_fn_of(rows=12, seed=1)))
    predictions = list(estimator.predict(input_fn_of(rows=3, seed=2)))
    batches = list(estimator.predict(input_fn_of(rows=6, batch=4, seed=2), yield_single_examples=False))
    selected = list(estimator.predict(input_fn_of(rows=2, seed=2), predict_keys=["classes"]))
    path = estimator.export_saved_model(os.path.join(api.model_dir, "export"), serving_input_receiver_fn(api))
    served = tf.saved_model.load(path.decode()).signatures["serving_default"](x=tf.constant(data(2, 3)[0]))
    return {
        "evaluate": results,
        "predictions": [{key: np.asarray(value).tolist() for key, value in sorted(p.items())} for p in predictions],
        "prediction_types": sorted({type(value).__name__ for p in predictions for value in p.values()}),
        "batch_rows": [[key, len(value)] for batch in batches for key, value in sorted(batch.items())],
        "selected_keys": sorted({key for p in selected for key in p}),
        "export_path_type": type(path).__name__,
        "served_keys": sorted(served),
        "variables": estimator.get_variable_names(),
        "bias": estimator.get_variable_value("logits/bias").tolist(),
        "latest": os.path.basename(estimator.latest_checkpoint()),
        "eval_dir": os.path.relpath(estimator.eval_dir("x"), api.model_dir),
        "is_estimator": isinstance(estimator, api.estimator.Estimator),
    }


@_default("evaluate without a checkpoint, and on a named set")
def _(api):
    estimator = estimator_of(api)
    first = plain(estimator.evaluate(input_fn_of(rows=8, seed=1), name="holdout"))
    return {"results": first, "eval_dirs": sorted(os.listdir(api.model_dir))}


@_default("evaluate(steps=1.5) runs 2 steps; steps=None runs to the end")
def _(api):
    estimator = estimator_of(api)
    return [plain(estimator.evaluate(input_fn_of(rows=16, seed=1), steps=1.5)),
            plain(estimator.evaluate(input_fn_of(rows=16, seed=1)))]


@_default("train(max_steps) resumes, and returns at once when reached")
def _(api):
    estimator = estimator_of(api)
    estimator.train(input_fn_of(repeat=True), max_steps=2)
    estimator.train(input_fn_of(repeat=True), max_steps=3)
    again = estimator.train(input_fn_of(repeat=True), max_steps=3)
    return [int(estimator.get_variable_value("global_step")), again is estimator]


@_default("train on a finite input runs to its end")
def _(api):
    estimator = estimator_of(api)
    estimator.train(input_fn_of(rows=10, batch=4))  # 3 batches: 4, 4, 2
    return [int(estimator.get_variable_value("global_step")), estimator.get_variable_value("logits/bias").tolist()]


@_default("params: as given (batch_size allowed), no keys added; input_fn args it declares")
def _(api):
    seen = {}

    def recording_model_fn(features, labels, mode, params, config):
        seen.setdefault("model_fn", sorted(params))
        seen.setdefault("config", type(config).__name__)
        return make_model_fn(api.estimator.EstimatorSpec)(features, labels, mode, params)

    def recording_input_fn(mode, config, params):
        seen.setdefault("input_fn", [mode, type(config).__name__, sorted(params)])
        return input_fn_of(batch=params["batch_size"], repeat=True)(params)

    def bare_input_fn():
        x, y = data(8)
        return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).batch(4)

    estimator = estimator_of(api, fn=recording_model_fn, batch_size=2)
    estimator.train(recording_input_fn, steps=1)
    estimator.train(bare_input_fn, steps=1)
    params = estimator.params
    params["batch_size"] = 99  # a copy
    return {**seen, "params": sorted(estimator.params), "batch_size": estimator.params["batch_size"]}


@_default("model_fn of features and labels only")
def _(api):
    def two_args(features, labels):
        logits = tf.compat.v1.layers.dense(features["x"], CLASSES, name="logits",
                                           kernel_initializer=tf.compat.v1.constant_initializer(KERNEL))
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.5).minimize(
            loss, global_step=tf.compat.v1.train.get_global_step())
        return api.estimator.EstimatorSpec("train", loss=loss, train_op=train_op)

    estimator = api.estimator.Estimator(two_args, model_dir=api.model_dir)
    estimator.train(input_fn_of(repeat=True), steps=2)
    return estimator.get_variable_value("logits/bias").tolist()


@_default("spec hooks: training (and chief), evaluation and prediction hooks run")
def _(api):
    train_hook, chief_hook, eval_hook, predict_hook, arg_hook = (CountingHook() for _ in range(5))
    estimator_of(api, hooks=[train_hook], spec_args={"training_chief_hooks": [chief_hook]}).train(
        input_fn_of(repeat=True), steps=3, hooks=[arg_hook])
    estimator_of(api, hooks=[eval_hook]).evaluate(input_fn_of(rows=8))
    list(estimator_of(api, hooks=[predict_hook]).predict(input_fn_of(rows=8)))
    return {"train": train_hook.calls, "chief": chief_hook.calls, "train(hooks=)": arg_hook.calls,
            "eval": eval_hook.calls, "predict": predict_hook.calls}


@_default("the model_fn property: the user's model_fn with the Estimator's params")
def _(api):
    estimator = estimator_of(api)
    with tf.Graph().as_default():
        tf.compat.v1.train.create_global_step()
        x, y = data(4)
        spec = estimator.model_fn({"x": tf.constant(x)}, tf.constant(y), "train", estimator.config)
        return [type(spec).__name__, spec.loss.shape.as_list(), spec.mode]


@_default("TPUEstimator is an Estimator")
def _(api):
    config = api.estimator.tpu.RunConfig(model_dir=api.model_dir)
    tpu = api.estimator.tpu.TPUEstimator(make_model_fn(api.estimator.tpu.TPUEstimatorSpec), config=config,
                                         use_tpu=False, train_batch_size=4)
    return [isinstance(tpu, api.estimator.Estimator), os.path.relpath(tpu.eval_dir(), api.model_dir)]


# --- on a MirroredStrategy over 4 logical CPUs ----------------------------------------------------
@_strategy("Estimator on 4 replicas: input_fn's InputContext, training, evaluation")
def _(api):
    contexts = []

    def context_input_fn(params, input_context=None):
        contexts.append(None if input_context is None else [
            input_context.num_input_pipelines, input_context.input_pipeline_id,
            input_context.num_replicas_in_sync, input_context.get_per_replica_batch_size(16)])
        return input_fn_of(rows=64, batch=4, repeat=params["repeat"])(params)

    estimator = estimator_of(api, repeat=True)
    estimator.train(context_input_fn, steps=3)
    trained = estimator.get_variable_value("logits/kernel").tolist()
    estimator = estimator_of(api, repeat=False, extra_metrics=lambda labels, classes: {
        "mean_label": tf.compat.v1.metrics.mean(tf.cast(labels, tf.float32)),
        "batch_rows": tf.compat.v1.metrics.mean(tf.cast(tf.shape(labels)[0], tf.float32))})
    evaluated = plain(estimator.evaluate(context_input_fn))  # 16 batches: 4 steps of 4 replicas
    one_step = plain(estimator.evaluate(context_input_fn, steps=1))
    predictions = [int(p["classes"]) for p in estimator.predict(input_fn_of(rows=4, seed=2))]
    return {"contexts": contexts, "kernel": trained, "evaluate": evaluated, "evaluate_steps_1": one_step,
            "predictions": predictions}


@_strategy("Estimator on 4 replicas: a finite input of 6 batches trains one step; evaluate(steps=1)")
def _(api):
    estimator = estimator_of(api)
    estimator.train(input_fn_of(rows=24, batch=4))  # 6 batches: one step of 4, then 2 for 4 replicas
    return {"global_step": int(estimator.get_variable_value("global_step")),
            "bias": estimator.get_variable_value("logits/bias").tolist(),
            "evaluate_steps_1": plain(estimator.evaluate(input_fn_of(rows=24, batch=4, seed=1), steps=1))}


@_strategy("TPUEstimator(use_tpu=False) on 4 replicas: params['batch_size'] is the configured batch")
def _(api):
    seen = []

    def input_fn(params, input_context):
        seen.append([params["batch_size"], input_context.num_replicas_in_sync])
        return input_fn_of(rows=32, batch=params["batch_size"], repeat=True)(params)

    config = api.estimator.tpu.RunConfig(model_dir=api.model_dir, train_distribute=api.strategy,
                                         eval_distribute=api.strategy)
    tpu = api.estimator.tpu.TPUEstimator(make_model_fn(api.estimator.tpu.TPUEstimatorSpec), config=config,
                                         use_tpu=False, train_batch_size=2, eval_batch_size=2)
    tpu.train(input_fn, steps=2)
    return {"seen": seen, "bias": tpu.get_variable_value("logits/bias").tolist(),
            "evaluate": plain(tpu.evaluate(input_fn, steps=2))}
