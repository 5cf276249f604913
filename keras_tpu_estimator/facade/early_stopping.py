"""`tf.estimator.experimental`'s training hooks: early stopping and the in-memory evaluator.

Each is a Keras callback (the facade's `train(hooks=...)`, `TrainSpec(hooks=...)`
and `EstimatorModel.fit(callbacks=...)` take them) that behaves as the
original's session hook did:

- it acts after every *run*: an execution of `iterations_per_loop` steps on
  the strategy path (the original's TPU loop), one step on the CPU path
  (`use_tpu=False`, where the original ran its hooks every step), and sees the
  global step as the run began, as a TF1 fetch did;
- the early-stopping hooks read the evaluations in `estimator.eval_dir()`
  (`read_eval_metrics`) every `run_every_secs` or `run_every_steps` and stop
  training after the run when `should_stop_fn` says so; under several
  workers the chief decides and every worker stops at the same run;
- `InMemoryEvaluatorHook` evaluates the current weights before the first run,
  every `every_n_iter` runs and at the end, writing `model_dir/eval_<name>`.

`make_stop_at_checkpoint_step_hook` returns a `StopAtStepHook`: workers
step together here, so none waits for the chief's checkpoint.

Example:

```python
hook = stop_if_no_decrease_hook(estimator, "loss", max_steps_without_decrease=1000)
estimator.train(train_input_fn, max_steps=2, hooks=[hook])
```
"""

from __future__ import annotations

import operator
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from keras_tpu_estimator.contract import check_hooks
from keras_tpu_estimator.distribute import any_worker, is_chief, num_workers
from keras_tpu_estimator.model_dir import read_eval_metrics, write_checkpoint
from keras_tpu_estimator.utils import get_logger

from .nested_evaluation import evaluating_during_training

_log = get_logger(__name__)
_MULTI_WORKER = ("CollectiveAllReduceStrategy", "MultiWorkerMirroredStrategy")

__all__ = [
    "InMemoryEvaluatorHook",
    "make_early_stopping_hook",
    "make_stop_at_checkpoint_step_hook",
    "read_eval_metrics",
    "stop_if_higher_hook",
    "stop_if_lower_hook",
    "stop_if_no_decrease_hook",
    "stop_if_no_increase_hook",
]


def _check_estimator(estimator: Any) -> None:
    if not all(hasattr(estimator, name) for name in ("evaluate", "eval_dir", "model_dir", "config")):
        raise TypeError(
            f"`estimator` must have type `tf.estimator.Estimator`. Got: {type(estimator)}. "
            "Pass a keras_tpu_estimator TPUEstimator or Estimator."
        )


class _Run(keras.callbacks.Callback):
    """A callback that acts once per run, as a session hook: per execution, per step on the CPU path."""

    def on_train_begin(self, logs: dict | None = None) -> None:
        if not getattr(self.model, "runs_on_strategy_path", True):
            self.max_steps_per_execution = 1  # the driver's bound: the original's CPU path ran hooks per step
        self._multi_worker = num_workers(self.model.distribute_strategy) > 1

    def on_train_end(self, logs: dict | None = None) -> None:
        self.max_steps_per_execution = None


class _StopOnPredicate(_Run):
    """Stops training after a run when `should_stop_fn()` is True, checked on the hook's timer."""

    def __init__(self, should_stop_fn: Callable[[], bool], run_every_secs: float | None, run_every_steps: int | None):
        super().__init__()
        if not callable(should_stop_fn):
            raise TypeError("`should_stop_fn` must be callable.")
        self.should_stop_fn = should_stop_fn
        self._timer = tf.compat.v1.train.SecondOrStepTimer(every_secs=run_every_secs, every_steps=run_every_steps)
        self._timed = run_every_secs is not None  # workers' clocks differ: they agree on when to check
        self.max_steps_per_execution: int | None = None
        self.stopped_at: int | None = None  # the global step as the stopping run began

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._run_step = self.model.global_step  # what the original's hook fetched in this run

    def _agreed(self, flag: bool) -> bool:
        return any_worker(self.model.distribute_strategy, flag) if self._multi_worker else flag

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        step = self._run_step
        due = self._timer.should_trigger_for_step(step)
        if not (self._agreed(due) if self._timed else due):  # a step schedule is the same on every worker
            return
        self._timer.update_last_triggered_step(step)
        chief = is_chief(self.model.distribute_strategy)
        if self._agreed(bool(chief and self.should_stop_fn())):
            _log.info("Requesting early stopping at global step %d", step)
            self.stopped_at = step
            self.model.stop_training = True


