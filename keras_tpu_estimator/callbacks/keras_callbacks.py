"""Keras callbacks that replace TPUEstimator's session hooks.

`CheckpointSaver`, `StepSummaries` and `StepLogger` replace the saver,
summary, step-counter and logging hooks; each acts only at execution
boundaries and reads the true global step from the model.

`StopAtStep` is `_TPUStopAtStepHook`: it ends training at an exact global
step. It declares the step as its `stop_step`, a bound the model's
`ExecutionDriver` reads before every execution to size it as
`min(steps_per_execution, stop_step - global_step)`.

Under a multi-worker strategy only the chief writes into `model_dir`; the
other workers write the same files into a temporary directory, removed at
the end (saving reads variables, which may take every worker's part), and
time-based decisions are agreed on by all workers.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from typing import Any

import keras
import tensorflow as tf

from keras_tpu_estimator.contract import ModeKeys, check_positive_int
from keras_tpu_estimator.distribute import any_worker, is_chief
from keras_tpu_estimator.export import export_saved_model
from keras_tpu_estimator.model_dir import (
    CheckpointKeeper,
    ModelDirLock,
    check_model_dir,
    meta_graph_bytes,
    remove_leftovers,
    rewrite_state,
    scanned_checkpoints,
    set_aside_newer,
    write_checkpoint,
)
from keras_tpu_estimator.utils import get_logger

from .hook_graph import hook_session

_log = get_logger(__name__)


def _writable_dir(model: keras.Model, directory: str) -> tuple[str, str | None]:
    """`(directory, None)` on the chief; `(temporary directory, it)` on other workers."""
    if is_chief(model.distribute_strategy):
        return directory, None
    temporary = tempfile.mkdtemp(prefix="keras_tpu_estimator_worker_")
    return temporary, temporary


class StopAtStep(keras.callbacks.Callback):
    """Stops `fit` at an exact global step, sizing the last execution to land on it.

    Args:
        steps: Train this many steps from the global step at the start of `fit`.
        max_steps: Train until the global step reaches this value. If it is
            already there, `fit` runs no step.

    Example:

    ```python
    model.fit(input_fn, callbacks=[StopAtStep(steps=3)])   # executions 1, 1, 1 with K=1
    assert model.global_step == 3
    ```

    Note: the model must expose `global_step` and honour the `stop_step`
    bound, as `EstimatorModel` does.
    """

    def __init__(self, steps: int | None = None, max_steps: int | None = None):
        super().__init__()
        if steps is None and max_steps is None:
            raise ValueError("One of `steps` or `max_steps` must be specified.")
        if steps is not None and max_steps is not None:
            raise ValueError(
                "Only one of `steps` or `max_steps` can be specified. "
                f"Received: steps={steps}, max_steps={max_steps}."
            )
        self.steps = check_positive_int("steps", steps)
        self.max_steps = check_positive_int("max_steps", max_steps)
        self.final_step: int | None = None

    @property
    def stop_step(self) -> int | None:
        """The global step training stops at, set when `fit` begins (a bound the driver reads)."""
        return self.final_step

    def on_train_begin(self, logs: dict | None = None) -> None:
        start = self.model.global_step
        self.final_step = self.max_steps if self.max_steps is not None else start + self.steps
        if start >= self.final_step:
            self.model.stop_training = True

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self.model.global_step >= self.final_step:
            self.model.stop_training = True


class CheckpointSaver(keras.callbacks.Callback):
    """Saves TF1-named checkpoints in `model_dir` at execution boundaries, and at the end.

    A save happens after an execution once `save_steps` steps or `save_secs`
    seconds have passed since the last one (so, like TPUEstimator's saver,
    only on execution boundaries), and always when training ends.

    Args:
        model_dir: Where `model.ckpt-<step>` files go.
        save_steps, save_secs: Frequency; at most one may be set.
        max_to_keep: `keep_checkpoint_max`.
        keep_checkpoint_every_n_hours: Also keep one checkpoint per this many hours.
        listeners: `tf.compat.v1.train.CheckpointSaverListener`s: `begin()` at the
            start, `before_save` / `after_save(session, step)` around every save
            (an `after_save` returning True stops training, as in TF1) and `end`.
        save_graph_def: Write `model.ckpt-<step>.meta` with each checkpoint, as
            TPUEstimator's `Saver` did (`RunConfig.checkpoint_save_graph_def`):
            a TF1 meta graph of the checkpoint's variables and its saver, for
            `tf.compat.v1.train.import_meta_graph` (see `model_dir/meta_graph.py`).

    Example:

    ```python
    model.fit(input_fn, callbacks=[StopAtStep(steps=2), CheckpointSaver(model_dir, save_steps=1)])
    ```
    """

    def __init__(
        self,
        model_dir: str,
        save_steps: int | None = None,
        save_secs: float | None = None,
        max_to_keep: int | None = 5,
        keep_checkpoint_every_n_hours: float | None = None,
        listeners: list | None = None,
        save_graph_def: bool = True,
    ):
        super().__init__()
        self.save_graph_def = save_graph_def
        self.listeners = list(listeners or [])
        for listener in self.listeners:
            if not isinstance(listener, tf.compat.v1.train.CheckpointSaverListener):
                raise TypeError(f"saving_listeners must be a list of CheckpointSaverListener, given: {listener}")
        if save_steps is not None and save_secs is not None:
            raise ValueError("Only one of `save_steps` and `save_secs` can be set.")
        check_positive_int("save_steps", save_steps)
        self.model_dir = model_dir
        self.save_steps = save_steps
        self.save_secs = save_secs
        self.max_to_keep = max_to_keep
        self.keep_checkpoint_every_n_hours = keep_checkpoint_every_n_hours
        self.saved_steps: list[int] = []

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._directory, self._temporary = _writable_dir(self.model, self.model_dir)
        self._lock = None
        if self._temporary is None:  # the writer of model_dir: one at a time, leftovers removed
            check_model_dir(self._directory)
            self._lock = ModelDirLock(self._directory)  # creates model_dir when missing
            self._lock.acquire()
            remove_leftovers(self._directory)
        tf.io.gfile.makedirs(self._directory)
        self._keeper = None  # made at the first execution, once every callback has restored
        self._last_step = self.model.global_step
        self._last_time = time.monotonic()
        self.saved_steps = []
        self._session = hook_session(self.model, ModeKeys.TRAIN) if self.listeners else None
        with self._listener_graph():
            for listener in self.listeners:
                listener.begin()

    def _listener_graph(self) -> Any:
        """The hook graph as the default graph: TF1 ran every listener method in the Estimator's graph."""
        return self._session.graph.as_default() if self._session is not None else contextlib.nullcontext()

    def _keeper_from_resumed_step(self) -> CheckpointKeeper:
        """The keeper, made once the step training resumes from is known.

        Checkpoints newer than that step (one that could not be restored) are
        set aside first, so no save overwrites them; the state file is made to
        list what is really in `model_dir`.
        """
        if self._keeper is None:
            if self._temporary is None:
                set_aside_newer(self._directory, self.model.global_step)
                rewrite_state(self._directory)
            variables = self.model.checkpoint_variables
            meta = None
            if self.save_graph_def:  # built once per model's variables (cached), not per save
                meta = meta_graph_bytes(variables, self.max_to_keep, self.keep_checkpoint_every_n_hours)
            self._keeper = CheckpointKeeper(
                self._directory, variables, self.max_to_keep, self.keep_checkpoint_every_n_hours, meta
            )
        return self._keeper

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if self._keeper is None:
            self._last_step = self.model.global_step
            self._keeper_from_resumed_step()

    def _save(self) -> None:
        step = self.model.global_step
        if not getattr(self.model, "last_execution_finite", True):
            # TerminateOnNaN lets training end normally: never keep NaN weights.
            _log.warning(
                "Not saving a checkpoint at global step %d: the last execution's loss or "
                "weights are NaN/Inf. The newest checkpoint in %s is from before it.",
                step, self.model_dir,
            )
            self._last_step, self._last_time = step, time.monotonic()
            return
        with self._listener_graph():
            for listener in self.listeners:
                listener.before_save(self._session, step)
        self._keeper_from_resumed_step().save(step)
        self.saved_steps.append(step)
        self._last_step, self._last_time = step, time.monotonic()
        _log.info("Saved checkpoint for step %d into %s.", step, self._keeper.latest)
        with self._listener_graph():
            stop = any([listener.after_save(self._session, step) for listener in self.listeners])
        if stop:
            _log.info("A CheckpointSaverListener requested training stop.")
            self.model.stop_training = True

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        step = self.model.global_step
        if self.save_steps and step - self._last_step >= self.save_steps:
            self._save()
        elif self.save_secs and any_worker(
            self.model.distribute_strategy, time.monotonic() - self._last_time >= self.save_secs
        ):
            self._save()

    def on_train_end(self, logs: dict | None = None) -> None:
        unsaved = self.model.global_step != self._last_step
        missing = not scanned_checkpoints(self.model_dir)
        if any_worker(self.model.distribute_strategy, unsaved or missing):
            self._save()
        step = self.model.global_step  # read eagerly, before the hook graph is the default
        with self._listener_graph():
            for listener in self.listeners:
                listener.end(self._session, step)
        self.release()

    def release(self) -> None:
        """Gives model_dir back: the listeners' session closed, the writer's lock released. Idempotent.

        `on_train_end` ends with it; `fit` calls it when training stops on an
        error (Keras calls no `on_train_end` then), so a failed run does not keep
        model_dir locked from other trainers. No checkpoint is written: a TF1
        `CheckpointSaverHook` saved at `end()`, which an error skipped too.

        Example:

        ```python
        saver = CheckpointSaver(model_dir, save_steps=1)
        saver.release()   # nothing held yet: a no-op
        ```
        """
        session, self._session = getattr(self, "_session", None), None
        if session is not None:
            session.close()
        temporary, self._temporary = getattr(self, "_temporary", None), None
        if temporary:
            shutil.rmtree(temporary, ignore_errors=True)
        lock, self._lock = getattr(self, "_lock", None), None
        if lock is not None:
            lock.release()


