"""`EstimatorModel`: a Keras 3 model whose train, test and predict steps call a `model_fn`.

The model coordinates; it implements none of the pieces. It takes the
variable store from `variables.py`, the device loop from `loop.py`, input
handling from `inputs.py` and strategy arithmetic from `strategy.py`, and
drives executions from `fit`, `evaluate` and `predict` with Keras'
`CallbackList` (history, progress bar, any stock callback).

It owns three rules:

- **Build once.** The first call of each mode traces `model_fn` in a
  throw-away graph from the input's per-replica element spec; every variable
  is created then. Later traces reuse variables by name.
- **Exact executions.** Each execution runs
  `min(steps_per_execution, steps left in the epoch, stop_at_step - global_step)`
  steps; the count is a tensor, so the tail does not retrace.
- **One global step per training step.** A `train_op` from a TF1 optimizer's
  `minimize(loss, global_step=...)` increments `global_step`; if a step's
  `train_op` leaves it unchanged, the model increments it.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.checkpoints import init_from_checkpoint
from keras_tpu_estimator.config import RunConfig
from keras_tpu_estimator.host import HostRunner
from keras_tpu_estimator.inputs import (
    call_input_fn,
    function_args,
    per_replica_spec,
    placeholders,
    static_batch_size,
)
from keras_tpu_estimator.loop import make_loop_function
from keras_tpu_estimator.padding import mask_scope, pad_batches, unpack
from keras_tpu_estimator.spec import (
    EstimatorSpec,
    InputFn,
    ModeKeys,
    ModelFn,
    TPUEstimatorSpec,
    check_spec,
)
from keras_tpu_estimator.strategy import TPUContext, per_replica_batch_size, resolve_strategy
from keras_tpu_estimator.variables import VariableStore

_log = logging.getLogger(__name__)
RESERVED_PARAMS_KEYS = ("batch_size", "context")
_BATCH_ARG = {
    ModeKeys.TRAIN: "train_batch_size",
    ModeKeys.EVAL: "eval_batch_size",
    ModeKeys.PREDICT: "predict_batch_size",
}


@dataclasses.dataclass
class _Settings:
    """Plain holder, so Keras' attribute tracking leaves these values alone."""

    model_fn: ModelFn
    params: dict
    config: RunConfig
    use_tpu: bool
    batch_sizes: dict
    global_batch: dict = dataclasses.field(default_factory=dict)
    output_specs: dict = dataclasses.field(default_factory=dict)
    spec_hooks: dict = dataclasses.field(default_factory=dict)
    host_specs: dict = dataclasses.field(default_factory=dict)
    element_specs: dict = dataclasses.field(default_factory=dict)
    host: HostRunner = dataclasses.field(default_factory=HostRunner)
    uses_keras_optimizer: bool = False


