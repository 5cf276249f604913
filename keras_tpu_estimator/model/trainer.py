"""`EstimatorTrainer`: `fit`, `evaluate` and `predict` of `EstimatorModel`.

The Keras half of the host side, kept apart from the model as Keras 3 keeps
`Trainer` apart from `Model`: it turns the arguments into a distributed
input, a loop function and a Keras `CallbackList` (history, progress bar,
any stock callback), and reads what the model's `ExecutionDriver` (sizing,
running, NaN checks, stop bounds, host submission, paired batch callbacks)
yields: epoch logs, metrics, predictions. It owns no state beyond one call.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import keras
import tensorflow as tf

from keras_tpu_estimator._compat.keras_state import take_resumed_epoch
from keras_tpu_estimator.callbacks import CheckpointSaver, as_callback
from keras_tpu_estimator.contract import InputFn, IterationsPerLoop, ModeKeys
from keras_tpu_estimator.engine import StopRequests
from keras_tpu_estimator.inputs import keras_input, refuse_keras_arguments
from keras_tpu_estimator.tf1 import check_learning_rate_callbacks
from keras_tpu_estimator.utils import get_logger

_log = get_logger(__name__)


def _warn_uneven_end(what: str, done: str, strategy: tf.distribute.Strategy, at: int) -> None:
    """The CPU path's input ended with fewer batches than replicas: that last step did not run."""
    _log.warning(
        "The %s input ended with fewer batches than the %d replicas in the last step, which was "
        "not %s (step %d), as on the Estimator's strategy, which ran whole batches on every "
        "replica. Give the input a multiple of %d batches (or .repeat() it) to use every batch.",
        what, strategy.num_replicas_in_sync, done, at, strategy.num_replicas_in_sync,
    )


@dataclasses.dataclass
class _FitRun:
    """The settings of one `fit` call, and what it found (`empty_replica_at`)."""

    epochs: int
    initial_epoch: int
    steps_per_epoch: int | None
    verbose: Any
    validation: tuple
    check_finite: bool
    input_steps: float | None = None  # read once: a call inside fit (train_on_batch) rebuilds the mode
    empty_replica_at: int | None = None