class StepSummaries(keras.callbacks.Callback):
    """Writes `loss`, `global_step/sec` and `examples/sec` to TensorBoard at the true global step.

    Written at the first execution boundary at least `every_n_steps` steps after
    the previous write. `loss` is the mean loss of the last execution;
    `examples/sec` is `global_batch_size * global_step/sec`. TF1 summaries made
    in `model_fn` (`tf.compat.v1.summary.*`) go to the same directory at the
    Estimator's steps: the call's first step and every `every_n_steps` after it.

    Args:
        logdir: Event file directory (TPUEstimator used `model_dir`).
        every_n_steps: `save_summary_steps`.
        global_batch_size: Rows per step over all replicas; taken from the
            model (`global_batch_size`) when None.

    Example:

    ```python
    model.fit(input_fn, callbacks=[StopAtStep(steps=2), StepSummaries(model_dir, 1)])
    ```
    """

    def __init__(self, logdir: str, every_n_steps: int = 100, global_batch_size: int | None = None):
        super().__init__()
        check_positive_int("every_n_steps", every_n_steps)
        self.logdir = logdir
        self.every_n_steps = every_n_steps
        self.global_batch_size = global_batch_size

    def on_train_begin(self, logs: dict | None = None) -> None:
        directory, self._temporary = _writable_dir(self.model, self.logdir)
        check_model_dir(directory)
        self._writer = tf.summary.create_file_writer(directory)
        self._last_step = self.model.global_step
        self._last_time = time.monotonic()
        # model_fn's TF1 summaries: from this call's first step, every_n_steps (SummarySaverHook's steps).
        self._tf1_summaries = getattr(self.model, "tf1_summaries", None)
        if self._tf1_summaries is not None:
            self._tf1_summaries.start(self._writer, self._last_step, self.every_n_steps)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        step = self.model.global_step
        if step - self._last_step < self.every_n_steps:
            return
        now = time.monotonic()
        steps_per_sec = (step - self._last_step) / max(now - self._last_time, 1e-9)
        batch_size = self.global_batch_size or self.model.global_batch_size or 0
        with self._writer.as_default(step=step):
            tf.summary.scalar("loss", self.model.last_execution_loss)
            tf.summary.scalar("global_step/sec", steps_per_sec)
            if batch_size:  # unknown to a plain Estimator, which wrote no examples/sec
                tf.summary.scalar("examples/sec", steps_per_sec * batch_size)
        self._last_step, self._last_time = step, now

    def on_train_end(self, logs: dict | None = None) -> None:
        if self._tf1_summaries is not None:
            self._tf1_summaries.stop()
        self._writer.flush()
        self._writer.close()
        if self._temporary:
            shutil.rmtree(self._temporary, ignore_errors=True)


