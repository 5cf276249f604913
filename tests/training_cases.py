"""`train_and_evaluate`, the exporters and the experimental hooks, as cases that run unchanged on both libraries.

Like `original_api_cases.py` (whose tiny program, one weight `w` fitted to
ones, this reuses): each case is a function of an `api` namespace with
`api.estimator` (`tf.compat.v1.estimator` on the original,
`keras_tpu_estimator.estimator` here), `api.early_stopping` (the module of
`read_eval_metrics`) and `api.model_dir` (an empty temporary directory).

`ERRORS`: each case makes one call the original rejects; recorded as
`[exception type, normalised message]`. `DEFAULTS`: each returns a JSON-able
value. `scripts/record_training_numbers.py` runs them on the original and
writes `tests/recorded_training_numbers.py`; `tests/test_training.py`,
`tests/test_exporters.py` and `tests/test_early_stopping.py` compare.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import tensorflow as tf

try:
    from tests import original_api_cases as program
except ImportError:  # run from scripts/ with tests/ on sys.path
    import original_api_cases as program

Case = Callable[[Any], Any]
ERRORS: dict[str, Case] = {}
DEFAULTS: dict[str, Case] = {}
normalise = program.normalise


def original_api(model_dir: str) -> types.SimpleNamespace:
    """The original's `api` namespace (TF 2.15 + tensorflow-estimator only)."""
    from tensorflow_estimator.python.estimator import early_stopping

    return types.SimpleNamespace(estimator=tf.compat.v1.estimator, early_stopping=early_stopping,
                                 model_dir=model_dir)


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


@contextlib.contextmanager
def tf_config(value: dict) -> Iterator[None]:
    """TF_CONFIG set to `value` inside (read by RunConfig when it is made)."""
    saved = os.environ.get("TF_CONFIG")
    os.environ["TF_CONFIG"] = json.dumps(value)
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TF_CONFIG"]
        else:
            os.environ["TF_CONFIG"] = saved


def estimator_for(api: Any, save_steps: int | None = 1, iterations: int = 1) -> Any:
    config = api.estimator.tpu.RunConfig(
        model_dir=api.model_dir, save_checkpoints_steps=save_steps,
        tpu_config=api.estimator.tpu.TPUConfig(iterations_per_loop=iterations))
    return program.estimator_for(api, config=config)


def repeated_input_fn(params):
    return program.input_fn(params).repeat()