class EstimatorTrainer:
    """The `fit` / `evaluate` / `predict` half of `EstimatorModel` (a mixin; see `EstimatorModel`).

    Example:

    ```python
    model = kte.EstimatorModel(model_fn, train_batch_size=8)   # an EstimatorTrainer
    model.fit(input_fn, callbacks=[kte.StopAtStep(steps=2)])
    ```
    """

    @property
    def last_execution_loss(self) -> float | None:
        """The mean loss of the last execution's steps."""
        return self._driver.last_execution_loss

    @property
    def last_step_loss(self) -> float | None:
        """The loss of the last execution's last step (what a TPUEstimator loop gave its hooks)."""
        return self._driver.last_step_loss

    @property
    def last_execution_finite(self) -> bool:
        """Whether the last training execution's loss and trainable variables were finite."""
        return self._driver.last_execution_finite

    def _callback_list(self, mode: str, callbacks: Any, verbose: Any, **params: Any) -> Any:
        """Keras' `CallbackList` of `callbacks` and the spec's hooks of `mode` (session hooks wrapped)."""
        return keras.callbacks.CallbackList(
            [as_callback(c) for c in list(callbacks or []) + self._runner.modes[mode].hooks],
            add_progbar=verbose != 0, verbose=verbose, model=self, **params,
        )

    def fit(
        self,
        x: InputFn | tf.data.Dataset | Any = None,
        y: Any = None,
        batch_size: int | None = None,
        epochs: int = 1,
        verbose: str | int = "auto",
        callbacks: list[keras.callbacks.Callback] | None = None,
        validation_split: float = 0.0,
        validation_data: Any = None,
        shuffle: bool = True,
        class_weight: Any = None,
        sample_weight: Any = None,
        initial_epoch: int = 0,
        steps_per_epoch: int | None = None,
        validation_steps: int | None = None,
        validation_batch_size: int | None = None,
        validation_freq: int = 1,
    ) -> keras.callbacks.History:
        """Trains with `model_fn` in TRAIN mode; Keras' `fit` with exact executions.

        Args:
            x: An `input_fn(params)`, a batched `tf.data.Dataset` yielding
                `features` or `(features, labels)`, or NumPy arrays / a dict
                of them (the features; `y` the labels), as Keras takes them.
            y: Labels, with array `x` only.
            batch_size: Global batch for arrays (default `train_batch_size`,
                else 32) or an `input_fn` (overrides `train_batch_size`).
            shuffle: Shuffle array input before each epoch, as Keras does.
            epochs, verbose, callbacks, initial_epoch, validation_freq: As Keras.
            steps_per_epoch: Steps per epoch; `None` means one pass over the input.
            validation_data, validation_steps, validation_batch_size: Evaluated
                after each epoch as `val_*`; `(x_val, y_val)` arrays or any `x`.

        Returns:
            The Keras `History`.

        Example:

        ```python
        model.fit(input_fn, callbacks=[kte.StopAtStep(steps=2)])
        model.fit({"x": x}, y, batch_size=4, epochs=2)
        ```
        """
        refuse_keras_arguments(
            "fit",
            validation_split=validation_split,
            class_weight=class_weight,
            sample_weight=sample_weight,
        )
        dataset = self._runner.distribute_input(
            keras_input(x, y), ModeKeys.TRAIN, batch_size, shuffle=shuffle
        )
        function = self.make_train_function()
        callbacks = self._callback_list(
            ModeKeys.TRAIN, callbacks, verbose, add_history=True, epochs=epochs, steps=steps_per_epoch
        )
        check_learning_rate_callbacks(self.optimizer, callbacks.callbacks)
        self.stop_training = False
        self._driver.cached_global_step = None
        self._runner.store.reset_local_variables()  # as each TF1 train()'s new session
        run = _FitRun(
            epochs=epochs,
            initial_epoch=initial_epoch,
            steps_per_epoch=steps_per_epoch,
            verbose=verbose,
            validation=(validation_data, validation_steps, validation_batch_size, validation_freq),
            check_finite=not any(
                isinstance(c, keras.callbacks.TerminateOnNaN) for c in callbacks.callbacks
            ),
            input_steps=self._runner.modes[ModeKeys.TRAIN].input_steps,
        )
        stop = StopRequests()
        take_resumed_epoch(self)  # drop an epoch an earlier fit's backup left; on_train_begin may set it
        try:
            with stop.installed():  # until the end: a signal during on_train_end waits for it
                with self._runner.host.running(ModeKeys.TRAIN):  # host sessions and thread for this call
                    epoch_logs = self._fit_loop(callbacks, dataset, function, stop, run)
                self._driver.cached_global_step = None  # the variable is the truth again
                self._driver.forget_iterator()
                callbacks.on_train_end(logs=epoch_logs)
        except BaseException:  # Keras calls no on_train_end: give model_dir back (its lock) all the same
            for callback in callbacks.callbacks:
                if isinstance(callback, CheckpointSaver):
                    callback.release()
            raise
        stop.raise_if_requested()
        if run.empty_replica_at is not None:
            raise ValueError(
                f"Training stopped at global step {run.empty_replica_at}: the next training batch "
                f"has fewer rows than the {self.distribute_strategy.num_replicas_in_sync} "
                "replicas, so a replica would get no rows and model_fn's loss over no rows is "
                "NaN. Batch the training dataset with `drop_remainder=True` (or `.repeat()` it), "
                "or give array input a number of rows that leaves a last batch of at least one "
                "row per replica. The steps before it trained and callbacks ended normally."
            )
        return self.history

    def _fit_loop(
        self, callbacks: Any, dataset: Any, function: Callable, stop: StopRequests, run: _FitRun
    ) -> dict:
        """The epochs of `fit`, up to (not including) `on_train_end`; returns the last epoch's logs."""
        driver = self._driver
        callbacks.on_train_begin()  # may restore a checkpoint: read the step after it
        driver.cached_global_step = start_step = int(self._runner.store.global_step.numpy())
        initial_epoch = take_resumed_epoch(self) or run.initial_epoch  # BackupAndRestore's epoch
        steps_per_epoch = run.steps_per_epoch
        stop_step = driver.bounds(callbacks)[0]
        if steps_per_epoch is None and stop_step is not None:
            callbacks.set_params(
                {"verbose": run.verbose, "epochs": run.epochs, "steps": max(0, stop_step - start_step)}
            )
        iterator = None
        try:
            iterator = iter(dataset) if steps_per_epoch else None
            epoch_logs: dict = {}
            for epoch in range(initial_epoch, run.epochs):
                if self.stop_training:
                    break
                self.reset_metrics()
                callbacks.on_epoch_begin(epoch)
                if steps_per_epoch is None:
                    driver.forget_iterator(iterator)
                    iterator = iter(dataset)
                done, loss_sum, weight_sum, logs = 0, 0.0, 0.0, {}
                for execution in driver.executions(
                    ModeKeys.TRAIN, function, iterator, callbacks, steps=steps_per_epoch, stop=stop,
                    check_finite=run.check_finite, multi_worker=self._multi_worker,
                    input_steps=run.input_steps,
                ):
                    done += execution.steps
                    loss_sum += execution.loss_sum
                    weight_sum += execution.weight_sum
                    logs = execution.logs = {"loss": loss_sum / weight_sum}
                if driver.ended_by == "empty_replica" and not self._runner.path.strategy_path:
                    # The CPU path's replicas take whole batches: the input ended with fewer
                    # batches than replicas, and that step did not run (nor did the Estimator's).
                    _warn_uneven_end("training", "trained", self.distribute_strategy, driver.global_step())
                    driver.ended_by = "input"
                elif driver.ended_by == "empty_replica":
                    run.empty_replica_at = driver.global_step()
                    self.stop_training = True
                elif driver.ended_by == "stopped" and stop.requested:
                    self.stop_training = True
                exhausted = driver.ended_by == "input"
                if exhausted:
                    self._report_input_end(callbacks, run, epoch, done, start_step, stop_step)
                epoch_logs = dict(logs)
                validation_data, validation_steps, validation_batch_size, validation_freq = run.validation
                if validation_data is not None and (epoch + 1) % validation_freq == 0:
                    val_logs = self.evaluate(
                        validation_data, steps=validation_steps, batch_size=validation_batch_size,
                        verbose=0, return_dict=True,
                    )
                    epoch_logs.update({f"val_{k}": v for k, v in val_logs.items()})
                callbacks.on_epoch_end(epoch, epoch_logs)
                if exhausted and steps_per_epoch is not None:
                    break
        except BaseException:
            driver.cached_global_step = None  # the variable is the truth again
            raise
        finally:
            driver.forget_iterator(iterator)
        return epoch_logs

    def _report_input_end(
        self, callbacks: Any, run: _FitRun, epoch: int, done: int, start_step: int, stop_step: int | None
    ) -> None:
        """The input ran out in `epoch` after `done` steps: warn where that is not a normal epoch end.

        A one-pass epoch (`steps_per_epoch=None`, no stop step) ending with its
        input is Keras' normal epoch; an empty input, an epoch short of
        `steps_per_epoch` or a stop step not reached is not. The progress bar
        is told the steps that really ran.
        """
        step = self.global_step
        if stop_step is not None and run.steps_per_epoch is None:
            callbacks.set_params({"verbose": run.verbose, "epochs": run.epochs, "steps": step - start_step})
        if done == 0:
            _log.warning(
                "The training input is empty: epoch %d ran no step (global step %d). Check the "
                "input_fn or dataset (a filter or take that drops everything?).",
                epoch, step,
            )
        elif run.steps_per_epoch is not None:
            callbacks.set_params({"verbose": run.verbose, "epochs": run.epochs, "steps": done})
            _log.warning(
                "The training input ran out after %d of %d steps in epoch %d (global step %d); "
                "stopping. Use .repeat() for at least steps_per_epoch * epochs batches.",
                done, run.steps_per_epoch, epoch, step,
            )
        elif stop_step is not None and step < stop_step and epoch + 1 == run.epochs:
            _log.warning(
                "The training input ended at global step %d, before the stop step %d: %d steps "
                "trained in this fit. Use .repeat() on the dataset to train to the stop step.",
                step, stop_step, step - start_step,
            )

    @contextlib.contextmanager
    def one_loop_evaluation(self, steps: int | None) -> Iterator[None]:
        """Within it, `evaluate(steps=N)` runs one execution of N steps (TPUEstimator on a TPU).

        The original's `_SetEvalIterationsHook` set its loop's trip count to N, so
        an evaluation hook ran once; the facade uses this, the Keras face keeps
        executions of `steps_per_execution`. `steps=None` changes nothing.

        Example:

        ```python
        with model.one_loop_evaluation(2):
            model.evaluate(eval_input_fn, steps=2)  # one execution of 2 steps
        ```
        """
        saved = self._driver.iterations_per_loop
        if steps is not None:
            self._driver.iterations_per_loop = IterationsPerLoop(int(steps), "count")
        try:
            yield
        finally:
            self._driver.iterations_per_loop = saved

    def evaluate(
        self,
        x: InputFn | tf.data.Dataset | Any = None,
        y: Any = None,
        batch_size: int | None = None,
        verbose: str | int = "auto",
        sample_weight: Any = None,
        steps: int | None = None,
        callbacks: list[keras.callbacks.Callback] | None = None,
        return_dict: bool = False,
    ) -> float | dict:
        """Evaluates `model_fn` in EVAL mode; returns the mean loss over the steps.

        `steps=None` runs to the end of the input. The loss of a step is the
        mean over replicas of each replica's loss, weighted by its real rows;
        the result is the mean over steps (TPUEstimator's definition), and
        `return_dict=True` adds every `eval_metrics` / `eval_metric_ops` value.

        Example:

        ```python
        model.evaluate(eval_input_fn, steps=1, return_dict=True)  # {"loss": ...}
        model.evaluate({"x": x}, y, batch_size=4)
        ```
        """
        refuse_keras_arguments("evaluate", sample_weight=sample_weight)
        dataset = self._runner.distribute_input(keras_input(x, y), ModeKeys.EVAL, batch_size)
        function = self.make_test_function()
        callbacks = self._callback_list(ModeKeys.EVAL, callbacks, verbose, epochs=1, steps=steps)
        self._runner.store.reset_local_variables()  # as each TF1 evaluation's new session
        self.evaluation_steps_done = 0
        logs: dict = {}
        with self._runner.host.running(ModeKeys.EVAL):  # fresh host sessions: metrics from zero
            callbacks.on_test_begin()
            done, loss_sum, weight_sum, last_outputs = 0, 0.0, 0.0, None
            iterator = iter(dataset)
            try:
                for execution in self._driver.executions(
                    ModeKeys.EVAL, function, iterator, callbacks, steps=steps,
                    input_steps=self._runner.modes[ModeKeys.EVAL].input_steps,
                ):
                    done += execution.steps
                    self.evaluation_steps_done = done  # the hook graph's `eval_step`, read in after_run
                    last_outputs = execution.outputs  # the in-step metrics' values, stacked over steps
                    loss_sum, weight_sum = loss_sum + execution.loss_sum, weight_sum + execution.weight_sum
                    logs["loss"] = loss_sum / max(weight_sum, 1e-12)
                    execution.logs = dict(logs)
            finally:  # the cached call holds the iterator: release it, also on an error
                self._driver.forget_iterator(iterator)
            if self._driver.ended_by == "empty_replica":  # the CPU path's replicas: see fit
                _warn_uneven_end("evaluation", "evaluated", self.distribute_strategy, done)
            if done == 0:
                raise ValueError("evaluate() ran no steps: the input is empty.")
            metrics = self._runner.host.metric_results()
        metrics.update(self._runner.metrics.result(last_outputs))
        for name, quote in (("loss", '"'), ("global_step", "`")):
            if name in metrics:  # the original's check: a silent overwrite otherwise
                raise ValueError(
                    f"Metric with name {quote}{name}{quote} is not allowed, because Estimator "
                    "already defines a default metric with the same name. Rename the metric."
                )
        logs.update(metrics)
        callbacks.on_test_end(logs)
        return dict(logs) if return_dict else logs["loss"]

    def predict_batches(
        self,
        x: InputFn | tf.data.Dataset | Any,
        batch_size: int | None = None,
        verbose: str | int = "auto",
        steps: int | None = None,
        callbacks: list[keras.callbacks.Callback] | None = None,
    ) -> Iterator[Any]:
        """Yields the predictions of each step: only its real rows, in input order.

        A step covers one global batch, so with an input of 100 rows and a
        global batch of 16 the sizes are 16 (six times) and 4.

        Example:

        ```python
        for batch in model.predict_batches(predict_input_fn):
            print(batch["class"].shape)
        ```
        """
        return self._predictions(x, batch_size, verbose, steps, callbacks, by_step=True)

    def _predictions(
        self, x: Any, batch_size: int | None, verbose: Any, steps: int | None, callbacks: Any, by_step: bool
    ) -> Iterator[Any]:
        """Yields the real rows of each step (`by_step`) or of each execution, in input order."""
        dataset = self._runner.distribute_input(x, ModeKeys.PREDICT, batch_size)
        function = self.make_predict_function()
        callbacks = self._callback_list(ModeKeys.PREDICT, callbacks, verbose, epochs=1, steps=steps)
        record = self._runner.modes[ModeKeys.PREDICT]
        rows, plan = record.batch.global_size, record.predictions
        callbacks.on_predict_begin()
        with self._runner.host.running(ModeKeys.PREDICT):
            iterator = iter(dataset)
            try:
                for execution in self._driver.executions(
                    ModeKeys.PREDICT, function, iterator, callbacks, steps=steps,
                    input_steps=self._runner.modes[ModeKeys.PREDICT].input_steps,
                ):
                    outputs = tf.nest.map_structure(lambda t: t.numpy(), execution.outputs)
                    if by_step:
                        batches = plan.steps(outputs, execution.steps, rows)
                        yield from batches
                        batch = batches[-1]
                    else:  # one selection per output for the whole execution
                        yield plan.rows_of(outputs, execution.steps)
                        batch = plan.steps(outputs, execution.steps, rows, first=execution.steps - 1)[0]
                    execution.logs = {"outputs": batch}
            finally:  # also when the caller stops early (the generator is closed)
                self._driver.forget_iterator(iterator)
        callbacks.on_predict_end()

    def predict(
        self,
        x: InputFn | tf.data.Dataset | Any,
        batch_size: int | None = None,
        verbose: str | int = "auto",
        steps: int | None = None,
        callbacks: list[keras.callbacks.Callback] | None = None,
    ) -> Any:
        """Runs `model_fn` in PREDICT mode; returns its predictions as NumPy arrays.

        On the strategy path every batch is padded to `params['batch_size']`
        rows per replica on the device and the padded rows are dropped here; on
        the CPU path `model_fn` sees each batch's real rows. Either way the
        result has exactly one row per input row, in input order, whatever the
        last batch's size.

        Returns:
            The structure of `TPUEstimatorSpec.predictions` (usually a dict).

        Example:

        ```python
        predictions = model.predict(predict_input_fn)   # {"probabilities": array}
        ```
        """
        batches = list(self._predictions(x, batch_size, verbose, steps, callbacks, by_step=False))
        return self._runner.modes[ModeKeys.PREDICT].predictions.join(batches)
