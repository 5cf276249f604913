"""`EstimatorModel`: a Keras 3 model whose train, test and predict steps call a `model_fn`.

The model coordinates; it implements none of the pieces. It takes the
`model_fn` runner (calls, build-once, input, replica steps) from
`engine/runner.py`, the device loop from `engine/loop.py`, the host side from `host/runner.py`
and `fit` / `evaluate` / `predict` from `model/trainer.py` (as Keras 3 mixes its
`Trainer` into `Model`). It owns the strategy choice, the loop functions,
and one rule: **one global step per training step** (applied by the
runner's train step): a `train_op` from `minimize(loss, global_step=...)`
increments `global_step`; if a step's `train_op` leaves it unchanged, the
step does.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.contract import (
    ModeKeys,
    ModelFn,
    RunConfig,
    check_model_fn,
    plain_count,
)
from keras_tpu_estimator.distribute import RunPath, num_workers
from keras_tpu_estimator.engine import (
    GRAPH_MODE_KERAS_FACE,
    ExecutionDriver,
    ModelFnRunner,
    checked_variables,
    make_loop_function,
)
from keras_tpu_estimator.tf1 import per_replica_collections
from keras_tpu_estimator.utils import get_logger
from keras_tpu_estimator.xla import (
    StepCompilation,
    TPUCompatibilityReport,
    check_jit_compile,
    check_model,
    resolve_step_compilation,
    scratch_config,
    tpu_cores,
)

from .batch_methods import SingleBatchMethods
from .keras_methods import KerasMethods
from .trainer import EstimatorTrainer

_log = get_logger(__name__)


class EstimatorModel(KerasMethods, SingleBatchMethods, EstimatorTrainer, keras.Model):
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
            `params['context']`; `False` runs on the CPU path, as the
            Estimator ran: the batch size as `params['batch_size']`, on the
            default strategy, or on `strategy` / `config.train_distribute`
            with each replica taking whole batches of the input in turn
            (`input_fn` gets the strategy's `InputContext`); see `fit`.
        strategy: A `tf.distribute.Strategy` to use instead of resolving one.
        train_batch_size, eval_batch_size, predict_batch_size: Global batch
            sizes, needed when the input is an `input_fn`.
        optimizer: A Keras optimizer, used when `model_fn`'s TRAIN spec has no
            `train_op`: the model minimises the spec's loss with it.
        steps_per_execution: Steps per device execution; defaults to
            `config.tpu_config.iterations_per_loop`.
        jit_compile: `True` compiles each replica step with XLA off a TPU (a
            TPU always does), `False` does not; `"auto"` takes
            `config.jit_compile`, else the TF1 switch `global_jit_level` of
            `config.session_config` (XLA auto-clustering), else no XLA. See
            `xla/step_compilation.py`.
        name: The Keras model name.

    Example:

    ```python
    model = EstimatorModel(model_fn, params={"lr": 0.1}, train_batch_size=8, eval_batch_size=8,
                           predict_batch_size=8,
                           config=RunConfig(tpu_config=kte.TPUConfig(iterations_per_loop=2)))
    model.fit(input_fn, callbacks=[kte.StopAtStep(steps=2)])
    model.evaluate(eval_input_fn, steps=1)
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
        jit_compile: bool | str = "auto",
        name: str = "estimator_model",
    ):
        if not tf.executing_eagerly():
            raise RuntimeError(GRAPH_MODE_KERAS_FACE)
        super().__init__(name=name)
        check_model_fn(model_fn)
        config = config or RunConfig()
        if not isinstance(config, RunConfig):
            raise ValueError(
                "`config` must be provided with type keras_tpu_estimator.RunConfig. "
                f"Received: {type(config).__name__}"
            )
        path = RunPath.decide(use_tpu, strategy, config)  # the CPU path or the strategy path, once
        strategy = path.strategy
        _compat.set_distribute_strategy(self, strategy)
        self._multi_worker = num_workers(strategy) > 1
        if config.tf_random_seed is not None:
            keras.utils.set_random_seed(config.tf_random_seed)
        batch_sizes = {
            ModeKeys.TRAIN: plain_count(train_batch_size),  # NumPy ints as Python ints, for TF's int32 ops
            ModeKeys.EVAL: plain_count(eval_batch_size),
            ModeKeys.PREDICT: plain_count(predict_batch_size),
        }
        self._runner = ModelFnRunner(self, model_fn, params, config, path, batch_sizes)
        self._driver = ExecutionDriver(self, self._runner.host)
        self._jit_setting = check_jit_compile(jit_compile, "jit_compile")
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
        return self._driver.global_step()

    @property
    def global_step_variable(self) -> keras.Variable:
        """The `global_step` variable (int64)."""
        return self._runner.store.global_step

    @property
    def variables_by_name(self) -> dict[str, keras.Variable]:
        """`{TF1 name: variable}` for every variable `model_fn` created."""
        return self._runner.store.variables_by_name

    def loss_op_name(self, mode: str) -> str | None:
        """The op name `model_fn` gave its loss in `mode` (what TF1 hooks fetch by name)."""
        record = self._runner.modes.get(mode)
        return record.loss_name if record else None

    @property
    def runs_on_strategy_path(self) -> bool:
        """`use_tpu`: per-replica batches on the strategy, rather than the CPU path."""
        return self._runner.path.strategy_path

    @property
    def checkpoint_variables(self) -> dict[str, keras.Variable]:
        """What a checkpoint holds: `variables_by_name` plus the Keras optimizer's variables.

        The optimizer's are named `keras_optimizer/<path within the optimizer>`
        (`keras_optimizer/iteration`, `keras_optimizer/mlp_hidden_kernel_momentum`):
        not by the optimizer's own name, which Keras numbers per process (`sgd_1`).
        TF1 local variables (metric accumulators) are not saved, as a TF1 `Saver`
        did not save them.
        """
        store = self._runner.store
        variables = store.variables_by_name
        for name in store.local_names:
            del variables[name]
        if self._runner.uses_keras_optimizer and self.optimizer is not None:
            own = self.optimizer.name + "/"
            for variable in self.optimizer.variables:
                path = variable.path[len(own):] if variable.path.startswith(own) else variable.path
                variables[f"keras_optimizer/{path}"] = variable
        return variables

    @property
    def global_batch_size(self) -> int | None:
        """The global training batch size, once known."""
        record = self._runner.modes.get(ModeKeys.TRAIN)
        return (record and record.batch.global_size) or self._runner.configured[ModeKeys.TRAIN].global_size

    @property
    def tf1_summaries(self) -> Any:
        """Where `model_fn`'s TF1 summaries go in training (`tf1_summaries.TF1Summaries`; `StepSummaries` starts it)."""
        return self._runner.host.tf1_summaries

    def release_host(self) -> None:
        """Ends the host thread and closes the host functions' sessions.

        For a model that is done (each `TPUEstimator` call ends with it); its
        `host_call` / `eval_metrics` cannot run afterwards.
        """
        self._runner.host.close()

    def select_predictions(self, keys: Sequence[str] | str | None) -> None:
        """Computes only the predictions under `keys` (None: all) in this model's prediction steps.

        What `TPUEstimator.predict(predict_keys=...)` does on the CPU path: TF1
        fetched only those, so the others never ran. Call it before the first
        prediction (the step is built with the selection).

        Example:

        ```python
        model.select_predictions(["class"])
        model.predict(predict_input_fn)   # {"class": ...}; "probabilities" is not computed
        ```
        """
        selected = keys or None  # as given: the original's errors show it
        record = self._runner.modes.get(ModeKeys.PREDICT)
        if record is not None and record.built and selected != self._runner.predict_keys:
            raise ValueError("select_predictions must be called before the model's first prediction.")
        self._runner.predict_keys = selected

    def call_model_fn(self, features: Any, labels: Any, mode: str, mask: Any = None) -> Any:
        """Calls `model_fn` as the model's steps do (inside a trace); returns the checked spec."""
        return self._runner.call_model_fn(features, labels, mode, mask)

    def compile(
        self,
        optimizer: Any = None,
        *,
        steps_per_execution: int | str | None = None,
        jit_compile: bool | str | None = None,
        **kwargs: Any,
    ) -> None:
        """Sets the Keras optimizer (if `model_fn` has no `train_op`), `steps_per_execution`, `jit_compile`.

        `loss` and `metrics` come from `model_fn`; passing them is an error.
        `jit_compile` is as the constructor's; None keeps the model's.

        Example:

        ```python
        model.compile(optimizer=keras.optimizers.Adam(1e-3), steps_per_execution=2,
                      jit_compile=True)
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
            with self.distribute_strategy.scope():
                optimizer = optimizer.__class__.from_config(optimizer.get_config())
        elif optimizer is not None and not isinstance(optimizer, keras.optimizers.Optimizer):
            with self.distribute_strategy.scope():
                optimizer = keras.optimizers.get(optimizer)
        if jit_compile is not None:
            self._jit_setting = check_jit_compile(jit_compile, "jit_compile")
        self._step_compilation = resolve_step_compilation(self._jit_setting, self.config)
        super().compile(
            optimizer=optimizer,
            steps_per_execution=1,
            jit_compile=self._step_compilation is StepCompilation.MUST,
        )
        if optimizer is None and self._runner.built(ModeKeys.TRAIN) and not self._runner.uses_keras_optimizer:
            self.optimizer = self._runner.train_op_optimizer()  # what model_fn's train_op uses
        loop = steps_per_execution or self.config.tpu_config.iterations_per_loop
        parsed = self.config.tpu_config.replace(iterations_per_loop=loop).parsed_iterations_per_loop
        self._driver.iterations_per_loop = parsed  # the only place executions are sized from
        self.steps_per_execution = parsed.value if parsed.unit == "count" else 1
        self.train_function = self.test_function = self.predict_function = None

    def _make_function(self, mode: str) -> Callable:
        step = {
            ModeKeys.TRAIN: self._runner.train_step,
            ModeKeys.EVAL: self._runner.test_step,
            ModeKeys.PREDICT: self._runner.predict_step,
        }[mode]
        strategy = self.distribute_strategy
        host_plan = self._runner.modes[mode].host_plan

        @contextlib.contextmanager
        def around_run() -> Any:
            with self._runner.store.scope(), per_replica_collections():
                yield

        return make_loop_function(
            strategy,
            step,
            around_run=around_run,
            output_spec=self._runner.modes[mode].output_spec,
            host_spec=None if host_plan is None else host_plan.specs,
            host_concat=None if host_plan is None else host_plan.concat,
            read_after=self._after_train_execution if mode == ModeKeys.TRAIN else None,
            replica_tail=(
                self._runner.apply_keras_optimizer
                if mode == ModeKeys.TRAIN and self._runner.uses_keras_optimizer
                else None
            ),
            require_rows=(
                # The CPU path's replicas take whole batches: at the end of the input a step
                # may have fewer batches than replicas (the original's step then did not run).
                (mode == ModeKeys.TRAIN or (mode == ModeKeys.EVAL and not self._runner.path.strategy_path))
                and strategy.num_replicas_in_sync > 1
                and not self._runner.path.tpu_strategy  # static shapes: no empty replica
            ),
            host_from_first_replica=self._runner.path.hooks_from_first_replica,  # the Estimator's replica 0 hooks
            compilation=self._step_compilation,
        )

    def _after_train_execution(self) -> tuple[list, tf.Tensor]:
        """Read inside the train function: `([global step, all finite], finite per variable)`."""
        step = self._runner.store.global_step.value.read_value()
        checked = [v.value for v in checked_variables(self.trainable_variables)]
        finite = tf.stack([tf.reduce_all(tf.math.is_finite(v)) for v in checked] or [tf.constant(True)])
        return [step, tf.reduce_all(finite)], finite

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

    def check_tpu_compatibility(
        self, input_fn: Any, modes: str | Sequence[str] = ("train", "eval", "predict")
    ) -> TPUCompatibilityReport:
        """Whether `model_fn` will compile for a TPU, checked here with XLA (`xla/readiness.py`).

        Builds each mode's replica step as a TPU core gets it (the mode's
        global batch over `TPUConfig.num_shards` cores, else 8; EVAL and PREDICT
        padded) in a scratch copy of this model, and compiles it with XLA.
        This model, its variables, global step and `model_dir` are untouched.

        Example:

        ```python
        report = model.check_tpu_compatibility(input_fn)
        print(report)     # "TPU compatibility: OK (8 TPU cores ...)", each mode with its HLO size
        ```
        """
        runner = self._runner
        optimizer = self.optimizer if isinstance(self.optimizer, keras.optimizers.Optimizer) else None
        if runner.built(ModeKeys.TRAIN) and not runner.uses_keras_optimizer:
            optimizer = None  # model_fn's train_op has its own
        sizes = {mode: plan.global_size for mode, plan in runner.configured.items()}
        return check_tpu_compatibility(
            runner.model_fn, runner.params, self.config, sizes, input_fn, modes,
            optimizer=optimizer, predict_keys=runner.predict_keys,
        )

    def call(self, inputs: Any, training: bool = False) -> Any:
        """Not supported: `model_fn` runs only inside the model's device loop.

        Raises:
            NotImplementedError: always; use `predict`.
        """
        raise NotImplementedError(
            "Call `model.predict(input)` instead: EstimatorModel runs model_fn only "
            "inside its own device loop."
        )


def check_tpu_compatibility(
    model_fn: ModelFn,
    params: dict | None,
    config: RunConfig,
    batch_sizes: dict,
    input_fn: Any,
    modes: str | Sequence[str] = ("train", "eval", "predict"),
    optimizer: Any = None,
    predict_keys: Any = None,
) -> TPUCompatibilityReport:
    """`tpu_readiness.check_model` on a scratch `EstimatorModel` of `model_fn` (one device, per-core batches).

    `batch_sizes`: `{ModeKeys value: global batch or None}`. The scratch model
    is on the default strategy with `TPUConfig.num_shards` (else 8) replicas'
    worth of batch split off: each step sees one TPU core's batch.

    Example:

    ```python
    report = check_tpu_compatibility(model_fn, {}, RunConfig(), {"train": 8}, input_fn, "train")
    ```
    """
    if tf.distribute.has_strategy():
        raise RuntimeError(
            "check_tpu_compatibility builds a scratch model on one device: call it outside "
            "`strategy.scope()` (the model's own strategy is not needed)."
        )
    if isinstance(optimizer, keras.optimizers.Optimizer):
        optimizer = optimizer.__class__.from_config(optimizer.get_config())  # the user's keeps its state
    scratch = EstimatorModel(
        model_fn, params=params, config=scratch_config(config), use_tpu=True,
        strategy=tf.distribute.get_strategy(), optimizer=optimizer, name="tpu_compatibility_check",
        train_batch_size=batch_sizes.get(ModeKeys.TRAIN), eval_batch_size=batch_sizes.get(ModeKeys.EVAL),
        predict_batch_size=batch_sizes.get(ModeKeys.PREDICT),
    )
    cores = tpu_cores(config)
    # Per-core batches on one device, and the steps a TPU runs (TF1 summaries not written).
    scratch._runner.path = scratch._runner.path.as_tpu_program(cores)
    scratch._runner.predict_keys = predict_keys
    return check_model(scratch, input_fn, modes, cores)