def eval_steps(directory: str) -> list:
    """`[step, loss]` of each evaluation written in `directory` (TF1 simple values or TF2 tensors)."""
    found = []
    for path in sorted(tf.io.gfile.glob(os.path.join(directory, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag != "loss":
                    continue
                number = value.simple_value if value.HasField("simple_value") else tf.make_ndarray(value.tensor)
                found.append([int(event.step), float(number)])
    return found


def relative(api: Any, path: Any) -> Any:
    """An export path relative to model_dir, its timestamp as `<t>`; None stays None."""
    if path is None:
        return None
    text = os.path.relpath(tf.compat.as_str_any(path), api.model_dir)
    return [type(path).__name__, re.sub(r"\b\d{10}\b", "<t>", text)]


def kept(api: Any, name: str) -> int:
    directory = os.path.join(api.model_dir, "export", name)
    return len(tf.io.gfile.listdir(directory)) if tf.io.gfile.exists(directory) else 0


def exporter_named(api: Any, name: Any) -> Any:
    class Named(api.estimator.Exporter):
        @property
        def name(self):
            return name

        def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
            return None

    return Named()


def write_tf1_events(directory: str, evaluations: list) -> None:
    """`[(step, {tag: value})]` as the original's evaluate wrote them: one event of simple values each."""
    with tf.summary.create_file_writer(directory).as_default():
        for step, metrics in evaluations:
            values = [tf.compat.v1.Summary.Value(tag=tag, simple_value=value) for tag, value in metrics.items()]
            tf.summary.experimental.write_raw_pb(tf.compat.v1.Summary(value=values).SerializeToString(), step=step)


def spec(api: Any, **kwargs: Any) -> Any:
    return api.estimator.EvalSpec(program.input_fn, **kwargs)


# --- TrainSpec / EvalSpec ---------------------------------------------------------------------------

_error("TrainSpec.input_fn=1")(lambda api: api.estimator.TrainSpec(1))
_error("TrainSpec.max_steps=0")(lambda api: api.estimator.TrainSpec(program.input_fn, max_steps=0))
_error("TrainSpec.max_steps=-3")(lambda api: api.estimator.TrainSpec(program.input_fn, max_steps=-3))
_error("TrainSpec.hooks=[1]")(lambda api: api.estimator.TrainSpec(program.input_fn, hooks=[1]))
_error("TrainSpec.saving_listeners=[1]")(
    lambda api: api.estimator.TrainSpec(program.input_fn, saving_listeners=[1]))
_error("EvalSpec.input_fn=None")(lambda api: api.estimator.EvalSpec(None))
_error("EvalSpec.steps=0")(lambda api: spec(api, steps=0))
_error("EvalSpec.name=1")(lambda api: spec(api, name=1))
_error("EvalSpec.hooks=[1]")(lambda api: spec(api, hooks=[1]))
_error("EvalSpec.exporters=1")(lambda api: spec(api, exporters=1))
_error("EvalSpec.exporters=[None]")(lambda api: spec(api, exporters=[None]))
_error("EvalSpec.exporters=[name None]")(lambda api: spec(api, exporters=[exporter_named(api, None)]))
_error("EvalSpec.exporters=[name 3]")(lambda api: spec(api, exporters=[exporter_named(api, 3)]))
_error("EvalSpec.exporters=[a, a]")(
    lambda api: spec(api, exporters=[exporter_named(api, "a"), exporter_named(api, "a")]))
_error("EvalSpec.start_delay_secs=-1")(lambda api: spec(api, start_delay_secs=-1))
_error("EvalSpec.throttle_secs=-1")(lambda api: spec(api, throttle_secs=-1))


@_default("TrainSpec and EvalSpec defaults")
def _spec_defaults(api):
    train = api.estimator.TrainSpec(program.input_fn)
    evaluation = spec(api, exporters=exporter_named(api, "one"))
    return {"train": [train.max_steps, list(train.hooks), list(train.saving_listeners)],
            "eval": [evaluation.steps, evaluation.name, list(evaluation.hooks), type(evaluation.exporters).__name__,
                     len(evaluation.exporters), evaluation.start_delay_secs, evaluation.throttle_secs],
            "fields": [list(type(train)._fields), list(type(evaluation)._fields)]}


# --- train_and_evaluate ----------------------------------------------------------------------------

def _train_spec(api, **kwargs):
    return api.estimator.TrainSpec(repeated_input_fn, **kwargs)


_error("train_and_evaluate.eval_spec=None")(
    lambda api: api.estimator.train_and_evaluate(estimator_for(api), _train_spec(api, max_steps=1), None))
_error("train_and_evaluate.estimator=object()")(
    lambda api: api.estimator.train_and_evaluate(object(), _train_spec(api, max_steps=1), spec(api)))
_error("train_and_evaluate.train_spec=None")(
    lambda api: api.estimator.train_and_evaluate(estimator_for(api), None, spec(api)))


@_error("train_and_evaluate.evaluator with index 1")
def _second_evaluator(api):
    cluster = {"chief": ["localhost:1"], "worker": ["localhost:2"]}
    with tf_config({"cluster": cluster, "task": {"type": "evaluator", "index": 1}}):
        estimator = estimator_for(api)
    api.estimator.train_and_evaluate(estimator, _train_spec(api, max_steps=1), spec(api))


def _local_run(api, train_spec, eval_spec, save_steps=1):
    estimator = estimator_for(api, save_steps)
    metrics, exports = api.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
    return {
        "metrics": None if metrics is None else {k: [type(v).__name__, float(v)] for k, v in sorted(metrics.items())},
        "exports": None if exports is None else [relative(api, p) for p in exports],
        "evaluations": eval_steps(estimator.eval_dir()),
    }


@_default("train_and_evaluate locally, every checkpoint")
def _local_every_checkpoint(api):
    receiver = program.serving_input_receiver_fn_for(api)
    exporters = [api.estimator.LatestExporter("latest", receiver, exports_to_keep=2),
                 api.estimator.FinalExporter("final", receiver)]
    result = _local_run(api, _train_spec(api, max_steps=3),
                        spec(api, steps=2, exporters=exporters, start_delay_secs=0, throttle_secs=0))
    result["kept"] = [kept(api, "latest"), kept(api, "final")]
    return result


@_default("train_and_evaluate locally, input ends before max_steps is given")
def _local_to_the_end_of_input(api):
    receiver = program.serving_input_receiver_fn_for(api)
    return _local_run(api, api.estimator.TrainSpec(program.input_fn),
                      spec(api, steps=None, exporters=[api.estimator.FinalExporter("final", receiver)],
                           throttle_secs=0), save_steps=3)


@_default("train_and_evaluate locally, named evaluation and a BestExporter")
def _local_named(api):
    receiver = program.serving_input_receiver_fn_for(api)
    exporters = [api.estimator.BestExporter("best", receiver)]
    estimator = estimator_for(api, 2)
    metrics, exports = api.estimator.train_and_evaluate(
        estimator, _train_spec(api, max_steps=4), spec(api, steps=1, name="held_out", exporters=exporters,
                                                       throttle_secs=0))
    return {"global_step": int(metrics["global_step"]), "exports": [relative(api, p) for p in exports],
            "dirs": sorted(d for d in tf.io.gfile.listdir(api.model_dir) if d.rstrip("/").startswith("eval")),
            "evaluations": eval_steps(estimator.eval_dir("held_out")), "kept": kept(api, "best")}


@_default("train_and_evaluate again at max_steps")
def _again_at_max_steps(api):
    train_spec, eval_spec = _train_spec(api, max_steps=2), spec(api, steps=1, throttle_secs=0)
    first = _local_run(api, train_spec, eval_spec)
    return [first["metrics"]["global_step"], _local_run(api, train_spec, eval_spec)["metrics"]]


@_default("train_and_evaluate, a chief alone")
def _chief_alone(api):
    with tf_config({"cluster": {"chief": ["localhost:1"]}, "task": {"type": "chief", "index": 0}}):
        estimator = estimator_for(api, 2)
    returned = api.estimator.train_and_evaluate(estimator, _train_spec(api, max_steps=4), spec(api, steps=1))
    return {"returned": returned, "step": int(estimator.get_variable_value("global_step")),
            "eval": tf.io.gfile.exists(estimator.eval_dir())}


@_default("train_and_evaluate, an evaluator after training ended")
def _evaluator_after_training(api):
    estimator_for(api, 2).train(repeated_input_fn, max_steps=4)
    cluster = {"chief": ["localhost:1"], "worker": ["localhost:2"]}
    with tf_config({"cluster": cluster, "task": {"type": "evaluator", "index": 0}}):
        estimator = estimator_for(api, 2)
    receiver = program.serving_input_receiver_fn_for(api)
    returned = api.estimator.train_and_evaluate(
        estimator, _train_spec(api, max_steps=4),
        spec(api, steps=1, exporters=[api.estimator.FinalExporter("final", receiver)], start_delay_secs=0,
             throttle_secs=0))
    return {"returned": returned, "evaluations": eval_steps(estimator.eval_dir()), "kept": kept(api, "final")}


def dropout_estimator(api: Any, directory: str) -> Any:
    """A dense network with dropout in TRAIN, seeded by `tf_random_seed=3`; saves every 2 of 2-step loops."""
    est = api.estimator

    def model_fn(features, labels, mode, params):
        init = tf.compat.v1.constant_initializer(0.1)
        hidden = tf.compat.v1.layers.dense(features["x"], 8, kernel_initializer=init, name="hidden")
        if mode == est.ModeKeys.TRAIN:
            hidden = tf.compat.v1.nn.dropout(hidden, rate=0.5)
        output = tf.compat.v1.layers.dense(hidden, 1, kernel_initializer=init, name="output")
        loss = tf.reduce_mean(tf.square(output - labels))
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
            loss, global_step=tf.compat.v1.train.get_global_step())
        return est.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    config = est.tpu.RunConfig(model_dir=os.path.join(api.model_dir, directory), save_checkpoints_steps=2,
                               tf_random_seed=3, tpu_config=est.tpu.TPUConfig(iterations_per_loop=2))
    return est.tpu.TPUEstimator(model_fn, config=config, use_tpu=False, train_batch_size=8, eval_batch_size=8)


def dropout_input_fn(params):
    x = np.random.RandomState(0).randn(64, 4).astype(np.float32)
    dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, x[:, :1]))
    return dataset.repeat().batch(params["batch_size"], drop_remainder=True)


