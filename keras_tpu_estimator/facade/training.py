"""`tf.estimator.train_and_evaluate`: train to `max_steps`, evaluating and exporting new checkpoints.

Owns `TrainSpec`, `EvalSpec` (with the original's checks) and the loop
around an estimator's public methods (`train`, `evaluate`,
`export_saved_model`, `latest_checkpoint`, `model_dir`, `config`), so it
runs a `TPUEstimator` or a plain `Estimator` of this library alike. What
runs where, from `TF_CONFIG`'s task (as the original's `_TrainingExecutor`):

- no cluster (local): `estimator.train` with a saving listener that, after
  each checkpoint save, evaluates it unless the last evaluation started less
  than `throttle_secs` ago, runs the exporters, and evaluates the last
  checkpoint when training ends if it was not; returns
  `(eval_result, export_results)` of the last evaluation;
- `chief` / `worker`: train (the `TrainSpec`'s saving listeners on the
  chief only); under MultiWorkerMirroredStrategy all trainers step together;
- `master` alone (Cloud ML Engine's single machine): trains and evaluates as
  in local mode;
- `evaluator`: waits `start_delay_secs`, then evaluates each new checkpoint
  (at most every `throttle_secs`) and runs the exporters, until it has
  evaluated a checkpoint at `max_steps`;
- `ps`: an error: training here is synchronous, without parameter servers.

Example:

```python
from keras_tpu_estimator.estimator import LatestExporter

train_spec = TrainSpec(train_input_fn, max_steps=2)
eval_spec = EvalSpec(eval_input_fn, steps=1, exporters=[LatestExporter("latest", receiver_fn)])
metrics, export_results = train_and_evaluate(estimator, train_spec, eval_spec)
assert metrics["global_step"] == 2 and len(export_results) == 1
```
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

import keras
import tensorflow as tf

from keras_tpu_estimator.engine import eager_call
from keras_tpu_estimator.utils import get_logger

from .exporters import Exporter
from .nested_evaluation import evaluating_during_training

_log = get_logger(__name__)
_ESTIMATOR_API = ("train", "evaluate", "export_saved_model", "latest_checkpoint", "model_dir", "config")
_TASK_TYPES = ["chief", "evaluator", "master", "ps", "worker"]  # the original's list, in its order
# The original's evaluation statuses.
EVALUATED, MISSING_CHECKPOINT, NO_NEW_CHECKPOINT = "evaluated", "missing checkpoint", "no new checkpoint"
_NO_PS = (
    "keras_tpu_estimator trains synchronously with tf.distribute.MultiWorkerMirroredStrategy, which has no "
    "parameter servers: list the trainers as 'chief' and 'worker' tasks in TF_CONFIG (an 'evaluator' task "
    "evaluates), and start no 'ps' tasks."
)


def _check_input_fn(input_fn: Any) -> None:
    if not callable(input_fn):
        raise TypeError(f"`input_fn` must be callable, given: {input_fn}")


def _check_hooks(hooks: Iterable[Any] | None) -> tuple:
    hooks = tuple(hooks or [])
    for hook in hooks:
        if not isinstance(hook, tf.compat.v1.train.SessionRunHook | keras.callbacks.Callback):
            raise TypeError(
                f"All hooks must be `SessionRunHook` instances, given: {hook}. keras_tpu_estimator "
                "also takes keras.callbacks.Callback objects."
            )
    return hooks


def _check_saving_listeners(saving_listeners: Iterable[Any] | None) -> tuple:
    listeners = tuple(saving_listeners or [])
    for listener in listeners:
        if not isinstance(listener, tf.compat.v1.train.CheckpointSaverListener):
            raise TypeError(
                f"All saving_listeners must be `CheckpointSaverListener` instances, given: {listener}"
            )
    return listeners


def _check_exporters(exporters: Any) -> tuple:
    if not exporters:
        return ()
    if isinstance(exporters, Exporter):
        exporters = [exporters]
    names: list[str] = []
    try:
        for exporter in exporters:
            if not isinstance(exporter, Exporter):
                raise TypeError
            if not exporter.name:
                raise ValueError(
                    "An Exporter cannot have a name that is `None` or empty. All exporter names: "
                    f"{[e.name for e in exporters]}"
                )
            if not isinstance(exporter.name, str):
                raise ValueError(f"An Exporter must have a string name. Given: {type(exporter.name)}")
            if exporter.name in names:
                raise ValueError(
                    "`exporters` must have unique names. Such a name cannot be `None`. All exporter names: "
                    f"{[e.name for e in exporters]}"
                )
            names.append(exporter.name)
    except TypeError:
        raise TypeError(
            f"`exporters` must be an Exporter, an iterable of Exporter, or `None`, found {exporters}."
        ) from None
    return tuple(exporters)


class TrainSpec(collections.namedtuple("TrainSpec", ["input_fn", "max_steps", "hooks", "saving_listeners"])):
    """The training half of `train_and_evaluate`: input, duration, hooks.

    Args:
        input_fn: `input_fn(params)` for training.
        max_steps: Train until the global step reaches this (None: forever).
        hooks: Session hooks or Keras callbacks, on every trainer.
        saving_listeners: `CheckpointSaverListener`s, on the chief.

    Example:

    ```python
    TrainSpec(train_input_fn, max_steps=2, hooks=[tf.compat.v1.train.StopAtStepHook(last_step=1)])
    ```
    """

    def __new__(
        cls,
        input_fn: Callable[..., Any],
        max_steps: int | None = None,
        hooks: Iterable[Any] | None = None,
        saving_listeners: Iterable[Any] | None = None,
    ) -> TrainSpec:
        _check_input_fn(input_fn)
        if max_steps is not None and max_steps <= 0:
            raise ValueError(f"Must specify max_steps > 0, given: {max_steps}")
        return super().__new__(
            cls, input_fn, max_steps, _check_hooks(hooks), _check_saving_listeners(saving_listeners)
        )


class EvalSpec(
    collections.namedtuple(
        "EvalSpec", ["input_fn", "steps", "name", "hooks", "exporters", "start_delay_secs", "throttle_secs"]
    )
):
    """The evaluation half of `train_and_evaluate`: input, steps, exporters and timing.

    Args:
        input_fn: `input_fn(params)` for evaluation.
        steps: Steps per evaluation (None: to the end of the input).
        name: Evaluations go to `model_dir/eval_<name>` (None: `eval`).
        hooks: Session hooks or Keras callbacks for `evaluate`.
        exporters: An `Exporter`, several, or None; run after every evaluation.
        start_delay_secs: An `evaluator` task waits this long before its first evaluation.
        throttle_secs: No evaluation starts less than this many seconds after the last one started.

    Example:

    ```python
    from keras_tpu_estimator.estimator import FinalExporter

    EvalSpec(eval_input_fn, steps=100, exporters=FinalExporter("final", receiver_fn), throttle_secs=60)
    ```
    """

    def __new__(
        cls,
        input_fn: Callable[..., Any],
        steps: int | None = 100,
        name: str | None = None,
        hooks: Iterable[Any] | None = None,
        exporters: Any = None,
        start_delay_secs: float = 120,
        throttle_secs: float = 600,
    ) -> EvalSpec:
        _check_input_fn(input_fn)
        if steps is not None and steps <= 0:
            raise ValueError(f"Must specify steps > 0, given: {steps}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"`name` must be string, given: {name}")
        hooks = _check_hooks(hooks)
        exporters = _check_exporters(exporters)
        if start_delay_secs < 0:
            raise ValueError(f"Must specify start_delay_secs >= 0, given: {start_delay_secs}")
        if throttle_secs < 0:
            raise ValueError(f"Must specify throttle_secs >= 0, given: {throttle_secs}")
        return super().__new__(cls, input_fn, steps, name, hooks, exporters, start_delay_secs, throttle_secs)


class _Evaluator:
    """Evaluates the newest checkpoint (if it is new) and runs the exporters on the result."""

    def __init__(self, estimator: Any, eval_spec: EvalSpec, max_training_steps: int | None):
        self._estimator = estimator
        self._eval_spec = eval_spec
        self._max_training_steps = max_training_steps
        self._previous_checkpoint: str | None = None
        self._last_warning_time = 0.0

    def _warn(self, message: str) -> None:
        """Logs `message` at most every 10 minutes, as the original."""
        if time.time() - self._last_warning_time > 600:
            _log.warning(message)
            self._last_warning_time = time.time()

    def evaluate_and_export(self) -> tuple[str, dict | None, list]:
        """`(status, metrics, export_results)`: `EVALUATED` with results, else why not and `(None, [])`."""
        latest = self._estimator.latest_checkpoint()
        if not latest:
            self._warn("Estimator is not trained yet. Will start an evaluation when a checkpoint is ready.")
            return MISSING_CHECKPOINT, None, []
        if latest == self._previous_checkpoint:
            self._warn(
                "No new checkpoint ready for evaluation. Skip the current evaluation pass as evaluation "
                "results are expected to be same for the same checkpoint."
            )
            return NO_NEW_CHECKPOINT, None, []
        spec = self._eval_spec
        metrics = self._estimator.evaluate(
            input_fn=spec.input_fn, steps=spec.steps, name=spec.name, checkpoint_path=latest, hooks=spec.hooks
        )
        if not isinstance(metrics, dict):
            raise TypeError(f"`Estimator.evaluate` should return dict. Given {type(metrics)}.")
        if "global_step" not in metrics:
            raise ValueError(
                f"Internal error: `Estimator.evaluate` result should have `global_step` in result. Given {metrics}"
            )
        final = bool(self._max_training_steps) and metrics["global_step"] >= self._max_training_steps
        export_dir_base = os.path.join(os.fsdecode(self._estimator.model_dir), "export")
        exports = [
            exporter.export(
                estimator=self._estimator,
                export_path=os.path.join(export_dir_base, exporter.name),
                checkpoint_path=latest,
                eval_result=metrics,
                is_the_final_export=final,
            )
            for exporter in spec.exporters
        ]
        self._last_warning_time = 0.0
        self._previous_checkpoint = latest
        return EVALUATED, metrics, exports


class _EvaluateAfterSave(tf.compat.v1.train.CheckpointSaverListener):
    """Evaluates after each checkpoint save (subject to `throttle_secs`) and when training ends.

    The original skipped the save it made at the start of training; this
    library makes none there, so every save is a candidate.
    """

    def __init__(self, evaluator: _Evaluator, throttle_secs: float):
        self._evaluator = evaluator
        self._throttle_secs = throttle_secs
        self.eval_result: dict | None = None
        self.export_results: list | None = None

    def begin(self) -> None:
        self._timer = tf.compat.v1.train.SecondOrStepTimer(every_secs=self._throttle_secs)

    def after_save(self, session: Any, global_step_value: int) -> None:
        del session
        if self._timer.should_trigger_for_step(global_step_value):
            self._evaluate(global_step_value)
        else:
            _log.info("Skip the current checkpoint eval due to throttle secs (%s secs).", self._throttle_secs)

    def end(self, session: Any, global_step_value: int) -> None:
        del session
        if global_step_value != self._timer.last_triggered_step():
            self._evaluate(global_step_value)

    def _evaluate(self, global_step_value: int) -> None:
        self._timer.update_last_triggered_step(global_step_value)
        with evaluating_during_training():  # training's random sequences go on, as in the original
            status, metrics, exports = self._evaluator.evaluate_and_export()
        if status != EVALUATED:  # training always ends on a new checkpoint
            raise RuntimeError(f"There was no new checkpoint after the training. Eval status: {status}")
        self.eval_result, self.export_results = metrics, exports


def _check_estimator(estimator: Any) -> None:
    missing = [name for name in _ESTIMATOR_API if not hasattr(estimator, name)]
    if missing:
        raise TypeError(
            f"`estimator` must have type `tf.estimator.Estimator`. Got: {type(estimator)}. "
            "Pass a keras_tpu_estimator TPUEstimator or Estimator (this object has no "
            f"{', '.join(missing)})."
        )


def _check_spec(spec: Any, kind: type, name: str) -> None:
    if not isinstance(spec, kind):
        raise TypeError(f"`{name}` must have type `tf.estimator.{kind.__name__}`. Got: {type(spec)}")


def _train_locally(estimator: Any, train_spec: TrainSpec, eval_spec: EvalSpec) -> tuple[dict | None, list | None]:
    config = estimator.config
    _log.info(
        "Start train and evaluate loop. The evaluate will happen after every checkpoint. Checkpoint "
        "frequency is determined based on RunConfig arguments: save_checkpoints_steps %s or "
        "save_checkpoints_secs %s.", config.save_checkpoints_steps, config.save_checkpoints_secs,
    )
    listener = _EvaluateAfterSave(_Evaluator(estimator, eval_spec, train_spec.max_steps), eval_spec.throttle_secs)
    estimator.train(
        input_fn=train_spec.input_fn,
        max_steps=train_spec.max_steps,
        hooks=list(train_spec.hooks),
        saving_listeners=[*train_spec.saving_listeners, listener],
    )
    return listener.eval_result, listener.export_results


def _evaluate_continuously(estimator: Any, train_spec: TrainSpec, eval_spec: EvalSpec) -> None:
    """The `evaluator` task: evaluates new checkpoints until one reaches `max_steps`."""
    if eval_spec.start_delay_secs:
        _log.info("Waiting %f secs before starting eval.", eval_spec.start_delay_secs)
        time.sleep(eval_spec.start_delay_secs)
    evaluator = _Evaluator(estimator, eval_spec, train_spec.max_steps)
    metrics = None
    while True:
        step = metrics.get("global_step") if metrics else None
        if step and train_spec.max_steps and step >= train_spec.max_steps:
            _log.info("Exiting evaluation, global_step=%s >= train max_steps=%s", step, train_spec.max_steps)
            return
        start = time.time()
        status, metrics, _ = evaluator.evaluate_and_export()
        wait = eval_spec.throttle_secs - (time.time() - start)
        if wait > 0:
            _log.info("Waiting %f secs before starting next eval run.", wait)
            time.sleep(wait)
        elif eval_spec.throttle_secs == 0 and status != EVALUATED:
            _log.warning(
                "EvalSpec.throttle_secs is set as 0. This might overload the job before finding (next) new "
                "checkpoint. Please consider to increase it."
            )


def _jobs(cluster_spec: Any) -> dict:
    """`{job: tasks}` of a cluster spec given as a dict or a `tf.train.ClusterSpec`."""
    if hasattr(cluster_spec, "as_dict"):
        return cluster_spec.as_dict()
    return dict(cluster_spec or {})


def _run_task(estimator: Any, train_spec: TrainSpec, eval_spec: EvalSpec) -> None:
    """What TF_CONFIG's task does in a distributed job (see the module docstring)."""
    config = estimator.config
    task_type, cluster = config.task_type, _jobs(config.cluster_spec)
    if not task_type:
        raise ValueError(
            "`estimator.config` must have task_type set. This usually means TF_CONFIG environment is not "
            "set correctly."
        )
    if task_type == "local":
        raise ValueError(
            "`task.type` in TF_CONFIG cannot be `local`. Leaving `cluster` and `task` properties in TF_CONFIG "
            "absent triggers train and evaluate `Estimator` locally (non-distributed)."
        )
    if task_type not in _TASK_TYPES:
        raise ValueError(f"Task type {task_type} is not supported. Supported task types are {_TASK_TYPES}")
    if task_type == "ps" or "ps" in cluster:
        raise ValueError(f"TF_CONFIG has parameter servers ('ps' tasks), which are not supported. {_NO_PS}")
    if task_type == "evaluator":
        _evaluate_continuously(estimator, train_spec, eval_spec)
        return
    if task_type == "master":
        if config.num_worker_replicas > 1:
            raise ValueError(
                "A 'master' task evaluates inside its training, which under MultiWorkerMirroredStrategy would "
                "need every worker to evaluate with it. Name the task 'chief' and evaluate in an 'evaluator' task."
            )
        _train_locally(estimator, train_spec, eval_spec)
        return
    listeners = train_spec.saving_listeners if config.is_chief else ()
    # The original started worker i after (i + 1) * 5 s, for asynchronous training; here every trainer
    # steps together, so none waits.
    estimator.train(
        input_fn=train_spec.input_fn,
        max_steps=train_spec.max_steps,
        hooks=list(train_spec.hooks),
        saving_listeners=list(listeners),
    )