class StepLogger(keras.callbacks.Callback):
    """Logs `loss = ..., step = ...` and `global_step/sec` every `every_n_steps` steps.

    Lines are logged at the first execution boundary at least `every_n_steps`
    after the previous line (TPUEstimator logged every
    `ceil(log_step_count_steps / iterations_per_loop)` executions: the same steps).

    Example:

    ```python
    model.fit(input_fn, callbacks=[StopAtStep(steps=2), StepLogger(1)])
    ```
    """

    def __init__(self, every_n_steps: int = 100):
        super().__init__()
        check_positive_int("every_n_steps", every_n_steps)
        self.every_n_steps = every_n_steps

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._last_step = self.model.global_step
        self._last_time = time.monotonic()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        step = self.model.global_step
        if step - self._last_step >= self.every_n_steps:
            now = time.monotonic()
            rate = (step - self._last_step) / max(now - self._last_time, 1e-9)
            _log.info("loss = %g, step = %d (%.3f global_step/sec)", self.model.last_execution_loss, step, rate)
            self._last_step, self._last_time = step, now


class SavedModelExporter(keras.callbacks.Callback):
    """Exports a SavedModel of an `EstimatorModel` at the end of `fit`, or every N steps.

    Args:
        export_dir_base: Exports go to `export_dir_base/<unix time>`.
        serving_input_receiver_fn: Returns a `ServingInputReceiver`.
        every_n_steps: Also export at the first execution boundary this many
            steps after the previous export; None exports only at the end.
        keep: Keep this many newest exports (None keeps all).
        export_to_cpu, export_to_tpu, api_version: As `TPUEstimator`'s export.

    Example:

    ```python
    export_dir = os.path.join(model_dir, "export")
    model.fit(input_fn, callbacks=[StopAtStep(steps=1),
                                   SavedModelExporter(export_dir, receiver_fn, keep=3)])
    ```
    """

    def __init__(
        self,
        export_dir_base: str,
        serving_input_receiver_fn: Any,
        every_n_steps: int | None = None,
        keep: int | None = None,
        export_to_cpu: bool = True,
        export_to_tpu: bool = False,
        api_version: int = 1,
    ):
        super().__init__()
        check_positive_int("every_n_steps", every_n_steps)
        check_positive_int("keep", keep)
        self.export_dir_base = export_dir_base
        self.serving_input_receiver_fn = serving_input_receiver_fn
        self.every_n_steps = every_n_steps
        self.keep = keep
        self._options = {"export_to_cpu": export_to_cpu, "export_to_tpu": export_to_tpu, "api_version": api_version}
        self.exports: list[str] = []

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._last_step = self.model.global_step

    def _export(self) -> None:
        with tempfile.TemporaryDirectory() as scratch:
            prefix = write_checkpoint(f"{scratch}/model.ckpt", self.model.checkpoint_variables)
            path = export_saved_model(
                self.export_dir_base, self.serving_input_receiver_fn, self.model.model_fn, prefix,
                params=self.model.params, config=self.model.config, **self._options,
            )
        self.exports.append(path)
        self._last_step = self.model.global_step
        if self.keep:
            while len(self.exports) > self.keep:
                shutil.rmtree(self.exports.pop(0), ignore_errors=True)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self.every_n_steps and self.model.global_step - self._last_step >= self.every_n_steps:
            self._export()

    def on_train_end(self, logs: dict | None = None) -> None:
        if not self.exports or self._last_step != self.model.global_step:
            self._export()