@_default("train_and_evaluate, dropout under tf_random_seed")
def _dropout_train_and_evaluate(api):
    """Evaluations between the saves leave training's dropout masks as they were: train alone's weights."""
    kernels = []
    for directory in ("train", "train_and_evaluate"):
        estimator = dropout_estimator(api, directory)
        if directory == "train":
            estimator.train(dropout_input_fn, max_steps=8)
        else:
            api.estimator.train_and_evaluate(estimator, api.estimator.TrainSpec(dropout_input_fn, max_steps=8),
                                             api.estimator.EvalSpec(dropout_input_fn, steps=1, throttle_secs=0))
        kernels.append([float(v) for v in estimator.get_variable_value("output/kernel").ravel()])
    return kernels


@_default("train_and_evaluate, a plain Estimator with exporters and an early-stopping hook")
def _plain_estimator(api):
    est = api.estimator

    def model_fn(features, labels, mode):
        w = tf.compat.v1.get_variable("w", [1, 1], initializer=tf.compat.v1.zeros_initializer())
        y = tf.matmul(features["x"], w)
        if mode == est.ModeKeys.PREDICT:
            return est.EstimatorSpec(mode, predictions={"y": y})
        loss = tf.reduce_mean(tf.square(y - labels))
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
            loss, global_step=tf.compat.v1.train.get_global_step())
        return est.EstimatorSpec(mode, loss=loss, train_op=train_op)

    def input_fn():
        return program.input_fn({"batch_size": 2})

    estimator = est.Estimator(model_fn, config=est.RunConfig(model_dir=api.model_dir, save_checkpoints_steps=2))
    receiver = program.serving_input_receiver_fn_for(api)
    stop = est.experimental.stop_if_lower_hook(estimator, "loss", 0.2, run_every_secs=None, run_every_steps=1)
    metrics, exports = est.train_and_evaluate(
        estimator, est.TrainSpec(lambda: input_fn().repeat(), max_steps=20, hooks=[stop]),
        est.EvalSpec(input_fn, steps=2, throttle_secs=0, exporters=[est.BestExporter("best", receiver),
                                                                     est.FinalExporter("final", receiver)]))
    return {"metrics": {k: float(v) for k, v in sorted(metrics.items())}, "exports": [relative(api, p) for p in exports],
            "evaluations": eval_steps(estimator.eval_dir()), "kept": [kept(api, "best"), kept(api, "final")]}