def make_early_stopping_hook(
    estimator: Any,
    should_stop_fn: Callable[[], bool],
    run_every_secs: float | None = 60,
    run_every_steps: int | None = None,
) -> keras.callbacks.Callback:
    """A hook that stops training when `should_stop_fn()` returns True.

    Args:
        estimator: The `TPUEstimator` / `Estimator` being trained.
        should_stop_fn: Takes no arguments; True stops training (the chief's answer counts).
        run_every_secs: Call it at most this often (the first run always calls it).
        run_every_steps: Or: call it every this many global steps. Set only one of the two.

    Returns:
        A Keras callback for `train(hooks=...)` or `TrainSpec(hooks=...)`.

    Example:

    ```python
    hook = make_early_stopping_hook(estimator, lambda: os.path.exists("/tmp/stop"), run_every_secs=30)
    ```
    """
    _check_estimator(estimator)
    if run_every_secs is not None and run_every_steps is not None:
        raise ValueError("Only one of `run_every_secs` and `run_every_steps` must be set.")
    distribute = getattr(estimator.config, "train_distribute", None)
    if run_every_secs and type(distribute).__name__.startswith(_MULTI_WORKER):
        raise ValueError(
            "run_every_secs should not be set when using MultiWorkerMirroredStrategy. Pass "
            "run_every_secs=None and run_every_steps."
        )
    return _StopOnPredicate(should_stop_fn, run_every_secs, run_every_steps)


def _stop_if_threshold_crossed_hook(
    estimator: Any, metric_name: str, threshold: float, higher_is_better: bool, eval_dir: str | None,
    min_steps: int, run_every_secs: float | None, run_every_steps: int | None,
) -> keras.callbacks.Callback:
    eval_dir = estimator.eval_dir() if eval_dir is None else eval_dir
    better = operator.gt if higher_is_better else operator.lt
    relation = "greater than" if higher_is_better else "less than"

    def stop_if_threshold_crossed_fn() -> bool:
        for step, metrics in read_eval_metrics(eval_dir).items():
            if step < min_steps:
                continue
            value = metrics[metric_name]
            if better(value, threshold):
                _log.info(
                    'At step %s, metric "%s" has value %s which is %s the configured threshold (%s) for '
                    "early stopping.", step, metric_name, value, relation, threshold,
                )
                return True
        return False

    return make_early_stopping_hook(estimator, stop_if_threshold_crossed_fn, run_every_secs, run_every_steps)


def _stop_if_no_metric_improvement_hook(
    estimator: Any, metric_name: str, max_steps_without_improvement: int, higher_is_better: bool,
    eval_dir: str | None, min_steps: int, run_every_secs: float | None, run_every_steps: int | None,
) -> keras.callbacks.Callback:
    eval_dir = estimator.eval_dir() if eval_dir is None else eval_dir
    better = operator.gt if higher_is_better else operator.lt
    change = "increase" if higher_is_better else "decrease"

    def stop_if_no_metric_improvement_fn() -> bool:
        best, best_step = None, None
        for step, metrics in read_eval_metrics(eval_dir).items():
            if step < min_steps:
                continue
            value = metrics[metric_name]
            if best is None or better(value, best):
                best, best_step = value, step
            if step - best_step >= max_steps_without_improvement:
                _log.info(
                    'No %s in metric "%s" for %s steps, which is greater than or equal to max steps (%s) '
                    "configured for early stopping.", change, metric_name, step - best_step,
                    max_steps_without_improvement,
                )
                return True
        return False

    return make_early_stopping_hook(estimator, stop_if_no_metric_improvement_fn, run_every_secs, run_every_steps)


def stop_if_higher_hook(
    estimator: Any, metric_name: str, threshold: float, eval_dir: str | None = None, min_steps: int = 0,
    run_every_secs: float | None = 60, run_every_steps: int | None = None,
) -> keras.callbacks.Callback:
    """Stops training once an evaluation at step >= `min_steps` has `metric_name` > `threshold`.

    Example:

    ```python
    hook = stop_if_higher_hook(estimator, "accuracy", 0.9)
    ```
    """
    return _stop_if_threshold_crossed_hook(
        estimator, metric_name, threshold, True, eval_dir, min_steps, run_every_secs, run_every_steps
    )


def stop_if_lower_hook(
    estimator: Any, metric_name: str, threshold: float, eval_dir: str | None = None, min_steps: int = 0,
    run_every_secs: float | None = 60, run_every_steps: int | None = None,
) -> keras.callbacks.Callback:
    """Stops training once an evaluation at step >= `min_steps` has `metric_name` < `threshold`.

    Example:

    ```python
    hook = stop_if_lower_hook(estimator, "loss", 100)
    ```
    """
    return _stop_if_threshold_crossed_hook(
        estimator, metric_name, threshold, False, eval_dir, min_steps, run_every_secs, run_every_steps
    )


def stop_if_no_increase_hook(
    estimator: Any, metric_name: str, max_steps_without_increase: int, eval_dir: str | None = None,
    min_steps: int = 0, run_every_secs: float | None = 60, run_every_steps: int | None = None,
) -> keras.callbacks.Callback:
    """Stops training when `metric_name` has not increased for `max_steps_without_increase` steps of evaluations.

    Example:

    ```python
    hook = stop_if_no_increase_hook(estimator, "accuracy", 100_000)
    ```
    """
    return _stop_if_no_metric_improvement_hook(
        estimator, metric_name, max_steps_without_increase, True, eval_dir, min_steps, run_every_secs,
        run_every_steps,
    )


