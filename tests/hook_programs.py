"""Session-hook probes that run unchanged on the original TPUEstimator and on this library.

Each case is `case(api) -> JSON-able value`; `api` has `tpu` (a module with
`TPUEstimator`, `TPUEstimatorSpec`, `RunConfig`, `TPUConfig`), `model_dir`,
`use_tpu` and `strategy` (`train_distribute`/`eval_distribute`, None on the
original). The model is a TF1 linear regression with a decayed learning rate,
in the style of public TPU programs (hooks built in `model_fn`, hooks passed
to `train`). `scripts/record_hooks_numbers.py` runs them on TF 2.15 and
writes `tests/recorded_hooks_numbers.py`; `tests/test_session_hooks_tf1.py`
compares.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

CASES: dict[str, Callable[[Any], Any]] = {}
API: dict[str, Any] = {}
BATCH = 8


def case(function: Callable[[Any], Any]) -> Callable[[Any], Any]:
    CASES[function.__name__] = function
    return function


def data() -> tuple[np.ndarray, np.ndarray]:
    """The 64 rows `input_fn` repeats: features `[64, 4]` and labels `[64, 1]`."""
    x = np.random.RandomState(0).randn(64, 4).astype(np.float32)
    return x, x @ np.array([[1.0], [-2.0], [3.0], [0.5]], np.float32)


def input_fn(params):
    dataset = tf.data.Dataset.from_tensor_slices(data())
    return dataset.repeat().batch(params["batch_size"], drop_remainder=True)


def _values(values: dict) -> dict:
    return {key: np.asarray(value).tolist() for key, value in sorted(values.items())}


def model_fn(features, labels, mode, params):
    """A linear model; `params["hooks"](mode, tensors)` returns the spec's hooks for `mode`."""
    step = tf.compat.v1.train.get_or_create_global_step()
    w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.ones_initializer())
    predictions = tf.matmul(features, w)
    if mode == "infer":
        tensors = {"step": step, "feature_sum": tf.reduce_sum(features, name="feature_sum")}
        return API["tpu"].TPUEstimatorSpec(mode, predictions={"y": predictions},
                                           prediction_hooks=params["hooks"](mode, tensors))
    loss = tf.reduce_mean(tf.square(predictions - labels))
    mae = tf.reduce_mean(tf.abs(predictions - labels), name="batch_mae")
    learning_rate = tf.compat.v1.train.exponential_decay(0.05, step, 1, 0.9, name="learning_rate")
    tensors = {"step": step, "w": w, "loss": loss, "mae": mae, "learning_rate": learning_rate}
    hooks = params["hooks"](mode, tensors)
    tpu = API["tpu"]
    if mode == "train":
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(learning_rate)
        train_op = optimizer.minimize(loss, global_step=step)
        return tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, training_hooks=hooks)

    def metric_fn(labels, predictions):
        return {"mse": tf.compat.v1.metrics.mean_squared_error(labels, predictions)}

    return tpu.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, predictions]),
                                evaluation_hooks=hooks)


def estimator(api: Any, hooks: Callable, k: int = 2) -> Any:
    config = api.tpu.RunConfig(
        model_dir=api.model_dir, train_distribute=api.strategy, eval_distribute=api.strategy,
        save_summary_steps=1000,
        tpu_config=api.tpu.TPUConfig(iterations_per_loop=k),
    )
    API["tpu"] = api.tpu  # a module: params are deep-copied
    params = {"hooks": hooks}
    return api.tpu.TPUEstimator(model_fn, config=config, params=params, use_tpu=api.use_tpu,
                                train_batch_size=BATCH, eval_batch_size=BATCH, predict_batch_size=BATCH)


def _no_hooks(mode, tensors):
    return []