# --- exporters ------------------------------------------------------------------------------------

def _best(api, **kwargs):
    return api.estimator.BestExporter("best", program.serving_input_receiver_fn_for(api), **kwargs)


_error("LatestExporter.exports_to_keep=0")(
    lambda api: api.estimator.LatestExporter("latest", program.serving_input_receiver_fn_for(api), exports_to_keep=0))
_error("BestExporter.exports_to_keep=-2")(lambda api: _best(api, exports_to_keep=-2))
_error("BestExporter.compare_fn=None")(lambda api: _best(api, compare_fn=None))
_error("BestExporter.compare_fn without best_eval_result")(
    lambda api: _best(api, compare_fn=lambda current_eval_result: True))
_error("BestExporter.compare_fn without current_eval_result")(
    lambda api: _best(api, compare_fn=lambda best_eval_result: True))
_error("BestExporter.compare_fn with other arguments")(
    lambda api: _best(api, compare_fn=lambda best_eval_result, current_eval_result, margin: True))


def _compare(best_eval_result, current_eval_result, key):
    return current_eval_result[key] > best_eval_result[key]


def _compare_keyword_only(best_eval_result, current_eval_result, *, key="loss"):
    return current_eval_result[key] < best_eval_result[key]


class _Comparer:
    def __call__(self, best_eval_result, current_eval_result):
        return current_eval_result["loss"] < best_eval_result["loss"]