def stop_if_no_decrease_hook(
    estimator: Any, metric_name: str, max_steps_without_decrease: int, eval_dir: str | None = None,
    min_steps: int = 0, run_every_secs: float | None = 60, run_every_steps: int | None = None,
) -> keras.callbacks.Callback:
    """Stops training when `metric_name` has not decreased for `max_steps_without_decrease` steps of evaluations.

    Example:

    ```python
    hook = stop_if_no_decrease_hook(estimator, "loss", 100_000)
    ```
    """
    return _stop_if_no_metric_improvement_hook(
        estimator, metric_name, max_steps_without_decrease, False, eval_dir, min_steps, run_every_secs,
        run_every_steps,
    )


class InMemoryEvaluatorHook(_Run):
    """Evaluates the weights being trained, without waiting for a checkpoint, every `every_n_iter` runs.

    It evaluates before the first run, after every `every_n_iter`-th run
    and when training ends, through `estimator.evaluate` on a snapshot of the
    current variables, writing `model_dir/eval` (or `eval_<name>`) at the
    current global step.

    Args:
        estimator: The `TPUEstimator` / `Estimator` being trained.
        input_fn: `input_fn` for `evaluate`.
        steps: `evaluate`'s steps (None: to the end of the input).
        hooks: `evaluate`'s hooks.
        name: `evaluate`'s name: the summaries go to `eval_<name>`.
        every_n_iter: Runs between evaluations (a run: an execution; one step on the CPU path).

    Example:

    ```python
    evaluator = InMemoryEvaluatorHook(estimator, eval_input_fn, steps=10, every_n_iter=500)
    estimator.train(train_input_fn, max_steps=2, hooks=[evaluator])
    ```
    """

    def __init__(
        self,
        estimator: Any,
        input_fn: Callable[..., Any],
        steps: int | None = None,
        hooks: list | None = None,
        name: str | None = None,
        every_n_iter: int = 100,
    ):
        super().__init__()
        if every_n_iter is None or every_n_iter <= 0:
            raise ValueError(f"invalid every_n_iter={every_n_iter}.")
        config = estimator.config
        if config.num_ps_replicas > 0 or config.num_worker_replicas > 1:
            raise ValueError("InMemoryEvaluator supports only single machine (aka Local) setting.")
        self._estimator = estimator
        self._input_fn = input_fn
        self._steps = steps
        self._name = name
        self._hooks = list(check_hooks("hooks", hooks))
        self._timer = tf.compat.v1.train.SecondOrStepTimer(every_steps=every_n_iter)
        self.max_steps_per_execution: int | None = None

    def _evaluate(self) -> None:
        snapshot = tempfile.mkdtemp(prefix="keras_tpu_estimator_in_memory_")
        try:
            checkpoint = write_checkpoint(f"{snapshot}/model.ckpt-{self.model.global_step}",
                                          self.model.checkpoint_variables)
            with evaluating_during_training():  # training's random sequences go on, as in the original
                self._estimator.evaluate(
                    self._input_fn, steps=self._steps, hooks=self._hooks, checkpoint_path=checkpoint,
                    name=self._name,
                )
        finally:
            shutil.rmtree(snapshot, ignore_errors=True)
        self._timer.update_last_triggered_step(self._iter_count)

    def on_train_begin(self, logs: dict | None = None) -> None:
        super().on_train_begin(logs)
        self._timer.reset()
        self._iter_count = 0
        self._evaluate()  # the original's first run: the metrics before training

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._iter_count += 1
        if self._timer.should_trigger_for_step(self._iter_count):
            self._evaluate()

    def on_train_end(self, logs: dict | None = None) -> None:
        self._evaluate()
        super().on_train_end(logs)


def make_stop_at_checkpoint_step_hook(
    estimator: Any, last_step: int, wait_after_file_check_secs: float = 30
) -> tf.compat.v1.train.StopAtStepHook:
    """A hook that stops training at global step `last_step`, on the chief and on every worker.

    The original gave non-chief workers a hook that waited for the chief's
    checkpoint at `last_step` (asynchronous training); workers here step
    together, so each gets the chief's `StopAtStepHook`.

    Example:

    ```python
    estimator.train(input_fn, max_steps=2, hooks=[make_stop_at_checkpoint_step_hook(estimator, 5000)])
    ```
    """
    del wait_after_file_check_secs  # nothing waits for a file here
    if not estimator.config.is_chief:
        if last_step is None:
            raise ValueError("last_step must be specified.")
        if estimator.model_dir is None:
            raise ValueError("model_dir must be specified.")
    return tf.compat.v1.train.StopAtStepHook(last_step=last_step)