def check_params(params: Any) -> dict:
    """Returns a copy of `params`, or raises the seed's reserved-key ValueError."""
    params = dict(params or {})
    reserved = [key for key in RESERVED_PARAMS_KEYS if key in params]
    if reserved:
        raise ValueError(
            f"{list(RESERVED_PARAMS_KEYS)} are reserved keys but existed in params "
            f"{params}. Remove {reserved} from params: the batch size comes from "
            "train_batch_size/eval_batch_size/predict_batch_size."
        )
    return params


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
        if not callable(model_fn):
            raise TypeError(f"`model_fn` must be callable. Received: {model_fn!r}")
        if "params" not in function_args(model_fn):
            raise ValueError(
                f"model_fn ({getattr(model_fn, '__name__', model_fn)}) does not include "
                "params argument, required by TPUEstimator to pass batch size as "
                "params['batch_size']. Add a `params` argument."
            )
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
        self._settings = _Settings(
            model_fn=model_fn,
            params=check_params(params),
            config=config,
            use_tpu=bool(use_tpu),
            batch_sizes={
                ModeKeys.TRAIN: train_batch_size,
                ModeKeys.EVAL: eval_batch_size,
                ModeKeys.PREDICT: predict_batch_size,
            },
        )
        for mode, size in self._settings.batch_sizes.items():
            if size is not None:
                per_replica_batch_size(size, self._num_replicas, _BATCH_ARG[mode])
        if config.tf_random_seed is not None:
            keras.utils.set_random_seed(config.tf_random_seed)
        self._settings.host = HostRunner(config.tpu_config.experimental_host_call_every_n_steps)
        self._store = VariableStore(self, strategy)
        self.stop_at_step: int | None = None
        self.last_execution_loss: float | None = None
        self._seconds_per_step: float | None = None
        self.compile(optimizer=optimizer, steps_per_execution=steps_per_execution)

    # ----------------------------------------------------------------- basics
    @property
    def model_fn(self) -> ModelFn:
        """The user's `model_fn`."""
        return self._settings.model_fn

    @property
    def params(self) -> dict:
        """A copy of the user's params (without the keys the model adds)."""
        return copy.deepcopy(self._settings.params)

    @property
    def config(self) -> RunConfig:
        """The `RunConfig`."""
        return self._settings.config

    @property
    def global_step(self) -> int:
        """The current value of the `global_step` variable."""
        return int(self._store.global_step.numpy())

    @property
    def global_step_variable(self) -> keras.Variable:
        """The `global_step` variable (int64)."""
        return self._store.global_step

    @property
    def variables_by_name(self) -> dict[str, keras.Variable]:
        """`{TF1 name: variable}` for every variable `model_fn` created."""
        return self._store.variables_by_name

    @property
    def checkpoint_variables(self) -> dict[str, keras.Variable]:
        """What a checkpoint holds: `variables_by_name` plus the Keras optimizer's variables.

        The optimizer's are named `keras_optimizer/<path>`.
        """
        variables = self._store.variables_by_name
        if self._settings.uses_keras_optimizer and self.optimizer is not None:
            for variable in self.optimizer.variables:
                variables[f"keras_optimizer/{variable.path}"] = variable
        return variables

    @property
    def global_batch_size(self) -> int | None:
        """The global training batch size, once known."""
        return self._settings.global_batch.get(ModeKeys.TRAIN) or self._settings.batch_sizes[ModeKeys.TRAIN]

    @property
    def _num_replicas(self) -> int:
        return self._distribute_strategy.num_replicas_in_sync if self._settings.use_tpu else 1

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

    # ------------------------------------------------------------- model_fn
    def _params_for(self, mode: str, input_context: Any = None) -> dict:
        params = copy.deepcopy(self._settings.params)
        global_batch = self._settings.global_batch.get(mode)
        if global_batch is not None:
            params["batch_size"] = global_batch // self._num_replicas
        params["use_tpu"] = self._settings.use_tpu
        if self._settings.use_tpu:
            params["context"] = TPUContext(
                self._distribute_strategy, mode, global_batch, input_context
            )
        return params

    def call_model_fn(self, features: Any, labels: Any, mode: str, mask: Any = None) -> Any:
        """Calls `model_fn` with the arguments it declares, inside the variable store.

        Returns the checked spec. Use it inside a trace (a `tf.function` or a
        build graph); it is how every step of this model calls `model_fn`.
        """
        model_fn = self._settings.model_fn
        args = function_args(model_fn)
        if labels is not None and "labels" not in args:
            raise ValueError(
                "model_fn does not take labels, but input_fn returns labels. Add a "
                "`labels` argument to model_fn, or return only features from input_fn."
            )
        kwargs: dict[str, Any] = {"params": self._params_for(mode)}
        for name, value in (("labels", labels), ("mode", mode), ("config", self.config)):
            if name in args:
                kwargs[name] = value
        with self._store.scope(), mask_scope(mask):
            if "features" in args:
                spec = model_fn(features=features, **kwargs)
            else:
                spec = model_fn(features, **kwargs)
        spec = check_spec(spec, mode, model_fn)
        if isinstance(spec, EstimatorSpec) and spec.scaffold is not None:
            _log.warning("EstimatorSpec.scaffold is ignored. Use TPUEstimatorSpec.scaffold_fn.")
        return spec

    def _build_mode(self, mode: str, element_spec: Any) -> None:
        """Traces `model_fn` once in `mode` in a throw-away graph, creating its variables."""
        self._settings.element_specs[mode] = element_spec
        if mode in self._settings.output_specs:
            return
        features_spec, labels_spec, mask_spec = unpack(element_spec)
        if _compat.is_tpu_strategy(self._distribute_strategy):
            for name, spec in (("features", features_spec), ("labels", labels_spec)):
                for tensor_spec in tf.nest.flatten(spec):
                    if not tensor_spec.shape.is_fully_defined():
                        raise ValueError(
                            f"The {name} to the model returned by input_fn must have static "
                            f"shape. Tensor: {tensor_spec}. Batch with drop_remainder=True."
                        )
        init_calls: list = []
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._store.creating())
            stack.enter_context(_compat.default_replica_graph(f"build_{mode}"))
            stack.enter_context(_compat.recording_init_from_checkpoint(init_calls))
            features = placeholders(features_spec)
            labels = None if labels_spec is None else placeholders(labels_spec)
            mask = None if mask_spec is None else placeholders(mask_spec)
            spec = self.call_model_fn(features, labels, mode, mask)
            if isinstance(spec, TPUEstimatorSpec) and spec.scaffold_fn is not None:
                with self._store.scope():
                    if spec.scaffold_fn() is None:
                        raise ValueError(
                            "TPUEstimatorSpec.scaffold_fn returns None, which is not allowed. "
                            "Return `tf.compat.v1.train.Scaffold()`."
                        )
            output_spec = None
            if mode == ModeKeys.PREDICT:
                output_spec = (self._prediction_spec(spec.predictions, mask_spec), mask_spec)
        self._settings.host_specs[mode] = self._settings.host.record(
            mode, spec, self._num_replicas, padded=mask_spec is not None
        )
        hooks = {
            ModeKeys.TRAIN: "training_hooks",
            ModeKeys.EVAL: "evaluation_hooks",
            ModeKeys.PREDICT: "prediction_hooks",
        }[mode]
        self._settings.spec_hooks[mode] = list(getattr(spec, hooks))
        for ckpt, assignment_map in init_calls:
            init_from_checkpoint(self._store.variables_by_name, ckpt, assignment_map)
        if mode == ModeKeys.TRAIN:
            self._settings.uses_keras_optimizer = spec.train_op is None
            if spec.train_op is None:
                if self.optimizer is None:
                    raise ValueError(
                        "`model_fn` returned no `train_op` in TRAIN mode and the model has "
                        "no optimizer. Return `train_op=optimizer.minimize(loss, "
                        "global_step=...)`, or pass a Keras optimizer: "
                        "`EstimatorModel(..., optimizer=keras.optimizers.Adam())`."
                    )
                with self._distribute_strategy.scope():
                    self.optimizer.build(self.trainable_variables)
        self._settings.output_specs[mode] = output_spec
        self.built = True

    @staticmethod
    def _prediction_spec(predictions: Any, mask_spec: tf.TensorSpec) -> Any:
        """Specs of `predictions`, which must be batch-major with the static batch."""
        if not isinstance(predictions, (dict, tf.Tensor)):
            raise TypeError(
                "TPUEstimatorSpec.predictions must be dict of Tensors (or one Tensor). "
                f"Received: {type(predictions).__name__}."
            )
        rows = mask_spec.shape[0]
        items = predictions.items() if isinstance(predictions, dict) else [("predictions", predictions)]
        for key, tensor in items:
            if not isinstance(tensor, tf.Tensor):
                raise TypeError(
                    f"TPUEstimatorSpec.predictions[{key!r}] must be a Tensor. Received: "
                    f"{type(tensor).__name__}."
                )
            if tensor.shape.rank == 0 or tensor.shape[0] != rows:
                raise ValueError(
                    f"The tensor with key ({key}) in TPUEstimatorSpec.predictions must be "
                    f"batch-major with a static first dimension of params['batch_size'] "
                    f"({rows}). Received shape {tensor.shape}."
                )
        return tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), predictions)

    # ---------------------------------------------------------------- steps
    @staticmethod
    def _rows(features: Any) -> tf.Tensor:
        return tf.cast(tf.shape(tf.nest.flatten(features)[0])[0], tf.float32)

    def _host_values(self, mode: str, spec: Any, mask: Any) -> list:
        if self._settings.host_specs.get(mode) is None:
            return []
        return HostRunner.tensors(spec, mode) + ([mask] if mask is not None else [])

    def _static(self, mode: str, data: Any) -> Any:
        """`data` with the static per-replica shapes of the build.

        `MirroredStrategy`'s iterators relax the batch dimension to None (to
        allow partial batches); the padded batches are static, so restore it.
        """
        return tf.nest.map_structure(
            lambda tensor, spec: tf.ensure_shape(tensor, spec.shape),
            data,
            self._settings.element_specs[mode],
        )

    def _train_step(self, data: Any) -> dict:
        features, labels, _ = unpack(self._static(ModeKeys.TRAIN, data))
        step_variable = self._store.global_step.value
        before = step_variable.read_value()
        if self._settings.uses_keras_optimizer:
            variables = self.trainable_variables
            with tf.GradientTape() as tape:
                spec = self.call_model_fn(features, labels, ModeKeys.TRAIN)
                loss = tf.cast(spec.loss, tf.float32)
                scaled = loss / self._distribute_strategy.num_replicas_in_sync
            gradients = tape.gradient(scaled, [v.value for v in variables])
            self.optimizer.apply_gradients(zip(gradients, variables, strict=True))
            with tf.control_dependencies([tf.nest.flatten(gradients)[0]]):
                done = step_variable.assign_add(1)
        else:
            spec = self.call_model_fn(features, labels, ModeKeys.TRAIN)
            if spec.train_op is None:
                raise ValueError(
                    "`model_fn` returned a `train_op` when the model was built but None now. "
                    "Return the same kind of spec on every call."
                )
            with tf.control_dependencies([spec.train_op]):
                after = step_variable.read_value()
            # 1 when the train_op left the step alone, else 0: no branch, so the
            # cross-replica assignment stays outside control flow.
            missed = tf.cast(tf.equal(after, before), tf.int64)
            done = step_variable.assign_add(missed, read_value=False)
        with tf.control_dependencies([done]):
            loss = tf.identity(tf.cast(spec.loss, tf.float32))
            host = [tf.identity(t) for t in self._host_values(ModeKeys.TRAIN, spec, None)]
        return {"loss": loss, "weight": self._rows(features), "host": host}

    def _test_step(self, data: Any) -> dict:
        features, labels, mask = unpack(self._static(ModeKeys.EVAL, data))
        spec = self.call_model_fn(features, labels, ModeKeys.EVAL, mask)
        return {
            "loss": tf.cast(spec.loss, tf.float32),
            "weight": self._rows(features) if mask is None else tf.reduce_sum(mask),
            "host": self._host_values(ModeKeys.EVAL, spec, mask),
        }

    def _predict_step(self, data: Any) -> dict:
        features, labels, mask = unpack(self._static(ModeKeys.PREDICT, data))
        spec = self.call_model_fn(features, labels, ModeKeys.PREDICT, mask)
        return {
            "loss": tf.constant(0.0),
            "weight": tf.constant(0.0),
            "outputs": (spec.predictions, mask),
            "host": self._host_values(ModeKeys.PREDICT, spec, mask),
        }

    def _make_function(self, mode: str) -> Callable:
        step = {
            ModeKeys.TRAIN: self._train_step,
            ModeKeys.EVAL: self._test_step,
            ModeKeys.PREDICT: self._predict_step,
        }[mode]
        strategy = self._distribute_strategy

        @contextlib.contextmanager
        def around_run() -> Any:
            with self._store.scope():
                if mode == ModeKeys.TRAIN:
                    with _compat.estimator_loss_scaling(strategy):
                        yield
                else:
                    yield

        return make_loop_function(
            strategy,
            step,
            around_run=around_run,
            output_spec=self._settings.output_specs.get(mode),
            host_spec=self._settings.host_specs.get(mode),
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

    # ---------------------------------------------------------------- input
    def distribute_input(self, x: Any, mode: str, batch_size: int | None = None) -> Any:
        """Turns an `input_fn`, a dataset or arrays into a distributed dataset; builds `mode`.

        In EVAL and PREDICT every batch is padded to the static batch size with
        a mask (`padding.py`), so a partial last batch needs no special care.

        Returns:
            A distributed dataset whose replicas see `params['batch_size']` rows.
        """
        strategy = self._distribute_strategy
        pad = mode != ModeKeys.TRAIN
        global_batch = batch_size or self._settings.batch_sizes[mode]
        flat = [] if isinstance(x, tf.data.Dataset) or callable(x) else tf.nest.flatten(x)
        if flat and all(isinstance(a, np.ndarray) for a in flat):
            if global_batch is None:
                raise ValueError(f"Pass `batch_size` (or `{_BATCH_ARG[mode]}`) with array input.")
            x = tf.data.Dataset.from_tensor_slices(x).batch(global_batch, drop_remainder=not pad)
        if isinstance(x, tf.data.Dataset):
            static = static_batch_size(x.element_spec)
            global_batch = global_batch if pad and global_batch else static or global_batch
            if global_batch is None:
                raise ValueError(
                    f"The dataset's batch size is not static. Batch it with "
                    f"`drop_remainder=True`, or pass `{_BATCH_ARG[mode]}`."
                )
            self._check_batch(static, global_batch, pad, "The dataset")
            per_replica_batch_size(global_batch, self._num_replicas, _BATCH_ARG[mode])
            self._settings.global_batch[mode] = global_batch
            if pad:
                x = pad_batches(x, global_batch)
            self._build_mode(mode, per_replica_spec(x.element_spec, self._num_replicas))
            if not self._settings.use_tpu:
                return x
            return strategy.experimental_distribute_dataset(x)
        if not callable(x):
            raise TypeError(
                "Input must be an `input_fn(params)`, a tf.data.Dataset or NumPy arrays. "
                f"Received: {type(x).__name__}"
            )
        if global_batch is None:
            raise ValueError(
                f"`{_BATCH_ARG[mode]}` is needed to call an input_fn: it sets "
                f"params['batch_size']. Pass it to EstimatorModel."
            )
        per_replica = per_replica_batch_size(global_batch, self._num_replicas, _BATCH_ARG[mode])
        self._settings.global_batch[mode] = global_batch
        specs = []

        def dataset_fn(input_context: tf.distribute.InputContext | None = None) -> Any:
            params = self._params_for(mode, input_context)
            dataset = call_input_fn(x, mode, params, self.config, input_context)
            self._check_batch(static_batch_size(dataset.element_spec), per_replica, pad, "input_fn")
            if pad:
                replicas = 1
                if input_context is not None:
                    replicas = input_context.num_replicas_in_sync // input_context.num_input_pipelines
                dataset = pad_batches(dataset, per_replica, replicas)
            specs.append(dataset.element_spec)
            return dataset

        if not self._settings.use_tpu:
            dataset = dataset_fn()
        else:
            dataset = strategy.distribute_datasets_from_function(dataset_fn)
        self._build_mode(mode, specs[0])
        return dataset

    @staticmethod
    def _check_batch(static: int | None, expected: int, pad: bool, source: str) -> None:
        if static is None or static == expected or (pad and static < expected):
            return
        raise ValueError(
            f"{source} returned batches of {static} rows, but params['batch_size'] is "
            f"{expected}" + (" (the real batch size should not be greater than batch_size)" if pad else "")
            + ". Batch with params['batch_size']."
        )

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
        if result.host is not None and steps:
            host = [tensor.numpy() for tensor in result.host]
            self._settings.host.submit(mode, host, first_step, steps)
        return steps, loss_sum, weight_sum, result.outputs

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
        dataset = self.distribute_input(x, ModeKeys.TRAIN, batch_size)
        function = self.make_train_function()
        callbacks = keras.callbacks.CallbackList(
            list(callbacks or []) + self._settings.spec_hooks[ModeKeys.TRAIN],
            add_history=True,
            add_progbar=verbose != 0,
            verbose=verbose,
            epochs=epochs,
            steps=steps_per_epoch,
            model=self,
        )
        self.stop_training = False
        callbacks.on_train_begin()
        if steps_per_epoch is None and self.stop_at_step is not None:
            callbacks.set_params(
                {"verbose": verbose, "epochs": epochs, "steps": max(0, self.stop_at_step - self.global_step)}
            )
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
        self._settings.host.finish(ModeKeys.TRAIN)
        callbacks.on_train_end(logs=epoch_logs)
        return self.history

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
        dataset = self.distribute_input(x, ModeKeys.EVAL, batch_size)
        function = self.make_test_function()
        callbacks = keras.callbacks.CallbackList(
            list(callbacks or []) + self._settings.spec_hooks[ModeKeys.EVAL], add_progbar=verbose != 0, verbose=verbose, epochs=1, steps=steps, model=self
        )
        host = self._settings.host
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
        dataset = self.distribute_input(x, ModeKeys.PREDICT, batch_size)
        function = self.make_predict_function()
        callbacks = keras.callbacks.CallbackList(
            list(callbacks or []) + self._settings.spec_hooks[ModeKeys.PREDICT],
            add_progbar=verbose != 0, verbose=verbose, epochs=1, steps=steps, model=self,
        )
        rows = self._settings.global_batch[ModeKeys.PREDICT]
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
        self._settings.host.finish(ModeKeys.PREDICT)
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
                self._settings.output_specs[ModeKeys.PREDICT][0],
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