@_default("BestExporter.compare_fn as a partial, keyword-only and callable object")
def _compare_fn_forms(api):
    """Programs bound the metric with functools.partial (the original's fn_args dropped bound arguments)."""
    forms = [functools.partial(_compare, key="f1"), functools.partial(_compare, key="f1", best_eval_result=None),
             functools.partial(_compare, {"f1": 0.0}, key="f1"), _compare_keyword_only, _Comparer()]
    made = []
    for compare_fn in forms:
        try:
            made.append(_best(api, compare_fn=compare_fn).name)
        except ValueError as error:
            made.append(normalise(str(error), api.model_dir))
    return made


def _trained(api, steps=2):
    estimator = estimator_for(api, 1)
    estimator.train(repeated_input_fn, max_steps=steps)
    return estimator


@_error("BestExporter.export, an eval_result without loss")
def _best_without_loss(api):
    estimator = _trained(api)
    exporter = _best(api, event_file_pattern=None)
    path = os.path.join(api.model_dir, "export", "best")
    checkpoint = tf.train.latest_checkpoint(api.model_dir)
    exporter.export(estimator, path, checkpoint, {"loss": 1.0, "global_step": 2}, False)
    exporter.export(estimator, path, checkpoint, {"global_step": 2}, False)


@_error("BestExporter.export, event files without loss")
def _events_without_loss(api):
    estimator = _trained(api)
    write_tf1_events(os.path.join(api.model_dir, "eval"), [(1, {"mae": 1.0}), (2, {"mae": 2.0})])
    _best(api).export(estimator, os.path.join(api.model_dir, "export", "best"),
                      tf.train.latest_checkpoint(api.model_dir), {"loss": 1.0, "global_step": 2}, False)


@_default("BestExporter over earlier evaluations")
def _best_over_earlier(api):
    """Earlier evaluations (TF1 event files, as a restarted job finds them) set the best to beat."""
    estimator = _trained(api)
    write_tf1_events(os.path.join(api.model_dir, "eval"), [(1, {"loss": 0.5, "mae": 3.0}), (2, {"loss": 0.25})])
    path = os.path.join(api.model_dir, "export", "best")
    checkpoint = tf.train.latest_checkpoint(api.model_dir)
    exporter = _best(api, exports_to_keep=1)
    calls = []
    for loss in (0.75, 0.5, 0.1, 0.3):  # the first export always happens
        calls.append(relative(api, exporter.export(estimator, path, checkpoint, {"loss": loss, "global_step": 2},
                                                   False)))
    return {"calls": calls, "kept": kept(api, "best")}


