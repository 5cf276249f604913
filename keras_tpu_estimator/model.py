"""`EstimatorModel`: a Keras 3 model whose train, test and predict steps call a `model_fn`.

The model coordinates; it implements none of the pieces. It takes the
`model_fn` runner (calls, build-once, input, replica steps) from
`model_fn.py`, the device loop from `loop.py` and the host side from
`host.py`, and drives executions from `fit`, `evaluate` and `predict` with
Keras' `CallbackList` (history, progress bar, any stock callback).

It owns two rules:

- **Exact executions.** Each execution runs
  `min(steps_per_execution, steps left in the epoch, stop_at_step - global_step)`
  steps; the count is a tensor, so the tail does not retrace.
- **One global step per training step** (applied by the runner's train
  step): a `train_op` from `minimize(loss, global_step=...)` increments
  `global_step`; if a step's `train_op` leaves it unchanged, the step does.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_tpu_estimator.config import RunConfig
from keras_tpu_estimator.legacy import per_replica_collections
from keras_tpu_estimator.loop import make_loop_function
from keras_tpu_estimator.model_fn import ModelFnRunner, check_model_fn
from keras_tpu_estimator.preemption import StopRequests
from keras_tpu_estimator.spec import InputFn, ModeKeys, ModelFn
from keras_tpu_estimator.strategy import any_worker, num_workers, resolve_strategy

_log = logging.getLogger(__name__)


class EstimatorModel(keras.Model):
    """Runs an unchanged TPUEstimator `model_fn` with `fit`, `evaluate` and `predict`.

    Args:
        model_fn: `model_fn(features, labels, mode, params, config)` returning a
            `TPUEstimatorSpec` or `EstimatorSpec`; only the arguments it
            declares are passed, and it must declare `params`.
        params: Dict handed (deep-copied) to `model_fn` and `input_fn`, with
            `batch_size` (per replica), `use_tpu` and `context` added.
        config: `RunConfig`; `tpu_config.iterations_per_loop` is the default
            `steps_per_execution`.
        use_tpu: `True` runs on the strategy path (TPU if present, else GPUs,
            else the default strategy) with per-replica batches and
            `params['context']`; `False` runs on the default strategy with the
            global batch as `params['batch_size']`.
        strategy: A `tf.distribute.Strategy` to use instead of resolving one.
        train_batch_size, eval_batch_size, predict_batch_size: Global batch
            sizes, needed when the input is an `input_fn`.
        optimizer: A Keras optimizer, used when `model_fn`'s TRAIN spec has no
            `train_op`: the model minimises the spec's loss with it.
        steps_per_execution: Steps per device execution; defaults to
            `config.tpu_config.iterations_per_loop`.
        name: The Keras model name.

    Example:

    ```python
    model = EstimatorModel(model_fn, params={"lr": 0.1}, train_batch_size=64,
                           config=RunConfig(tpu_config=TPUConfig(iterations_per_loop=100)))
    model.fit(input_fn, callbacks=[StopAtStep(steps=1000)])
    model.evaluate(eval_input_fn, steps=10)
    predictions = model.predict(predict_input_fn)
    ```

    Differences from TPUEstimator: the loss reported for an execution is the
    mean over its steps of the mean over replicas (TPUEstimator reported the
    last step of replica 0); `fit` needs a `StopAtStep` callback, a
    `steps_per_epoch` or a finite input to end.
    """

    def __init__(
        self,
        model_fn: ModelFn,
        params: dict | None = None,
        config: RunConfig | None = None,
        *,
        use_tpu: bool = True,
        strategy: tf.distribute.Strategy | None = None,
        train_batch_size: int | None = None,
        eval_batch_size: int | None = None,
        predict_batch_size: int | None = None,
        optimizer: Any = None,
        steps_per_execution: int | str | None = None,
        name: str = "estimator_model",
    ):
        super().__init__(name=name)
        check_model_fn(model_fn)
        config = config or RunConfig()
        if not isinstance(config, RunConfig):
            raise ValueError(
                "`config` must be provided with type keras_tpu_estimator.RunConfig. "
                f"Received: {type(config).__name__}"
            )
        if not use_tpu:
            if strategy is not None and strategy.num_replicas_in_sync > 1:
                raise ValueError(
                    "`use_tpu=False` runs on the default strategy with the global batch as "
                    "params['batch_size']; it cannot use a strategy with "
                    f"{strategy.num_replicas_in_sync} replicas. Pass `use_tpu=True`."
                )
            strategy = tf.distribute.get_strategy()
        elif strategy is None:
            if tf.distribute.has_strategy():
                strategy = tf.distribute.get_strategy()
            elif config.train_distribute is not None:
                strategy = config.train_distribute
            else:
                strategy = resolve_strategy(use_tpu, config.master, config.cluster)
        num_shards = config.tpu_config.num_shards
        if use_tpu and num_shards and num_shards != strategy.num_replicas_in_sync:
            _log.warning(
                "TPUConfig.num_shards=%d but the strategy has %d replicas; using %d.",
                num_shards,
                strategy.num_replicas_in_sync,
                strategy.num_replicas_in_sync,
            )
        self._distribute_strategy = strategy
        self._multi_worker = num_workers(strategy) > 1
        if config.tf_random_seed is not None:
            keras.utils.set_random_seed(config.tf_random_seed)
        batch_sizes = {
            ModeKeys.TRAIN: train_batch_size,
            ModeKeys.EVAL: eval_batch_size,
            ModeKeys.PREDICT: predict_batch_size,
        }
        self._runner = ModelFnRunner(self, model_fn, params, config, strategy, use_tpu, batch_sizes)
        self.stop_at_step: int | None = None
        self._step_during_fit: int | None = None
        self.last_execution_loss: float | None = None
        self._seconds_per_step: float | None = None
        self.compile(optimizer=optimizer, steps_per_execution=steps_per_execution)

    # ----------------------------------------------------------------- basics
    @property
    def model_fn(self) -> ModelFn:
        """The user's `model_fn`."""
        return self._runner.model_fn

    @property
    def params(self) -> dict:
        """A copy of the user's params (without the keys the model adds)."""
        return copy.deepcopy(self._runner.params)

    @property
    def config(self) -> RunConfig:
        """The `RunConfig`."""
        return self._runner.config

    @property
    def global_step(self) -> int:
        """The current value of the `global_step` variable.

        During `fit` it is the value read at the end of the last execution (the
        variable changes only inside executions), which saves a device read per
        callback.
        """
        if self._step_during_fit is not None:
            return self._step_during_fit
        return int(self._runner.store.global_step.numpy())

    @property
    def global_step_variable(self) -> keras.Variable:
        """The `global_step` variable (int64)."""
        return self._runner.store.global_step

    @property
    def variables_by_name(self) -> dict[str, keras.Variable]:
        """`{TF1 name: variable}` for every variable `model_fn` created."""
        return self._runner.store.variables_by_name

    @property
    def checkpoint_variables(self) -> dict[str, keras.Variable]:
        """What a checkpoint holds: `variables_by_name` plus the Keras optimizer's variables.

        The optimizer's are named `keras_optimizer/<path>`.
        """
        variables = self._runner.store.variables_by_name
        if self._runner.uses_keras_optimizer and self.optimizer is not None:
            for variable in self.optimizer.variables:
                variables[f"keras_optimizer/{variable.path}"] = variable
        return variables

    @property
    def global_batch_size(self) -> int | None:
        """The global training batch size, once known."""
        return self._runner.global_batch.get(ModeKeys.TRAIN) or self._runner.batch_sizes[ModeKeys.TRAIN]

    def call_model_fn(self, features: Any, labels: Any, mode: str, mask: Any = None) -> Any:
        """Calls `model_fn` as the model's steps do (inside a trace); returns the checked spec."""
        return self._runner.call_model_fn(features, labels, mode, mask)

    def compile(
        self,
        optimizer: Any = None,
        *,
        steps_per_execution: int | str | None = None,
        **kwargs: Any,
    ) -> None:
        """Sets the Keras optimizer (if `model_fn` has no `train_op`) and `steps_per_execution`.

        `loss` and `metrics` come from `model_fn`; passing them is an error.

        Example:

        ```python
        model.compile(optimizer=keras.optimizers.Adam(1e-3), steps_per_execution=100)
        ```
        """
        unsupported = {k: v for k, v in kwargs.items() if v not in (None, False)}
        if unsupported:
            raise ValueError(
                "EstimatorModel takes its loss, metrics and train_op from `model_fn`; "
                f"compile() accepts only `optimizer` and `steps_per_execution`. "
                f"Received: {sorted(unsupported)}"
            )
        if isinstance(optimizer, keras.optimizers.Optimizer) and not optimizer.built:
            # Recreate it under the model's strategy so its variables are mirrored.
            with self._distribute_strategy.scope():
                optimizer = optimizer.__class__.from_config(optimizer.get_config())
        elif optimizer is not None and not isinstance(optimizer, keras.optimizers.Optimizer):
            with self._distribute_strategy.scope():
                optimizer = keras.optimizers.get(optimizer)
        super().compile(optimizer=optimizer, steps_per_execution=1, jit_compile=False)
        loop = steps_per_execution or self.config.tpu_config.iterations_per_loop
        self._iterations_per_loop = (
            self.config.tpu_config.replace(iterations_per_loop=loop).parsed_iterations_per_loop
        )
        self.steps_per_execution = (
            self._iterations_per_loop.value if self._iterations_per_loop.unit == "count" else 1
        )
        self.train_function = self.test_function = self.predict_function = None

    def _make_function(self, mode: str) -> Callable:
        step = {
            ModeKeys.TRAIN: self._runner.train_step,
            ModeKeys.EVAL: self._runner.test_step,
            ModeKeys.PREDICT: self._runner.predict_step,
        }[mode]
        strategy = self._distribute_strategy

        @contextlib.contextmanager
        def around_run() -> Any:
            with self._runner.store.scope(), per_replica_collections():
                yield

        return make_loop_function(
            strategy,
            step,
            around_run=around_run,
            output_spec=self._runner.output_specs.get(mode),
            host_spec=self._runner.host_specs.get(mode),
            read_after=self._after_train_execution if mode == ModeKeys.TRAIN else None,
        )

    def _after_train_execution(self) -> tuple:
        """Read inside the train function: the global step, and which trainable variables are finite."""
        step = self._runner.store.global_step.value.read_value()
        checked = [v.value for v in self.trainable_variables if v.value.dtype.is_floating]
        finite = tf.stack([tf.reduce_all(tf.math.is_finite(v)) for v in checked] or [tf.constant(True)])
        return step, tf.reduce_all(finite), finite

    def _check_variables_finite(self, finite: Any) -> None:
        """Raises FloatingPointError naming the first trainable variable with NaN or Inf."""
        names = {id(v): name for name, v in self._runner.store.variables_by_name.items()}
        checked = [v for v in self.trainable_variables if v.value.dtype.is_floating]
        flags = finite.numpy()
        bad = [names.get(id(v), v.path) for v, ok in zip(checked, flags, strict=False) if not ok]
        raise FloatingPointError(
            f"Trainable variable '{bad[0]}' holds NaN or Inf after the execution ending at global "
            f"step {self.global_step} ({len(bad)} bad in all: {bad[:5]}). Training stopped "
            "before any callback ran, so no checkpoint holds these weights. Check the input "
            "for NaN/Inf, lower the learning rate, or clip gradients."
        )

    def make_train_function(self, force: bool = False) -> Callable:
        """The cached training loop `(iterator, num_steps) -> ExecutionResult`."""
        if self.train_function is None or force:
            self.train_function = self._make_function(ModeKeys.TRAIN)
        return self.train_function

    def make_test_function(self, force: bool = False) -> Callable:
        """The cached evaluation loop `(iterator, num_steps) -> ExecutionResult`."""
        if self.test_function is None or force:
            self.test_function = self._make_function(ModeKeys.EVAL)
        return self.test_function

    def make_predict_function(self, force: bool = False) -> Callable:
        """The cached prediction loop `(iterator, num_steps) -> ExecutionResult`."""
        if self.predict_function is None or force:
            self.predict_function = self._make_function(ModeKeys.PREDICT)
        return self.predict_function

    # --------------------------------------------------------------- driver
    def _execution_size(self, limit: int | None, training: bool = True) -> int:
        loop = self._iterations_per_loop
        if loop.unit == "count":
            size = loop.value
        elif self._seconds_per_step is None:
            size = 1
        else:
            size = max(1, int(loop.value / max(self._seconds_per_step, 1e-9)))
        if limit is not None:
            size = min(size, limit)
        if training and self.stop_at_step is not None:
            size = min(size, self.stop_at_step - self.global_step)
        return size

    def _executions(
        self, mode: str, function: Callable, iterator: Any, steps: int | None
    ) -> Iterator[tuple[int, int, float, float, Any]]:
        """Runs executions until `steps` steps or the end of the input.

        Yields `(steps_before, count, loss_sum, weight_sum, outputs)` for each
        execution that ran at least one step.
        """
        done = 0
        while steps is None or done < steps:
            size = self._execution_size(None if steps is None else steps - done, training=False)
            count, loss_sum, weight_sum, outputs = self._run_execution(mode, function, iterator, size)
            if count:
                yield done, count, loss_sum, weight_sum, outputs
                done += count
            if count < size:
                return

    def _run_execution(self, mode: str, function: Callable, iterator: Any, size: int) -> Any:
        """Runs one execution and hands its host tensors to the host thread.

        Returns:
            `(steps, loss_sum, weight_sum, outputs)`; `loss_sum / weight_sum`
            is the execution's mean loss per real row.
        """
        first_step = self.global_step if mode == ModeKeys.TRAIN else 0
        start = time.perf_counter()
        result = function(iterator, tf.constant(size, tf.int32))
        steps = int(result.steps)
        loss_sum, weight_sum = float(result.loss_sum), float(result.weight_sum)
        if steps:
            self._seconds_per_step = (time.perf_counter() - start) / steps
            self.last_execution_loss = loss_sum / max(weight_sum, 1e-12)
        if result.after is not None:
            step, all_finite, finite = result.after
            if self._step_during_fit is not None:
                self._step_during_fit = int(step)
            if steps and not bool(all_finite):
                self._check_variables_finite(finite)
        if result.host is not None and steps:
            host = [tensor.numpy() for tensor in result.host]
            self._runner.host.submit(mode, host, first_step, steps)
        return steps, loss_sum, weight_sum, result.outputs

    def trace(self, x: Any, mode: str = ModeKeys.TRAIN, batch_size: int | None = None) -> Any:
        """Builds `mode` and traces its device loop without running a step.

        Returns the loop's concrete function. On a `TPUStrategy` its graph
        holds the replicated TPU program, so this checks that a model builds
        for a TPU on a machine without one.

        Example:

        ```python
        graph = model.trace(input_fn, ModeKeys.EVAL).graph
        ```
        """
        dataset = self._runner.distribute_input(x, mode, batch_size)
        make = {
            ModeKeys.TRAIN: self.make_train_function,
            ModeKeys.EVAL: self.make_test_function,
            ModeKeys.PREDICT: self.make_predict_function,
        }[mode]
        return make().get_concrete_function(iter(dataset), tf.TensorSpec([], tf.int32))

    def fit(
        self,
        x: InputFn | tf.data.Dataset | Any = None,
        y: Any = None,
        batch_size: int | None = None,
        epochs: int = 1,
        verbose: str | int = "auto",
        callbacks: list[keras.callbacks.Callback] | None = None,
        validation_data: Any = None,
        initial_epoch: int = 0,
        steps_per_epoch: int | None = None,
        validation_steps: int | None = None,
        validation_freq: int = 1,
        **kwargs: Any,
    ) -> keras.callbacks.History:
        """Trains with `model_fn` in TRAIN mode; Keras' `fit` with exact executions.

        Args:
            x: An `input_fn(params)`, a batched `tf.data.Dataset` yielding
                `features` or `(features, labels)`, or NumPy arrays.
            batch_size: Global batch for arrays or an `input_fn` (overrides
                `train_batch_size`).
            epochs, verbose, callbacks, initial_epoch, validation_freq: As Keras.
            steps_per_epoch: Steps per epoch; `None` means one pass over the input.
            validation_data, validation_steps: Evaluated after each epoch as `val_loss`.

        Returns:
            The Keras `History`.

        Example:

        ```python
        model.fit(input_fn, callbacks=[StopAtStep(steps=100)])
        ```
        """
        if y is not None or any(v not in (None, True, 0.0) for v in kwargs.values()):
            raise ValueError(
                "EstimatorModel.fit takes the input as `x` (an input_fn or a dataset of "
                "(features, labels)); `y`, `sample_weight`, `class_weight` and "
                "`validation_split` are not supported. Received: "
                f"{sorted(['y'] * (y is not None) + list(kwargs))}"
            )
        dataset = self._runner.distribute_input(x, ModeKeys.TRAIN, batch_size)
        function = self.make_train_function()
        callbacks = keras.callbacks.CallbackList(
            list(callbacks or []) + self._runner.spec_hooks[ModeKeys.TRAIN],
            add_history=True,
            add_progbar=verbose != 0,
            verbose=verbose,
            epochs=epochs,
            steps=steps_per_epoch,
            model=self,
        )
        self.stop_training = False
        self._step_during_fit = None
        stop = StopRequests()
        with stop.installed():  # until the end: a signal during on_train_end waits for it
            epoch_logs = self._fit_loop(
                callbacks, dataset, function, stop, epochs, initial_epoch, steps_per_epoch,
                verbose, validation_data, validation_steps, validation_freq,
            )
            self._runner.host.finish(ModeKeys.TRAIN)
            self._step_during_fit = None
            callbacks.on_train_end(logs=epoch_logs)
        stop.raise_if_requested()
        return self.history

    def _fit_loop(
        self,
        callbacks: Any,
        dataset: Any,
        function: Callable,
        stop: StopRequests,
        epochs: int,
        initial_epoch: int,
        steps_per_epoch: int | None,
        verbose: Any,
        validation_data: Any,
        validation_steps: int | None,
        validation_freq: int,
    ) -> dict:
        """The epochs of `fit`, up to (not including) `on_train_end`; returns the last epoch's logs."""
        callbacks.on_train_begin()  # may restore a checkpoint: read the step after it
        self._step_during_fit = int(self._runner.store.global_step.numpy())
        if steps_per_epoch is None and self.stop_at_step is not None:
            callbacks.set_params(
                {"verbose": verbose, "epochs": epochs, "steps": max(0, self.stop_at_step - self.global_step)}
            )
        try:
            iterator = iter(dataset) if steps_per_epoch else None
            logs: dict = {}
            epoch_logs: dict = {}
            for epoch in range(initial_epoch, epochs):
                if self.stop_training:
                    break
                self.reset_metrics()
                callbacks.on_epoch_begin(epoch)
                if steps_per_epoch is None:
                    iterator = iter(dataset)
                done, loss_sum, weight_sum, exhausted = 0, 0.0, 0.0, False
                while not self.stop_training:
                    size = self._execution_size(steps_per_epoch - done if steps_per_epoch else None)
                    if size <= 0:
                        break
                    callbacks.on_train_batch_begin(done)
                    steps, execution_loss, execution_weight, _ = self._run_execution(
                        ModeKeys.TRAIN, function, iterator, size
                    )
                    if steps and not math.isfinite(execution_loss):
                        raise FloatingPointError(
                            f"The training loss became {self.last_execution_loss} in the execution "
                            f"ending at global step {self.global_step}. Training stopped before any "
                            "callback ran, so no checkpoint holds these weights. Check the input for "
                            "NaN/Inf, lower the learning rate, or clip gradients."
                        )
                    if steps:
                        done += steps
                        loss_sum += execution_loss
                        weight_sum += execution_weight
                        logs = {"loss": loss_sum / weight_sum}
                        callbacks.on_train_batch_end(done - 1, logs)
                    if steps < size:
                        exhausted = True
                        break
                    if self._multi_worker:  # every worker stops at the same execution
                        if any_worker(self._distribute_strategy, stop.requested):
                            stop.request(stop.signal or signal.SIGTERM)
                    if stop.requested:
                        self.stop_training = True
                epoch_logs = dict(logs)
                if validation_data is not None and (epoch + 1) % validation_freq == 0:
                    val_logs = self.evaluate(
                        validation_data, steps=validation_steps, verbose=0, return_dict=True
                    )
                    epoch_logs.update({f"val_{k}": v for k, v in val_logs.items()})
                callbacks.on_epoch_end(epoch, epoch_logs)
                if exhausted and steps_per_epoch is not None:
                    _log.warning(
                        "The input ran out after %d steps in epoch %d; stopping. Use .repeat() "
                        "for at least steps_per_epoch * epochs batches.",
                        done,
                        epoch,
                    )
                    break
        except BaseException:
            self._step_during_fit = None  # the variable is the truth again
            raise
        return epoch_logs

    def evaluate(
        self,
        x: InputFn | tf.data.Dataset | Any = None,
        y: Any = None,
        batch_size: int | None = None,
        verbose: str | int = "auto",
        steps: int | None = None,
        callbacks: list[keras.callbacks.Callback] | None = None,
        return_dict: bool = False,
        **kwargs: Any,
    ) -> float | dict:
        """Evaluates `model_fn` in EVAL mode; returns the mean loss over the steps.

        `steps=None` runs to the end of the input. The loss of a step is the
        mean over replicas of each replica's loss; the result is the mean over
        steps.

        Example:

        ```python
        model.evaluate(eval_input_fn, steps=10, return_dict=True)  # {"loss": ...}
        ```
        """
        if y is not None or kwargs:
            raise ValueError("EstimatorModel.evaluate takes its input as `x` only.")
        dataset = self._runner.distribute_input(x, ModeKeys.EVAL, batch_size)
        function = self.make_test_function()
        callbacks = keras.callbacks.CallbackList(
            list(callbacks or []) + self._runner.spec_hooks[ModeKeys.EVAL], add_progbar=verbose != 0, verbose=verbose, epochs=1, steps=steps, model=self
        )
        host = self._runner.host
        if host.metrics is not None:
            host.metrics.reset()
        callbacks.on_test_begin()
        logs: dict = {}
        done, loss_sum, weight_sum = 0, 0.0, 0.0
        callbacks.on_test_batch_begin(0)
        for first, count, execution_loss, execution_weight, _ in self._executions(
            ModeKeys.EVAL, function, iter(dataset), steps
        ):
            done = first + count
            loss_sum, weight_sum = loss_sum + execution_loss, weight_sum + execution_weight
            logs["loss"] = loss_sum / max(weight_sum, 1e-12)
            callbacks.on_test_batch_end(done - 1, dict(logs))
        if done == 0:
            raise ValueError("evaluate() ran no steps: the input is empty.")
        host.finish(ModeKeys.EVAL)
        if host.metrics is not None:
            logs.update(host.metrics.result())
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
        dataset = self._runner.distribute_input(x, ModeKeys.PREDICT, batch_size)
        function = self.make_predict_function()
        callbacks = keras.callbacks.CallbackList(
            list(callbacks or []) + self._runner.spec_hooks[ModeKeys.PREDICT],
            add_progbar=verbose != 0, verbose=verbose, epochs=1, steps=steps, model=self,
        )
        rows = self._runner.global_batch[ModeKeys.PREDICT]
        callbacks.on_predict_begin()
        callbacks.on_predict_batch_begin(0)
        for first, count, _, _, outputs in self._executions(
            ModeKeys.PREDICT, function, iter(dataset), steps
        ):
            predictions, mask = tf.nest.map_structure(lambda t: t.numpy(), outputs)
            for index in range(count):
                keep = mask[index * rows : (index + 1) * rows] > 0.5
                batch = tf.nest.map_structure(
                    lambda t, i=index, k=keep: t[i * rows : (i + 1) * rows][k], predictions
                )
                yield batch
            callbacks.on_predict_batch_end(first + count - 1, {"outputs": batch})
        self._runner.host.finish(ModeKeys.PREDICT)
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

        Every batch is padded to `params['batch_size']` rows per replica on the
        device and the padded rows are dropped here, so the result has exactly
        one row per input row, in input order, whatever the last batch's size.

        Returns:
            The structure of `TPUEstimatorSpec.predictions` (usually a dict).

        Example:

        ```python
        predictions = model.predict(predict_input_fn)   # {"probabilities": array}
        ```
        """
        batches = list(self.predict_batches(x, batch_size, verbose, steps, callbacks))
        if not batches:
            return tf.nest.map_structure(
                lambda s: np.zeros([0] + s.shape[1:].as_list(), s.dtype.as_numpy_dtype),
                self._runner.output_specs[ModeKeys.PREDICT][0],
            )
        return tf.nest.map_structure(lambda *parts: np.concatenate(parts, axis=0), *batches)

    def call(self, inputs: Any, training: bool = False) -> Any:
        """Not supported: `model_fn` runs only inside the model's device loop.

        Raises:
            NotImplementedError: always; use `predict`.
        """
        raise NotImplementedError(
            "Call `model.predict(input)` instead: EstimatorModel runs model_fn only "
            "inside its own device loop."
        )
