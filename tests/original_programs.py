"""Small TPUEstimator programs that run unchanged on the original and on this library.

Each `*_program(est, ...)` factory returns a `Program`: a `model_fn`, its
`input_fn`s and the way to run it (batch sizes, `iterations_per_loop`,
steps). The code is plain TF1-style TensorFlow and imports neither
`keras_tpu_estimator` nor `tensorflow_estimator`; the estimator classes come
from the `est` namespace:

- the original (TF 2.15 + tensorflow-estimator 2.15): `original_namespace()`;
- this library (TF 2.21 + Keras 3): `estimator_namespace(keras_tpu_estimator.estimator)`,
  the same names after the one-line swap of `tf.compat.v1.estimator`.

Every initializer is a constant (or NumPy values from a fixed
`np.random.RandomState`) and the data is NumPy, so both TensorFlow versions
compute the same numbers. `scripts/original_numbers.py` runs the programs on
the original and writes the results to `tests/original_numbers.py`.

`bert_session_loop` runs the BERT-like program's graph code in a plain
`tf.compat.v1.Session` (no estimator), under either TensorFlow version.
"""

from __future__ import annotations

import dataclasses
import re
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

SEED = 1234  # `RunConfig(tf_random_seed=SEED)`; no program draws random numbers.

ModelFn = Callable[..., Any]
InputFn = Callable[[dict], tf.data.Dataset]


@dataclasses.dataclass(frozen=True)
class Program:
    """A `model_fn`, its input_fns and how to run them.

    Input functions read `params["batch_size"]`, which the estimator sets
    from `train_batch_size`, `eval_batch_size` or `predict_batch_size`.
    `eval_steps=None` means: evaluate until the input is exhausted.
    """

    model_fn: ModelFn
    train_input_fn: InputFn
    eval_input_fn: InputFn
    predict_input_fn: InputFn
    params: dict = dataclasses.field(default_factory=dict)
    train_batch_size: int = 4
    eval_batch_size: int = 4
    predict_batch_size: int = 4
    iterations_per_loop: int = 1
    max_steps: int = 1
    eval_steps: int | None = None


def estimator_namespace(estimator: Any) -> types.SimpleNamespace:
    """The `est` namespace from a module laid out like `tf.compat.v1.estimator`.

    The programs reach every class through `estimator.tpu.*` and
    `estimator.{EstimatorSpec, ModeKeys}`, as migrated code does after its
    one-line swap to `keras_tpu_estimator.estimator`.
    """
    return types.SimpleNamespace(
        TPUEstimator=estimator.tpu.TPUEstimator,
        TPUEstimatorSpec=estimator.tpu.TPUEstimatorSpec,
        RunConfig=estimator.tpu.RunConfig,
        TPUConfig=estimator.tpu.TPUConfig,
        EstimatorSpec=estimator.EstimatorSpec,
        ModeKeys=estimator.ModeKeys,
    )


def original_namespace() -> types.SimpleNamespace:
    """The original's classes, as an `est` namespace (TF 2.15 + tensorflow-estimator only)."""
    try:
        estimator = tf.compat.v1.estimator
    except AttributeError as error:
        raise RuntimeError(
            "`original_namespace()` needs TensorFlow 2.15 with tensorflow-estimator "
            f"(the original TPUEstimator). Received: tensorflow {tf.__version__}."
        ) from error
    return estimator_namespace(estimator)


def build_estimator(est: Any, program: Program, model_dir: str) -> Any:
    """`est.TPUEstimator(use_tpu=False)` for `program`, writing to `model_dir`."""
    config = est.RunConfig(
        model_dir=model_dir,
        tf_random_seed=SEED,
        tpu_config=est.TPUConfig(iterations_per_loop=program.iterations_per_loop),
    )
    return est.TPUEstimator(
        model_fn=program.model_fn,
        config=config,
        params=dict(program.params),
        use_tpu=False,
        train_batch_size=program.train_batch_size,
        eval_batch_size=program.eval_batch_size,
        predict_batch_size=program.predict_batch_size,
    )


def write_checkpoint(prefix: str, values: dict[str, np.ndarray]) -> str:
    """Saves `values` (name -> array) as a TF1 checkpoint at `prefix`; returns its path."""
    with tf.Graph().as_default():
        variables = [
            tf.compat.v1.get_variable(name, initializer=tf.constant(value, tf.float32))
            for name, value in values.items()
        ]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            return saver.save(session, prefix)


def write_init_checkpoint(prefix: str) -> str:
    """The checkpoint for `init_from_checkpoint_program`: `w` = ones([4, 1])."""
    return write_checkpoint(prefix, {"w": np.ones((4, 1), np.float32)})


# --- shared pieces --------------------------------------------------------------------------------


def _input_fn(
    features: Any, labels: Any = None, *, repeat: bool = False, drop_remainder: bool = True
) -> InputFn:
    """An input_fn over in-memory arrays, batched by `params["batch_size"]`."""

    def input_fn(params: dict) -> tf.data.Dataset:
        data = features if labels is None else (features, labels)
        dataset = tf.data.Dataset.from_tensor_slices(data)
        if repeat:
            dataset = dataset.repeat()
        return dataset.batch(params["batch_size"], drop_remainder=drop_remainder)

    return input_fn