@eager_call
def train_and_evaluate(estimator: Any, train_spec: TrainSpec, eval_spec: EvalSpec) -> tuple | None:
    """Trains `estimator` to `train_spec.max_steps`, evaluating and exporting its new checkpoints.

    Args:
        estimator: A `TPUEstimator` or `Estimator` of this library.
        train_spec: A `TrainSpec`.
        eval_spec: An `EvalSpec`.

    Returns:
        Locally (no cluster in TF_CONFIG): `(eval_result, export_results)`
        of the last evaluation (`(None, None)` when training was already at
        `max_steps`); in a distributed job, None.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: TF_CONFIG's task cannot run here (see the module docstring).

    Example:

    ```python
    metrics, exports = train_and_evaluate(estimator, TrainSpec(train_input_fn, max_steps=2),
                                          EvalSpec(eval_input_fn, steps=1, throttle_secs=0))
    assert metrics["global_step"] == 2 and exports == []
    ```
    """
    _check_spec(eval_spec, EvalSpec, "eval_spec")
    _check_estimator(estimator)
    _check_spec(train_spec, TrainSpec, "train_spec")
    config = estimator.config
    task_type = getattr(config, "task_type", None)
    if task_type == "evaluator" and getattr(config, "task_id", 0) > 0:
        raise ValueError(
            "For distributed training, there can only be one `evaluator` task (with task id 0).  Given task id "
            f"{config.task_id}"
        )
    if not getattr(config, "cluster_spec", None) and task_type != "evaluator":
        _log.info("Running training and evaluation locally (non-distributed).")
        return _train_locally(estimator, train_spec, eval_spec)
    _run_task(estimator, train_spec, eval_spec)
    return None