@_default("LatestExporter and FinalExporter calls")
def _latest_and_final(api):
    estimator = _trained(api)
    receiver = program.serving_input_receiver_fn_for(api)
    checkpoint = tf.train.latest_checkpoint(api.model_dir)
    latest = api.estimator.LatestExporter("latest", receiver, exports_to_keep=2)
    final = api.estimator.FinalExporter("final", receiver)
    calls = []
    for is_final in (False, False, False, True):
        for exporter in (latest, final):
            path = os.path.join(api.model_dir, "export", exporter.name)
            calls.append(relative(api, exporter.export(estimator, path, checkpoint, {"global_step": 2}, is_final)))
    return {"calls": calls, "kept": [kept(api, "latest"), kept(api, "final")],
            "names": [latest.name, final.name, _best(api).name, api.estimator.BestExporter().name]}


@_default("Exporter base class")
def _exporter_base(api):
    exporter = api.estimator.Exporter()
    return [exporter.name, exporter.export(None, "", "", {}, False)]


# --- early stopping and the in-memory evaluator --------------------------------------------------

_error("make_early_stopping_hook.estimator=object()")(
    lambda api: api.estimator.experimental.make_early_stopping_hook(object(), lambda: False))
_error("make_early_stopping_hook.both timers")(
    lambda api: api.estimator.experimental.make_early_stopping_hook(
        estimator_for(api), lambda: False, run_every_secs=1, run_every_steps=1))
_error("make_early_stopping_hook.should_stop_fn=1")(
    lambda api: api.estimator.experimental.make_early_stopping_hook(estimator_for(api), 1))
_error("make_early_stopping_hook.no timer")(
    lambda api: api.estimator.experimental.make_early_stopping_hook(
        estimator_for(api), lambda: False, run_every_secs=None))
_error("stop_if_lower_hook.both timers")(
    lambda api: api.estimator.experimental.stop_if_lower_hook(
        estimator_for(api), "loss", 1.0, run_every_steps=1))
_error("InMemoryEvaluatorHook.every_n_iter=0")(
    lambda api: api.estimator.experimental.InMemoryEvaluatorHook(estimator_for(api), program.input_fn, every_n_iter=0))
_error("InMemoryEvaluatorHook.hooks=[1]")(
    lambda api: api.estimator.experimental.InMemoryEvaluatorHook(estimator_for(api), program.input_fn, hooks=[1]))


@_error("InMemoryEvaluatorHook.two workers")
def _in_memory_two_workers(api):
    cluster = {"chief": ["localhost:1"], "worker": ["localhost:2"]}
    with tf_config({"cluster": cluster, "task": {"type": "chief", "index": 0}}):
        estimator = estimator_for(api)
    api.estimator.experimental.InMemoryEvaluatorHook(estimator, program.input_fn)


@_default("make_stop_at_checkpoint_step_hook on the chief")
def _stop_at_checkpoint_step(api):
    estimator = estimator_for(api)
    hook = api.estimator.experimental.make_stop_at_checkpoint_step_hook(estimator, last_step=3)
    estimator.train(repeated_input_fn, max_steps=10, hooks=[hook])
    return [type(hook).__name__, int(estimator.get_variable_value("global_step"))]


@_default("read_eval_metrics")
def _read_eval_metrics(api):
    estimator = _trained(api, 1)
    estimator.evaluate(program.input_fn, steps=1)
    estimator.train(repeated_input_fn, max_steps=3)
    estimator.evaluate(program.input_fn, steps=2)
    return [[step, [list(item) for item in sorted(metrics.items())]] for step, metrics in api.early_stopping.read_eval_metrics(
        estimator.eval_dir()).items()]


def _trained_with_a_hook(api, steps=1, iterations=1):
    """Trained with an early-stopping hook that never stops: the original's checkpoints then hold its
    `signal_early_stopping/STOP` variable, which a later run with such a hook restores."""
    estimator = estimator_for(api, 1, iterations)
    never = api.estimator.experimental.make_early_stopping_hook(estimator, lambda: False, run_every_secs=None,
                                                               run_every_steps=100)
    estimator.train(repeated_input_fn, max_steps=steps, hooks=[never])
    return estimator