def _regression_data(seed: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of `x` (3 columns) and `y = x @ [1, -2, 0.5] + 0.3 + noise`."""
    rng = np.random.RandomState(seed)
    x = rng.randn(rows, 3).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3
    y += 0.1 * rng.randn(rows, 1).astype(np.float32)
    return x, y.astype(np.float32)


def _linear(x: tf.Tensor) -> tf.Tensor:
    """`x @ kernel + bias` with variables `linear/kernel` ([3, 1], 0.1) and `linear/bias` (0)."""
    with tf.compat.v1.variable_scope("linear"):
        kernel = tf.compat.v1.get_variable(
            "kernel", [3, 1], initializer=tf.compat.v1.constant_initializer(0.1)
        )
        bias = tf.compat.v1.get_variable("bias", [1], initializer=tf.compat.v1.zeros_initializer())
    return tf.matmul(x, kernel) + bias


def _regression_program(model_fn: ModelFn, **run: Any) -> Program:
    """A `Program` over the regression data: 16 train rows, 8 eval rows, 8 predict rows."""
    x, y = _regression_data(seed=1, rows=24)
    return Program(
        model_fn=model_fn,
        train_input_fn=_input_fn({"x": x[:16]}, y[:16], repeat=True),
        eval_input_fn=_input_fn({"x": x[16:]}, y[16:]),
        predict_input_fn=_input_fn({"x": x[16:]}),
        **run,
    )


# --- A: init_from_checkpoint --------------------------------------------------------------------


def init_from_checkpoint_program(est: Any, init_checkpoint: str) -> Program:
    """`w` (zeros) restored by `init_from_checkpoint` from `write_init_checkpoint`'s file.

    x = ones([8, 4]), y = zeros, SGD(0.1) on the mean squared error: the
    prediction shrinks by 5x per step (4 -> 0.8 -> ... -> 0.00128 at step 5).
    Run: train(max_steps=5), evaluate(steps=1), predict; batch size 1.
    """

    def model_fn(features, labels, mode, params):
        w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.zeros_initializer())
        tf.compat.v1.train.init_from_checkpoint(params["init_checkpoint"], {"w": "w"})
        predictions = tf.matmul(features["x"], w)
        if mode == est.ModeKeys.PREDICT:
            return est.TPUEstimatorSpec(mode, predictions={"y": predictions})
        loss = tf.compat.v1.losses.mean_squared_error(labels, predictions)
        train_op = None
        if mode == est.ModeKeys.TRAIN:
            train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
                loss, global_step=tf.compat.v1.train.get_global_step()
            )
        return est.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    x = np.ones((8, 4), np.float32)
    y = np.zeros((8, 1), np.float32)
    return Program(
        model_fn=model_fn,
        train_input_fn=_input_fn({"x": x}, y, repeat=True),
        eval_input_fn=_input_fn({"x": x}, y),
        predict_input_fn=_input_fn({"x": x}),
        params={"init_checkpoint": init_checkpoint},
        train_batch_size=1,
        eval_batch_size=1,
        predict_batch_size=1,
        max_steps=5,
        eval_steps=1,
    )


# --- B: unfetched_train_op ----------------------------------------------------------------------


def unfetched_train_op_program(est: Any) -> Program:
    """`minimize` is built in every mode (PREDICT too) but returned only in TRAIN.

    Run: train(max_steps=10), then evaluate(steps=5) three times and predict:
    the results must not move (the unreturned train_op never runs).
    Eval has 20 rows (batch 4, exactly 5 steps).
    """

    def model_fn(features, labels, mode, params):
        predictions = _linear(features["x"])
        target = labels if labels is not None else tf.zeros_like(predictions)
        loss = tf.reduce_mean(tf.square(predictions - target))
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.05).minimize(
            loss, global_step=tf.compat.v1.train.get_or_create_global_step()
        )
        if mode == est.ModeKeys.PREDICT:
            return est.TPUEstimatorSpec(mode, predictions={"y": predictions})
        if mode == est.ModeKeys.EVAL:
            return est.TPUEstimatorSpec(mode, loss=loss)
        return est.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    x, y = _regression_data(seed=2, rows=36)
    return Program(
        model_fn=model_fn,
        train_input_fn=_input_fn({"x": x[:16]}, y[:16], repeat=True),
        eval_input_fn=_input_fn({"x": x[16:]}, y[16:]),
        predict_input_fn=_input_fn({"x": x[16:24]}),
        max_steps=10,
        eval_steps=5,
    )


# --- C, D, E: a small classifier ----------------------------------------------------------------


def _classifier_data(rows: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(3)
    x = rng.randn(rows, 3).astype(np.float32)
    labels = (x @ np.array([1.0, -1.0, 0.5], np.float32) > 0).astype(np.int64)
    return x, labels


def _classifier_logits(x: tf.Tensor) -> tf.Tensor:
    """Two-class logits from `dense/kernel` (fixed values) and `dense/bias` (zeros)."""
    kernel_value = 0.5 * np.random.RandomState(4).randn(3, 2).astype(np.float32)
    with tf.compat.v1.variable_scope("dense"):
        kernel = tf.compat.v1.get_variable(
            "kernel", [3, 2], initializer=tf.compat.v1.constant_initializer(kernel_value)
        )
        bias = tf.compat.v1.get_variable("bias", [2], initializer=tf.compat.v1.zeros_initializer())
    return tf.matmul(x, kernel) + bias


def _classifier_train_op(loss: tf.Tensor) -> tf.Operation:
    return tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
        loss, global_step=tf.compat.v1.train.get_or_create_global_step()
    )


def _classifier_program(model_fn: ModelFn) -> Program:
    """40 rows for train and eval (batch 8: 5 eval steps), 8 predict rows (batch 4)."""
    x, labels = _classifier_data()
    return Program(
        model_fn=model_fn,
        train_input_fn=_input_fn({"x": x}, labels, repeat=True),
        eval_input_fn=_input_fn({"x": x}, labels),
        predict_input_fn=_input_fn({"x": x[:8]}),
        train_batch_size=8,
        eval_batch_size=8,
        predict_batch_size=4,
        max_steps=3,
        eval_steps=5,
    )


def eval_metrics_program(est: Any) -> Program:
    """A TPUEstimatorSpec with `eval_metrics=(metric_fn, [labels, logits])`.

    `metric_fn` returns `accuracy` and `mean_abs` (|label - P(class 1)|).
    Run: train(max_steps=3), evaluate(steps=5). Also the program of case D
    (evaluate and predict on an empty model_dir).
    """

    def metric_fn(labels, logits):
        classes = tf.argmax(logits, axis=1)
        probability = tf.nn.softmax(logits)[:, 1]
        return {
            "accuracy": tf.compat.v1.metrics.accuracy(labels, classes),
            "mean_abs": tf.compat.v1.metrics.mean_absolute_error(
                tf.cast(labels, tf.float32), probability
            ),
        }

    def model_fn(features, labels, mode, params):
        logits = _classifier_logits(features["x"])
        if mode == est.ModeKeys.PREDICT:
            predictions = {
                "class": tf.argmax(logits, axis=1),
                "probabilities": tf.nn.softmax(logits),
            }
            return est.TPUEstimatorSpec(mode, predictions=predictions)
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
        if mode == est.ModeKeys.EVAL:
            return est.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
        return est.TPUEstimatorSpec(mode, loss=loss, train_op=_classifier_train_op(loss))

    return _classifier_program(model_fn)


def eval_metric_ops_program(est: Any) -> Program:
    """The classifier with a plain `EstimatorSpec` and `eval_metric_ops={"acc": ...}`.

    Run: train(max_steps=3), evaluate(steps=5).
    """

    def model_fn(features, labels, mode, params):
        logits = _classifier_logits(features["x"])
        classes = tf.argmax(logits, axis=1)
        if mode == est.ModeKeys.PREDICT:
            return est.EstimatorSpec(mode, predictions={"class": classes})
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
        if mode == est.ModeKeys.EVAL:
            metrics = {"acc": tf.compat.v1.metrics.accuracy(labels, classes)}
            return est.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics)
        return est.EstimatorSpec(mode, loss=loss, train_op=_classifier_train_op(loss))

    return _classifier_program(model_fn)


# --- F: partial_eval_loss -----------------------------------------------------------------------


def partial_eval_loss_program(est: Any) -> Program:
    """37 eval rows in batches of 16 (16, 16, 5; no `drop_remainder`), per-row losses differ.

    Run: train(max_steps=2) (batch 8), then evaluate() until the input ends.
    """

    def model_fn(features, labels, mode, params):
        predictions = _linear(features["x"])
        if mode == est.ModeKeys.PREDICT:
            return est.TPUEstimatorSpec(mode, predictions={"y": predictions})
        loss = tf.compat.v1.losses.mean_squared_error(labels, predictions)
        train_op = None
        if mode == est.ModeKeys.TRAIN:
            train_op = tf.compat.v1.train.GradientDescentOptimizer(0.05).minimize(
                loss, global_step=tf.compat.v1.train.get_or_create_global_step()
            )
        return est.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    x, y = partial_eval_data()
    return Program(
        model_fn=model_fn,
        train_input_fn=_input_fn({"x": x}, y, repeat=True),
        eval_input_fn=_input_fn({"x": x}, y, drop_remainder=False),
        predict_input_fn=_input_fn({"x": x}, drop_remainder=False),
        train_batch_size=8,
        eval_batch_size=16,
        predict_batch_size=16,
        max_steps=2,
        eval_steps=None,
    )


def partial_eval_data() -> tuple[np.ndarray, np.ndarray]:
    """The 37 rows of `partial_eval_loss_program` (for NumPy checks of its loss)."""
    x, y = _regression_data(seed=5, rows=37)
    return x, y * np.linspace(0.5, 3.0, 37, dtype=np.float32)[:, None]


# --- G: metrics_in_train ------------------------------------------------------------------------


def metrics_in_train_program(est: Any, fetch_metric: bool = False) -> Program:
    """`tf.compat.v1.metrics.mean(loss)` is created in TRAIN mode too.

    With `fetch_metric`, its update op is grouped into the train_op; without,
    it is only created. Training is the same either way.
    Run: train(max_steps=6).
    """

    def model_fn(features, labels, mode, params):
        predictions = _linear(features["x"])
        if mode == est.ModeKeys.PREDICT:
            return est.TPUEstimatorSpec(mode, predictions={"y": predictions})
        loss = tf.compat.v1.losses.mean_squared_error(labels, predictions)
        _, mean_update = tf.compat.v1.metrics.mean(loss)
        train_op = None
        if mode == est.ModeKeys.TRAIN:
            train_op = tf.compat.v1.train.GradientDescentOptimizer(0.05).minimize(
                loss, global_step=tf.compat.v1.train.get_or_create_global_step()
            )
            if params["fetch_metric"]:
                train_op = tf.group(train_op, mean_update)
        return est.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    return _regression_program(model_fn, params={"fetch_metric": fetch_metric}, max_steps=6)


# --- H: counter ---------------------------------------------------------------------------------


def counter_program(est: Any) -> Program:
    """Counters `c` (its `assign_add` is never fetched) and `d` (run with each train step).

    Both are int64, non-trainable, in GLOBAL_VARIABLES only, and created in every mode.
    Run: train(max_steps=7) with iterations_per_loop=3, evaluate(steps=2), predict.
    Expected: c == 0 and d == 7 after each.
    """

    def model_fn(features, labels, mode, params):
        counters = {}
        for name in ("c", "d"):
            counters[name] = tf.compat.v1.get_variable(
                name,
                [],
                tf.int64,
                initializer=tf.compat.v1.zeros_initializer(),
                trainable=False,
                collections=[tf.compat.v1.GraphKeys.GLOBAL_VARIABLES],
            )
        counters["c"].assign_add(1)  # built, never fetched
        predictions = _linear(features["x"])
        if mode == est.ModeKeys.PREDICT:
            return est.TPUEstimatorSpec(mode, predictions={"y": predictions})
        loss = tf.compat.v1.losses.mean_squared_error(labels, predictions)
        train_op = None
        if mode == est.ModeKeys.TRAIN:
            with tf.control_dependencies([counters["d"].assign_add(1)]):
                train_op = tf.compat.v1.train.GradientDescentOptimizer(0.05).minimize(
                    loss, global_step=tf.compat.v1.train.get_or_create_global_step()
                )
        return est.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    return _regression_program(model_fn, iterations_per_loop=3, max_steps=7, eval_steps=2)


# --- H2: session hooks ---------------------------------------------------------------------------


class RecordingHook(tf.compat.v1.train.SessionRunHook):
    """Records, per run, the fetched global step and loss, the step read in after_run, and its calls."""

    def __init__(self, loss_name: str):
        self.loss_name, self.fetched, self.after, self.calls = loss_name, [], [], []

    def begin(self):
        self.calls.append("begin")
        self.step = tf.compat.v1.train.get_global_step()

    def before_run(self, run_context):
        self.calls.append("before_run")
        return tf.compat.v1.train.SessionRunArgs({"step": self.step, "loss": self.loss_name})

    def after_run(self, run_context, run_values):
        self.calls.append("after_run")
        results = run_values.results
        self.fetched.append([int(results["step"]), float(results["loss"])])
        self.after.append(int(run_context.session.run(self.step)))

    def end(self, session):
        self.calls.append("end")


class RecordingListener(tf.compat.v1.train.CheckpointSaverListener):
    """Records the steps of `before_save`, `after_save` and `end`."""

    def __init__(self):
        self.calls = []

    def before_save(self, session, global_step_value):
        self.calls.append(["before_save", int(global_step_value)])

    def after_save(self, session, global_step_value):
        self.calls.append(["after_save", int(global_step_value)])

    def end(self, session, global_step_value):
        self.calls.append(["end", int(global_step_value)])


def session_hooks_run(est: Any, model_dir: str) -> dict:
    """`train(steps=6)` with `use_tpu=False`, K=4, checkpoints every 2 steps, a recording hook,
    a LoggingTensorHook (every 2 runs) on the loss by name, a StopAtStepHook(last_step=5) and a
    saving listener; then `evaluate(steps=2)` with the recording hook. Returns what each saw.
    """

    def model_fn(features, labels, mode, params):
        predictions = _linear(features["x"])
        if mode == est.ModeKeys.PREDICT:
            return est.TPUEstimatorSpec(mode, predictions={"y": predictions})
        loss = tf.identity(tf.compat.v1.losses.mean_squared_error(labels, predictions), name="hooked_loss")
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.05).minimize(
            loss, global_step=tf.compat.v1.train.get_or_create_global_step()
        )
        return est.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    program = _regression_program(model_fn)
    config = est.RunConfig(
        model_dir=model_dir, tf_random_seed=SEED, save_checkpoints_steps=2,
        tpu_config=est.TPUConfig(iterations_per_loop=4),
    )
    estimator = est.TPUEstimator(model_fn=model_fn, config=config, use_tpu=False,
                                 train_batch_size=4, eval_batch_size=4)
    train_hook, eval_hook, listener, logged = (
        RecordingHook("hooked_loss:0"), RecordingHook("hooked_loss:0"), RecordingListener(), []
    )
    logging_hook = tf.compat.v1.train.LoggingTensorHook(
        {"loss": "hooked_loss:0"}, every_n_iter=2, formatter=lambda v: logged.append(float(v["loss"])) or ""
    )
    stop_hook = tf.compat.v1.train.StopAtStepHook(last_step=5)
    estimator.train(program.train_input_fn, steps=100, hooks=[train_hook, logging_hook, stop_hook],
                    saving_listeners=[listener])
    estimator.evaluate(program.eval_input_fn, steps=2, hooks=[eval_hook])
    return {
        "train_fetched": train_hook.fetched,
        "train_after": train_hook.after,
        "train_calls": train_hook.calls,
        "logged_losses": logged,
        "listener": listener.calls,
        "eval_fetched": eval_hook.fetched,
        "eval_calls": eval_hook.calls,
    }


# --- H3: the global step in host functions -------------------------------------------------------


def host_global_step_run(est: Any, model_dir: str, per_step: int = 1) -> dict:
    """`train(steps=6)` with `use_tpu=False`, K=4, a `host_call` whose fn records
    `tf.compat.v1.train.get_global_step()` and the loss it got; then `evaluate(steps=2)` with that
    `host_call` and an `eval_metrics` fn averaging the global step. Returns what each saw.
    `per_step=2`: the `train_op` adds one more to the global step after its update (as a GAN's
    second `minimize(global_step=...)`).
    """
    seen: dict[str, list] = {"train": [], "eval": []}

    def model_fn(features, labels, mode, params):
        predictions = _linear(features["x"])
        if mode == est.ModeKeys.PREDICT:
            return est.TPUEstimatorSpec(mode, predictions={"y": predictions})
        loss = tf.compat.v1.losses.mean_squared_error(labels, predictions)
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.05).minimize(
            loss, global_step=tf.compat.v1.train.get_or_create_global_step()
        )
        if per_step == 2:
            with tf.control_dependencies([train_op]):
                train_op = tf.compat.v1.train.get_global_step().assign_add(1).op

        def host_fn(loss):
            step = tf.compat.v1.train.get_global_step()
            record = lambda step, loss: seen[mode].append([int(step), float(loss[0])]) or np.int64(0)  # noqa: E731
            return tf.numpy_function(record, [step, loss], tf.int64)

        def metric_fn(loss):
            del loss
            return {"step_mean": tf.compat.v1.metrics.mean(tf.cast(tf.compat.v1.train.get_global_step(), tf.float32))}

        tensors = [tf.reshape(loss, [1])]
        return est.TPUEstimatorSpec(
            mode, loss=loss, train_op=train_op, host_call=(host_fn, tensors),
            eval_metrics=(metric_fn, tensors) if mode == est.ModeKeys.EVAL else None,
        )

    program = _regression_program(model_fn)
    config = est.RunConfig(model_dir=model_dir, tf_random_seed=SEED, tpu_config=est.TPUConfig(iterations_per_loop=4))
    estimator = est.TPUEstimator(model_fn=model_fn, config=config, use_tpu=False,
                                 train_batch_size=4, eval_batch_size=4)
    estimator.train(program.train_input_fn, steps=6)
    result = estimator.evaluate(program.eval_input_fn, steps=2)
    return {"train": seen["train"], "eval": seen["eval"], "evaluate": {k: float(v) for k, v in sorted(result.items())}}


def batch_dependent_predict_run(est: Any, model_dir: str) -> dict:
    """`predict` with `use_tpu=False` of 10 rows in batches of 4 (the last has 2) by a model_fn whose
    predictions depend on the whole batch: each row minus the batch mean, and the batch's row count.
    A `host_call` records the rows it got. Returns the examples, the batches' shapes
    (`yield_single_examples=False`), the feature shapes `model_fn` was traced with and the host's rows.
    """
    seen: dict[str, list] = {"traced": [], "host_rows": []}
    x = np.arange(10, dtype=np.float32).reshape(10, 1)

    def model_fn(features, labels, mode, params):
        f = features["x"]
        seen["traced"].append(f.shape.as_list())
        scale = tf.compat.v1.get_variable("scale", [], initializer=tf.compat.v1.ones_initializer())
        centred = (f - tf.reduce_mean(f, axis=0)) * scale
        rows = tf.fill(tf.shape(f)[:1], tf.shape(f)[0])

        def host_fn(centred):
            record = lambda c: seen["host_rows"].append(int(c.shape[0])) or np.int64(0)  # noqa: E731
            return tf.numpy_function(record, [centred], tf.int64)

        return est.TPUEstimatorSpec(mode, predictions={"centred": centred, "rows": rows},
                                    host_call=(host_fn, [centred]))

    def input_fn(params):
        return tf.data.Dataset.from_tensor_slices({"x": x}).batch(params["batch_size"])

    config = est.RunConfig(model_dir=model_dir, tf_random_seed=SEED)
    estimator = est.TPUEstimator(model_fn=model_fn, config=config, use_tpu=False, predict_batch_size=4)
    examples = [{k: v.tolist() for k, v in sorted(p.items())} for p in estimator.predict(input_fn)]
    host_rows = list(seen["host_rows"])
    batches = [{k: list(v.shape) for k, v in sorted(p.items())}
               for p in estimator.predict(input_fn, yield_single_examples=False)]
    return {"examples": examples, "batches": batches, "traced": seen["traced"][:1], "host_rows": host_rows}


def partial_train_batch_host_call_run(est: Any, model_dir: str) -> dict:
    """`train` with `use_tpu=False`, K=3, on 10 rows in batches of 4 (the last has 2) with a `host_call`
    that records the rows it got. Returns those rows, the final weight and the global step.
    """
    seen: list = []
    x = np.arange(10, dtype=np.float32).reshape(10, 1)

    def model_fn(features, labels, mode, params):
        w = tf.compat.v1.get_variable("w", [1, 1], initializer=tf.compat.v1.ones_initializer())
        loss = tf.reduce_mean(tf.square(tf.matmul(features["x"], w) - labels))
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.001).minimize(
            loss, tf.compat.v1.train.get_global_step()
        )

        def host_fn(rows):
            return tf.numpy_function(lambda r: seen.append(int(r.shape[0])) or np.int64(0), [rows], tf.int64)

        return est.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, host_call=(host_fn, [features["x"]]))

    def input_fn(params):
        return tf.data.Dataset.from_tensor_slices(({"x": x}, 2 * x)).batch(params["batch_size"])

    config = est.RunConfig(model_dir=model_dir, tpu_config=est.TPUConfig(iterations_per_loop=3))
    estimator = est.TPUEstimator(model_fn=model_fn, config=config, use_tpu=False, train_batch_size=4)
    estimator.train(input_fn)
    return {"host_rows": seen, "w": float(estimator.get_variable_value("w")[0, 0]),
            "global_step": int(estimator.get_variable_value("global_step"))}


def cpu_host_tensors_run(est: Any, model_dir: str) -> dict:
    """`use_tpu=False`, K=3, 10 rows in batches of 4 (the last has 2): `host_call` tensors of any shape.

    A scalar, the per-row output, both outputs flattened (`[2B]`), the transposed features and a
    tensor of unknown rank, in train, evaluate and predict; the features are a dict whose first key
    is a per-batch scalar. Returns, per mode, each call's shapes and sums, and the results.
    """
    seen: list = []
    x = np.arange(20, dtype=np.float32).reshape(10, 2)

    def model_fn(features, labels, mode, params):
        w = tf.compat.v1.get_variable("w", [2, 1], initializer=tf.compat.v1.constant_initializer(0.1))
        out = tf.matmul(features["x"], w) * features["a_scale"]

        def host_fn(scalar, rows, doubled, transposed, unknown_rank):
            def record(*values):
                seen.append([mode, [list(v.shape) for v in values], [float(np.sum(v)) for v in values]])
                return np.int64(0)

            return tf.numpy_function(record, [scalar, rows, doubled, transposed, unknown_rank], tf.int64)

        doubled = tf.reshape(tf.concat([out, 2 * out], 0), [-1])
        unknown_rank = tf.numpy_function(lambda a: a[:, 0] * 10, [out], tf.float32)
        host_call = (host_fn, [tf.reduce_sum(out), out, doubled, tf.transpose(features["x"]), unknown_rank])
        if mode == est.ModeKeys.PREDICT:
            return est.TPUEstimatorSpec(mode, predictions={"y": out}, host_call=host_call)
        loss = tf.reduce_mean(tf.square(out - labels))
        if mode == est.ModeKeys.EVAL:
            return est.TPUEstimatorSpec(mode, loss=loss, host_call=host_call)
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.001).minimize(
            loss, tf.compat.v1.train.get_global_step()
        )
        return est.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, host_call=host_call)

    def input_fn(params):
        dataset = tf.data.Dataset.from_tensor_slices((x, x[:, :1] + x[:, 1:])).batch(params["batch_size"])
        return dataset.map(lambda f, y: ({"a_scale": tf.constant(2.0), "x": f}, y))

    def predict_input_fn(params):
        dataset = tf.data.Dataset.from_tensor_slices(x).batch(params["batch_size"])
        return dataset.map(lambda f: {"a_scale": tf.constant(2.0), "x": f})

    config = est.RunConfig(model_dir=model_dir, tpu_config=est.TPUConfig(iterations_per_loop=3))
    estimator = est.TPUEstimator(model_fn=model_fn, config=config, use_tpu=False,
                                 train_batch_size=4, eval_batch_size=4, predict_batch_size=4)
    estimator.train(input_fn)
    evaluation = {k: float(v) for k, v in estimator.evaluate(input_fn).items()}
    predictions = [float(p["y"][0]) for p in estimator.predict(predict_input_fn)]
    return {"host_calls": seen, "evaluate": evaluation, "predictions": predictions}


def advisory_batch_size_run(est: Any, model_dir: str, batch_size: int | None) -> dict:
    """`use_tpu=False` with every batch size `batch_size` (None: not passed) and an input_fn that batches
    10 rows by 8 whatever params say. Returns the params keys input_fn and model_fn saw, the batch
    shapes model_fn traced, the weights after `train(steps=2)`, `evaluate()` and the predictions.
    """
    seen: dict = {"input_fn": [], "model_fn": []}
    x = np.arange(20, dtype=np.float32).reshape(10, 2)

    def model_fn(features, labels, mode, params):
        seen["model_fn"].append([mode, sorted(params), params.get("batch_size"), features.shape.as_list()])
        w = tf.compat.v1.get_variable("w", [2, 1], initializer=tf.compat.v1.zeros_initializer())
        out = tf.matmul(features, w)
        if mode == est.ModeKeys.PREDICT:
            return est.TPUEstimatorSpec(mode, predictions={"y": out})
        loss = tf.reduce_mean(tf.square(out - labels))
        if mode == est.ModeKeys.EVAL:
            return est.TPUEstimatorSpec(
                mode, loss=loss, eval_metrics=(lambda y, o: {"mse": tf.compat.v1.metrics.mean_squared_error(y, o)},
                                               [labels, out])
            )
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.001).minimize(
            loss, tf.compat.v1.train.get_global_step()
        )
        return est.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    def input_fn(params):
        seen["input_fn"].append(sorted(params))
        return tf.data.Dataset.from_tensor_slices((x, x[:, :1] + x[:, 1:])).batch(8)

    def predict_input_fn(params):
        return tf.data.Dataset.from_tensor_slices(x).batch(8)

    config = est.RunConfig(model_dir=model_dir)
    estimator = est.TPUEstimator(model_fn=model_fn, config=config, use_tpu=False, train_batch_size=batch_size,
                                 eval_batch_size=batch_size, predict_batch_size=batch_size)
    estimator.train(input_fn, steps=2)
    w = estimator.get_variable_value("w").ravel().tolist()
    evaluation = {k: float(v) for k, v in estimator.evaluate(input_fn).items()}
    predictions = [float(p["y"][0]) for p in estimator.predict(predict_input_fn)]
    traced = [seen["model_fn"][i] for i in sorted({[m[0] for m in seen["model_fn"]].index(mode)
                                                   for mode in ("train", "eval", "infer")})]
    return {"input_fn_params": seen["input_fn"][:1], "model_fn": traced, "w": w, "evaluate": evaluation,
            "predictions": predictions}


def cpu_predict_details_run(est: Any, model_dir: str) -> dict:
    """`predict` with `use_tpu=False` on 6 rows of (features, labels) in batches of 4.

    Records whether model_fn got labels in PREDICT; predicts with `predict_keys=["y"]` where the
    other prediction fails if it runs; then per-batch scalar predictions (a float and a string) with
    `yield_single_examples=False`, as the Python types and values they come back as.
    """
    seen: list = []
    x = np.arange(6, dtype=np.float32).reshape(6, 1)

    def model_fn(features, labels, mode, params):
        seen.append(labels is None)
        w = tf.compat.v1.get_variable("w", [1, 1], initializer=tf.compat.v1.ones_initializer())
        y = tf.matmul(features["x"], w)
        failing = tf.numpy_function(lambda v: np.float32(1 / 0), [y], tf.float32)  # ZeroDivisionError
        total = tf.reduce_sum(y)
        predictions = {"y": y, "failing": failing, "total": total, "label": tf.strings.as_string(total)}
        return est.TPUEstimatorSpec(mode, predictions=predictions)

    def input_fn(params):
        return tf.data.Dataset.from_tensor_slices(({"x": x}, 2 * x)).batch(params["batch_size"])

    config = est.RunConfig(model_dir=model_dir)
    estimator = est.TPUEstimator(model_fn=model_fn, config=config, use_tpu=False, predict_batch_size=4)
    selected = [sorted(p) + [float(p["y"][0])] for p in estimator.predict(input_fn, predict_keys=["y"])]
    scalars = [
        [[type(p[key]).__name__, p[key].decode() if isinstance(p[key], bytes) else float(p[key])]
         for key in ("label", "total")]
        for p in estimator.predict(input_fn, predict_keys=["total", "label"], yield_single_examples=False)
    ]
    return {"labels_none": sorted(set(seen)), "selected": selected, "scalars": scalars}


def empty_first_feature_eval_run(est: Any, model_dir: str) -> dict:
    """`evaluate` with `use_tpu=False` on 10 rows in batches of 4, 4, 2, where the first feature (sorted)
    with a batch dimension has no rows in the first batch (a `boolean_mask`). Returns the results:
    the loss is the mean of the three batches' losses.
    """
    x = np.arange(10, dtype=np.float32).reshape(10, 1)

    def model_fn(features, labels, mode, params):
        w = tf.compat.v1.get_variable("w", [1, 1], initializer=tf.compat.v1.ones_initializer())
        loss = tf.reduce_mean(tf.square(tf.matmul(features["x"], w))) + 0.0 * tf.reduce_sum(features["a"])
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.0).minimize(
            loss, tf.compat.v1.train.get_global_step()
        )
        return est.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    def input_fn(params):
        dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, x)).batch(params["batch_size"])
        return dataset.map(lambda f, y: ({"a": tf.boolean_mask(f["x"][:, 0], f["x"][:, 0] > 5), "x": f["x"]}, y))

    config = est.RunConfig(model_dir=model_dir)
    estimator = est.TPUEstimator(model_fn=model_fn, config=config, use_tpu=False, eval_batch_size=4)
    return {key: float(value) for key, value in estimator.evaluate(input_fn).items()}


# --- I: keras_in_model_fn -----------------------------------------------------------------------


def keras_in_model_fn_program(est: Any) -> Program:
    """A `tf.keras.Sequential` built inside model_fn on every call; a TF1 SGD optimizer.

    Dense(3, kernel "ones") -> Dense(1, kernel 0.1); no `var_list` (the
    TRAINABLE_VARIABLES collection). Run: train(max_steps=4), evaluate().
    """

    def model_fn(features, labels, mode, params):
        model = tf.keras.Sequential(
            [
                tf.keras.layers.Dense(3, kernel_initializer="ones", bias_initializer="zeros"),
                tf.keras.layers.Dense(1, kernel_initializer=tf.keras.initializers.Constant(0.1)),
            ]
        )
        predictions = model(features["x"])
        if mode == est.ModeKeys.PREDICT:
            return est.TPUEstimatorSpec(mode, predictions={"y": predictions})
        loss = tf.compat.v1.losses.mean_squared_error(labels, predictions)
        train_op = None
        if mode == est.ModeKeys.TRAIN:
            train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(
                loss, global_step=tf.compat.v1.train.get_or_create_global_step()
            )
        return est.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    return _regression_program(model_fn, max_steps=4, eval_steps=None)


def keras_batch_norm_program(est: Any) -> Program:
    """A `tf.keras` BatchNormalization in model_fn whose updates nothing fetches.

    In the original's TF1 graph, Keras layers kept their updates in
    `layer.updates`, not in `UPDATE_OPS`: the moving statistics never moved.
    Run: train(max_steps=6), evaluate().
    """

    def model_fn(features, labels, mode, params):
        normed = tf.keras.layers.BatchNormalization(momentum=0.5)(
            features["x"] * 2.0 + 3.0, training=mode == est.ModeKeys.TRAIN
        )
        predictions = _linear(normed)
        if mode == est.ModeKeys.PREDICT:
            return est.TPUEstimatorSpec(mode, predictions={"y": predictions})
        loss = tf.compat.v1.losses.mean_squared_error(labels, predictions)
        train_op = None
        if mode == est.ModeKeys.TRAIN:
            update_ops = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
            with tf.control_dependencies(update_ops):
                train_op = tf.compat.v1.train.GradientDescentOptimizer(0.05).minimize(
                    loss, global_step=tf.compat.v1.train.get_or_create_global_step()
                )
        return est.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    return _regression_program(model_fn, max_steps=6, eval_steps=None)


def moving_average_program(est: Any) -> Program:
    """`ExponentialMovingAverage.apply` run after each SGD step, as ResNet/EfficientNet TPU code does.

    Run: train(max_steps=5), evaluate().
    """

    def model_fn(features, labels, mode, params):
        predictions = _linear(features["x"])
        if mode == est.ModeKeys.PREDICT:
            return est.TPUEstimatorSpec(mode, predictions={"y": predictions})
        loss = tf.compat.v1.losses.mean_squared_error(labels, predictions)
        train_op = None
        if mode == est.ModeKeys.TRAIN:
            step = tf.compat.v1.train.get_or_create_global_step()
            minimize = tf.compat.v1.train.GradientDescentOptimizer(0.05).minimize(loss, step)
            ema = tf.compat.v1.train.ExponentialMovingAverage(decay=0.5)
            with tf.control_dependencies([minimize]):
                train_op = ema.apply(tf.compat.v1.trainable_variables())
        return est.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    return _regression_program(model_fn, max_steps=5, eval_steps=None)


# --- J: bert_like -------------------------------------------------------------------------------

BERT_VOCAB = 10
BERT_SEQ_LEN = 4
BERT_HIDDEN = 6
BERT_LABELS = 2
BERT_TRAIN_STEPS = 12
BERT_PARAMS = {"learning_rate": 0.05, "num_train_steps": BERT_TRAIN_STEPS, "num_warmup_steps": 3}


def bert_checkpoint_values() -> dict[str, np.ndarray]:
    """The 'pre-trained' `bert/*` variables in `write_bert_checkpoint`'s file."""
    rng = np.random.RandomState(6)
    return {
        "bert/embeddings/word_embeddings": rng.randn(BERT_VOCAB, BERT_HIDDEN).astype(np.float32),
        "bert/pooler/dense/kernel": 0.5 * rng.randn(BERT_HIDDEN, BERT_HIDDEN).astype(np.float32),
        "bert/pooler/dense/bias": 0.1 * rng.randn(BERT_HIDDEN).astype(np.float32),
    }


def write_bert_checkpoint(prefix: str) -> str:
    """The initial checkpoint of `bert_like_program` (its `init_checkpoint` param)."""
    return write_checkpoint(prefix, bert_checkpoint_values())


def bert_data(rows: int, seed: int, fake_rows: int = 0) -> dict[str, np.ndarray]:
    """Token ids, labels and `is_real_example`; the last `fake_rows` are padding (0, label 0)."""
    rng = np.random.RandomState(seed)
    input_ids = rng.randint(0, BERT_VOCAB, (rows, BERT_SEQ_LEN)).astype(np.int32)
    label_ids = (input_ids.sum(axis=1) % 2).astype(np.int32)
    is_real_example = np.ones(rows, np.float32)
    if fake_rows:
        input_ids[-fake_rows:] = 0
        label_ids[-fake_rows:] = 0
        is_real_example[-fake_rows:] = 0.0
    return {"input_ids": input_ids, "label_ids": label_ids, "is_real_example": is_real_example}


class AdamWeightDecayOptimizer(tf.compat.v1.train.Optimizer):
    """A simplified BERT-style Adam with decoupled weight decay.

    Its own `apply_gradients` creates `<var>/adam_m` and `<var>/adam_v` with
    `get_variable`, assigns the variables directly, and neither bias-corrects
    nor touches `global_step`.
    """

    def __init__(
        self,
        learning_rate: Any,
        weight_decay_rate: float = 0.0,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-6,
        exclude_from_weight_decay: list[str] | None = None,
        name: str = "AdamWeightDecayOptimizer",
    ):
        super().__init__(False, name)
        self.learning_rate = learning_rate
        self.weight_decay_rate = weight_decay_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.exclude_from_weight_decay = exclude_from_weight_decay or []

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        assignments = []
        for grad, param in grads_and_vars:
            if grad is None or param is None:
                continue
            param_name = re.sub(r":\d+$", "", param.name)
            slots = [
                tf.compat.v1.get_variable(
                    f"{param_name}/{slot}",
                    param.shape.as_list(),
                    tf.float32,
                    initializer=tf.compat.v1.zeros_initializer(),
                    trainable=False,
                )
                for slot in ("adam_m", "adam_v")
            ]
            m, v = slots
            next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
            next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
            update = next_m / (tf.sqrt(next_v) + self.epsilon)
            if self.weight_decay_rate and not any(
                word in param_name for word in self.exclude_from_weight_decay
            ):
                update += self.weight_decay_rate * param
            assignments += [
                param.assign(param - self.learning_rate * update),
                m.assign(next_m),
                v.assign(next_v),
            ]
        return tf.group(*assignments, name=name)


def _bert_forward(features: dict) -> dict[str, tf.Tensor]:
    """One-hot embedding lookup, mean pool, `bert/pooler/dense` and the classifier head."""
    with tf.compat.v1.variable_scope("bert"):
        with tf.compat.v1.variable_scope("embeddings"):
            table = tf.compat.v1.get_variable(
                "word_embeddings",
                [BERT_VOCAB, BERT_HIDDEN],
                initializer=tf.compat.v1.zeros_initializer(),
            )
            one_hot_ids = tf.one_hot(features["input_ids"], depth=BERT_VOCAB)  # as on TPU
            embedded = tf.einsum("bsv,vh->bsh", one_hot_ids, table)
        with tf.compat.v1.variable_scope("pooler"), tf.compat.v1.variable_scope("dense"):
            kernel = tf.compat.v1.get_variable(
                "kernel", [BERT_HIDDEN, BERT_HIDDEN], initializer=tf.compat.v1.zeros_initializer()
            )
            bias = tf.compat.v1.get_variable(
                "bias", [BERT_HIDDEN], initializer=tf.compat.v1.zeros_initializer()
            )
            pooled = tf.tanh(tf.matmul(tf.reduce_mean(embedded, axis=1), kernel) + bias)
    output_value = 0.3 * np.random.RandomState(7).randn(BERT_LABELS, BERT_HIDDEN)
    output_weights = tf.compat.v1.get_variable(
        "output_weights",
        [BERT_LABELS, BERT_HIDDEN],
        initializer=tf.compat.v1.constant_initializer(output_value.astype(np.float32)),
    )
    output_bias = tf.compat.v1.get_variable(
        "output_bias", [BERT_LABELS], initializer=tf.compat.v1.zeros_initializer()
    )
    logits = tf.nn.bias_add(tf.matmul(pooled, output_weights, transpose_b=True), output_bias)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot = tf.one_hot(features["label_ids"], depth=BERT_LABELS, dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(one_hot * log_probs, axis=-1)
    return {
        "logits": logits,
        "probabilities": tf.nn.softmax(logits, axis=-1),
        "per_example_loss": per_example_loss,
        "loss": tf.reduce_mean(per_example_loss),
    }


def _bert_init_from_checkpoint(init_checkpoint: str) -> None:
    """`init_from_checkpoint` for every trainable variable the checkpoint holds (run_classifier style)."""
    by_name = {re.sub(r":\d+$", "", v.name): v for v in tf.compat.v1.trainable_variables()}
    assignment_map = {
        name: name
        for name, _ in tf.compat.v1.train.list_variables(init_checkpoint)
        if name in by_name
    }
    tf.compat.v1.train.init_from_checkpoint(init_checkpoint, assignment_map)


def _bert_train_op(loss: tf.Tensor, params: dict) -> tf.Operation:
    """Warm-up then linear decay, clipping by global norm 1.0, and a hand-incremented global step.

    The step is read (for the learning rate) before it is incremented, as in a `tf.function`.
    """
    global_step = tf.compat.v1.train.get_or_create_global_step()
    learning_rate = tf.compat.v1.train.polynomial_decay(
        tf.constant(params["learning_rate"], tf.float32),
        global_step,
        params["num_train_steps"],
        end_learning_rate=0.0,
        power=1.0,
    )
    step = tf.cast(global_step, tf.float32)
    warmup_steps = float(params["num_warmup_steps"])
    is_warmup = tf.cast(step < warmup_steps, tf.float32)
    warmup_rate = params["learning_rate"] * step / warmup_steps
    learning_rate = (1.0 - is_warmup) * learning_rate + is_warmup * warmup_rate
    optimizer = AdamWeightDecayOptimizer(
        learning_rate, weight_decay_rate=0.01, exclude_from_weight_decay=["LayerNorm", "bias"]
    )
    tvars = tf.compat.v1.trainable_variables()
    grads, _ = tf.clip_by_global_norm(tf.gradients(loss, tvars), clip_norm=1.0)
    train_op = optimizer.apply_gradients(zip(grads, tvars, strict=True), global_step=global_step)
    # BERT increments without this control dependency; then, in a TF1 Session, the increment
    # races with the learning rate's read of the step and the numbers vary from run to run.
    with tf.control_dependencies([train_op]):
        new_global_step = global_step + 1
        return tf.group(train_op, [global_step.assign(new_global_step)])


def bert_metric_fn(per_example_loss, label_ids, logits, is_real_example):
    """run_classifier's metric_fn: weighted accuracy and mean loss."""
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return {
        "eval_accuracy": tf.compat.v1.metrics.accuracy(
            labels=label_ids, predictions=predictions, weights=is_real_example
        ),
        "eval_loss": tf.compat.v1.metrics.mean(values=per_example_loss, weights=is_real_example),
    }


def bert_like_program(est: Any, init_checkpoint: str) -> Program:
    """A BERT-shaped classifier (see `_bert_forward`, `_bert_train_op`, `bert_metric_fn`).

    Labels travel in `features["label_ids"]` (the input_fns yield features only).
    Train: 32 rows, batch 8, drop_remainder, max_steps=12. Eval: 37 rows (the last
    3 with is_real_example 0), batch 8 without drop_remainder (8, 8, 8, 8, 5), until
    the input ends. Predict: 11 rows, batch 4 (4, 4, 3).
    """

    def model_fn(features, labels, mode, params):
        outputs = _bert_forward(features)
        _bert_init_from_checkpoint(params["init_checkpoint"])
        if mode == est.ModeKeys.TRAIN:
            train_op = _bert_train_op(outputs["loss"], params)
            return est.TPUEstimatorSpec(mode, loss=outputs["loss"], train_op=train_op)
        if mode == est.ModeKeys.EVAL:
            tensors = [
                outputs["per_example_loss"],
                features["label_ids"],
                outputs["logits"],
                features["is_real_example"],
            ]
            return est.TPUEstimatorSpec(
                mode, loss=outputs["loss"], eval_metrics=(bert_metric_fn, tensors)
            )
        return est.TPUEstimatorSpec(mode, predictions={"probabilities": outputs["probabilities"]})

    return _bert_program(model_fn, init_checkpoint)


def _bert_program(model_fn: ModelFn | None, init_checkpoint: str) -> Program:
    return Program(
        model_fn=model_fn,
        train_input_fn=_input_fn(bert_data(32, seed=8), repeat=True),
        eval_input_fn=_input_fn(bert_data(37, seed=9, fake_rows=3), drop_remainder=False),
        predict_input_fn=_input_fn(bert_data(11, seed=10), drop_remainder=False),
        params={"init_checkpoint": init_checkpoint, **BERT_PARAMS},
        train_batch_size=8,
        eval_batch_size=8,
        predict_batch_size=4,
        max_steps=BERT_TRAIN_STEPS,
        eval_steps=None,
    )


def _variable_name(variable: tf.Variable) -> str:
    return re.sub(r":\d+$", "", variable.name)


def _run_to_end(session: tf.compat.v1.Session, fetches: Any) -> list:
    """Runs `fetches` until the input raises OutOfRangeError; returns every result."""
    results = []
    while True:
        try:
            results.append(session.run(fetches))
        except tf.errors.OutOfRangeError:
            return results


def bert_session_loop(init_checkpoint: str, train_steps: int = BERT_TRAIN_STEPS) -> dict:
    """`bert_like_program` run by hand in `tf.compat.v1.Graph`s and Sessions (no estimator).

    Trains `train_steps` steps, then evaluates and predicts with the trained
    values, as the estimator would (its eval `loss` is the mean of the
    per-batch losses). Works under TF 2.15 and TF 2.21.

    Returns:
        `{"variables": {name: array}, "evaluate": {key: value}, "predictions": array}`.
    """
    program = _bert_program(model_fn=None, init_checkpoint=init_checkpoint)  # its inputs only
    params = dict(program.params)

    def batches(input_fn: InputFn, batch_size: int) -> dict:
        dataset = input_fn({"batch_size": batch_size})
        return tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()

    with tf.Graph().as_default():
        tf.compat.v1.random.set_random_seed(SEED)
        global_step = tf.compat.v1.train.get_or_create_global_step()
        outputs = _bert_forward(batches(program.train_input_fn, program.train_batch_size))
        _bert_init_from_checkpoint(init_checkpoint)
        train_op = _bert_train_op(outputs["loss"], params)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for _ in range(train_steps):
                session.run(train_op)
            variables = {_variable_name(v): session.run(v) for v in tf.compat.v1.global_variables()}

    def restored_session() -> tf.compat.v1.Session:
        session = tf.compat.v1.Session()
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(tf.compat.v1.local_variables_initializer())
        session.run(
            [v.assign(variables[_variable_name(v)]) for v in tf.compat.v1.global_variables()]
        )
        return session

    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        features = batches(program.eval_input_fn, program.eval_batch_size)
        outputs = _bert_forward(features)
        _bert_init_from_checkpoint(init_checkpoint)
        metrics = bert_metric_fn(
            outputs["per_example_loss"],
            features["label_ids"],
            outputs["logits"],
            features["is_real_example"],
        )
        metrics["loss"] = tf.compat.v1.metrics.mean(outputs["loss"])
        with restored_session() as session:
            _run_to_end(session, [update for _, update in metrics.values()])
            evaluate = session.run({key: value for key, (value, _) in metrics.items()})
            evaluate["global_step"] = session.run(global_step)

    with tf.Graph().as_default():
        tf.compat.v1.train.get_or_create_global_step()
        outputs = _bert_forward(batches(program.predict_input_fn, program.predict_batch_size))
        _bert_init_from_checkpoint(init_checkpoint)
        with restored_session() as session:
            predictions = np.concatenate(_run_to_end(session, outputs["probabilities"]))

    return {"variables": variables, "evaluate": evaluate, "predictions": predictions}