@case
def logging_tensors(api: Any) -> dict:
    """LoggingTensorHook of the global-step variable, a variable, the loss and in-step tensors."""
    spec_logged, by_name = [], []

    def hooks(mode, tensors):
        if mode != "train":
            return []
        fetch = {key: tensors[key] for key in ("step", "w", "loss", "learning_rate")}
        return [tf.compat.v1.train.LoggingTensorHook(
            fetch, every_n_iter=1, formatter=lambda values: spec_logged.append(_values(values)) or "")]

    named = tf.compat.v1.train.LoggingTensorHook(
        {"lr": "learning_rate:0"}, every_n_iter=2,
        formatter=lambda values: by_name.append(_values(values)) or "")
    estimator(api, hooks).train(input_fn, steps=4, hooks=[named])
    return {"spec": spec_logged, "by_name": by_name}


@case
def eval_logging(api: Any) -> dict:
    """An evaluation hook logging the step, the loss and a batch metric computed in the step."""
    logged = []

    def hooks(mode, tensors):
        if mode != "eval":
            return []
        fetch = {key: tensors[key] for key in ("step", "loss", "mae")}
        return [tf.compat.v1.train.LoggingTensorHook(
            fetch, every_n_iter=1, formatter=lambda values: logged.append(_values(values)) or "")]

    est = estimator(api, hooks)
    est.train(input_fn, steps=2)
    result = est.evaluate(input_fn, steps=3)
    return {"logged": logged, "loss": float(result["loss"]), "global_step": int(result["global_step"])}


def predict_input_fn(params):
    return tf.data.Dataset.from_tensor_slices(data()[0][:40]).batch(params["batch_size"])


@case
def prediction_logging(api: Any) -> dict:
    """A prediction hook logging the step and a tensor computed from each batch's features."""
    logged = []

    def hooks(mode, tensors):
        if mode != "infer":
            return []
        return [tf.compat.v1.train.LoggingTensorHook(
            tensors, every_n_iter=1, formatter=lambda values: logged.append(_values(values)) or "")]

    est = estimator(api, hooks)
    est.train(input_fn, steps=1)
    predictions = [p["y"].tolist() for p in est.predict(predict_input_fn)]
    return {"logged": logged, "predictions": len(predictions)}


class VariablesHook(tf.compat.v1.train.SessionRunHook):
    """Sees the graph's TF1 variables in `begin`, reads them and halves `w` in `after_create_session`."""

    def __init__(self):
        self.seen: dict = {}

    def begin(self):
        self.seen["global_variables"] = sorted(v.op.name for v in tf.compat.v1.global_variables())
        self.seen["trainable_variables"] = sorted(v.op.name for v in tf.compat.v1.trainable_variables())
        self.step = tf.compat.v1.train.get_global_step()
        self.seen["global_step"] = self.step.op.name
        self.w = next(v for v in tf.compat.v1.global_variables() if v.op.name == "w")
        self.halve = tf.compat.v1.assign(self.w, self.w * 0.5)

    def after_create_session(self, session, coord):
        self.seen["step_at_start"] = int(session.run(self.step))
        self.seen["w_at_start"] = np.asarray(session.run(self.w)).ravel().tolist()
        session.run(self.halve)
        self.seen["w_halved"] = np.asarray(session.run(self.w)).ravel().tolist()

    def end(self, session):
        self.seen["w_at_end"] = np.asarray(session.run(self.w)).ravel().tolist()


@case
def variables_in_begin(api: Any) -> dict:
    """A hook's view of the variables, and an assign it runs in its session, in TRAIN and EVAL."""
    est = estimator(api, _no_hooks)
    train_hook, eval_hook = VariablesHook(), VariablesHook()
    est.train(input_fn, steps=2, hooks=[train_hook])
    trained = est.get_variable_value("w").ravel().tolist()
    result = est.evaluate(input_fn, steps=1, hooks=[eval_hook])
    return {"train": train_hook.seen, "trained_w": trained, "eval": eval_hook.seen,
            "eval_loss": float(result["loss"])}