@_error("stop_if_lower_hook resuming a checkpoint written without one")
def _stop_hook_on_old_checkpoint(api):
    """The original's hook adds a variable that the earlier checkpoint lacks: its restore fails."""
    estimator = _trained(api, 1)
    estimator.evaluate(program.input_fn, steps=1)
    hook = api.estimator.experimental.stop_if_lower_hook(estimator, "loss", 10.0)
    estimator.train(repeated_input_fn, max_steps=10, hooks=[hook])
    return int(estimator.get_variable_value("global_step"))


@_default("stop_if_lower_hook with evaluations on disk")
def _stop_if_lower(api):
    """The default timer checks at the first run: an earlier evaluation already crossed the threshold."""
    estimator = _trained_with_a_hook(api, 1)
    estimator.evaluate(program.input_fn, steps=1)
    hook = api.estimator.experimental.stop_if_lower_hook(estimator, "loss", 10.0)
    estimator.train(repeated_input_fn, max_steps=10, hooks=[hook])
    return int(estimator.get_variable_value("global_step"))


@_default("stop_if_higher_hook, iterations_per_loop=4 on the CPU path")
def _stop_if_higher_per_step(api):
    """The CPU path ran hooks every step, whatever iterations_per_loop: the stop comes after one step."""
    estimator = _trained_with_a_hook(api, 1, iterations=4)
    estimator.evaluate(program.input_fn, steps=1)
    hook = api.estimator.experimental.stop_if_higher_hook(estimator, "loss", 0.1, run_every_secs=None,
                                                         run_every_steps=3)
    estimator.train(repeated_input_fn, max_steps=12, hooks=[hook])
    return int(estimator.get_variable_value("global_step"))


@_default("stop_if_no_decrease_hook and min_steps, every step")
def _stop_if_no_decrease(api):
    estimator = _trained_with_a_hook(api, 1)
    eval_dir = os.path.join(api.model_dir, "custom_eval")
    write_tf1_events(eval_dir, [(step, {"loss": loss}) for step, loss in ((1, 9.0), (3, 0.5), (4, 0.6), (5, 0.7),
                                                                          (7, 0.55))])
    stopped = []
    for min_steps, patience in ((0, 3), (4, 3), (0, 5)):
        hook = api.estimator.experimental.stop_if_no_decrease_hook(
            estimator, "loss", patience, eval_dir=eval_dir, min_steps=min_steps, run_every_secs=None,
            run_every_steps=2)
        estimator.train(repeated_input_fn, steps=3, hooks=[hook])
        stopped.append(int(estimator.get_variable_value("global_step")))
    return stopped


@_default("InMemoryEvaluatorHook, dropout under tf_random_seed")
def _dropout_in_memory(api):
    estimator = dropout_estimator(api, "in_memory")
    hook = api.estimator.experimental.InMemoryEvaluatorHook(estimator, dropout_input_fn, steps=1, every_n_iter=3)
    estimator.train(dropout_input_fn, max_steps=8, hooks=[hook])
    return {"kernel": [float(v) for v in estimator.get_variable_value("output/kernel").ravel()],
            "evaluations": eval_steps(estimator.eval_dir())}


@_default("InMemoryEvaluatorHook, every 2 runs")
def _in_memory(api):
    estimator = estimator_for(api, None)
    hook = api.estimator.experimental.InMemoryEvaluatorHook(estimator, program.input_fn, steps=1, name="mem",
                                                           every_n_iter=2)
    estimator.train(repeated_input_fn, max_steps=5, hooks=[hook])
    return {"evaluations": eval_steps(estimator.eval_dir("mem")), "checkpoint_path": _texts(estimator.eval_dir("mem"))}


def _texts(directory: str) -> int:
    """How many `checkpoint_path` text summaries `directory` holds."""
    count = 0
    for path in tf.io.gfile.glob(os.path.join(directory, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            count += sum(value.tag.startswith("checkpoint_path") for value in event.summary.value)
    return count