@case
def profiler(api: Any) -> dict:
    """ProfilerHook(save_steps=2) built in model_fn: the steps it writes a trace of."""
    output = os.path.join(api.model_dir, "profile")

    def hooks(mode, tensors):
        return [tf.compat.v1.train.ProfilerHook(save_steps=2, output_dir=output)]

    estimator(api, hooks).train(input_fn, steps=6)
    return {"timelines": sorted(os.path.basename(p) for p in glob.glob(os.path.join(output, "timeline-*.json")))}


def events(directory: str) -> list:
    """`[step, tag, value]` of the scalar summaries in the event files directly in `directory`."""
    found = []
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    found.append([int(event.step), value.tag, round(float(value.simple_value), 5)])
    return found


@case
def summary_saver_in_evaluation(api: Any) -> dict:
    """SummarySaverHook(summary_op=...) in evaluation_hooks: what it writes, where, at which step."""
    output = os.path.join(api.model_dir, "eval_hook")

    def hooks(mode, tensors):
        if mode != "eval":
            return []
        summary = tf.compat.v1.summary.scalar("batch_mae", tensors["mae"])
        return [tf.compat.v1.train.SummarySaverHook(save_steps=1, output_dir=output, summary_op=summary)]

    est = estimator(api, hooks)
    est.train(input_fn, steps=2)
    est.evaluate(input_fn, steps=3)
    tf.compat.v1.summary.FileWriterCache.get(output).flush()
    return {"events": events(output)}


def ema_model_fn(features, labels, mode, params):
    """tensorflow/tpu's MobileNet shape: training keeps moving averages of the trainable variables."""
    step = tf.compat.v1.train.get_or_create_global_step()
    w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.ones_initializer())
    loss = tf.reduce_mean(tf.square(tf.matmul(features, w) - labels))
    tpu = API["tpu"]
    if mode == "train":
        minimize = tf.compat.v1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=step)
        ema = tf.compat.v1.train.ExponentialMovingAverage(0.5, num_updates=step)
        with tf.control_dependencies([minimize]):
            train_op = ema.apply(tf.compat.v1.trainable_variables())
        return tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)
    return tpu.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(lambda: {}, []))


class LoadEMAHook(tf.compat.v1.train.SessionRunHook):
    """tensorflow/tpu's LoadEMAHook: evaluation runs on the moving averages of the latest checkpoint."""

    def __init__(self, model_dir: str, decay: float = 0.5):
        self._model_dir, self._decay = model_dir, decay

    def begin(self):
        ema = tf.compat.v1.train.ExponentialMovingAverage(self._decay)
        self.restored = sorted(ema.variables_to_restore())
        self._saver = tf.compat.v1.train.Saver(ema.variables_to_restore())

    def after_create_session(self, sess, coord):
        self._saver.restore(sess, tf.train.latest_checkpoint(self._model_dir))


@case
def load_ema_hook(api: Any) -> dict:
    """Evaluation without and with a LoadEMAHook (Saver(ema.variables_to_restore()) restored into the model)."""
    API["tpu"] = api.tpu
    config = api.tpu.RunConfig(model_dir=api.model_dir, train_distribute=api.strategy,
                               eval_distribute=api.strategy, tpu_config=api.tpu.TPUConfig(iterations_per_loop=2))
    est = api.tpu.TPUEstimator(ema_model_fn, config=config, use_tpu=api.use_tpu, train_batch_size=BATCH,
                               eval_batch_size=BATCH)
    est.train(input_fn, steps=6)
    raw = est.evaluate(input_fn, steps=2)
    hook = LoadEMAHook(api.model_dir)
    averaged = est.evaluate(input_fn, steps=2, hooks=[hook])
    again = est.evaluate(input_fn, steps=2)
    return {"raw": float(raw["loss"]), "ema": float(averaged["loss"]), "raw_again": float(again["loss"]),
            "restored": hook.restored, "w": est.get_variable_value("w").ravel().tolist(),
            "shadow": est.get_variable_value("w/ExponentialMovingAverage").ravel().tolist()}
