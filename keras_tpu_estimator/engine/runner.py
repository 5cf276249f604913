"""Running a `model_fn`: how it is called, built once, fed, and turned into replica steps.

`ModelFnRunner` owns the run-time side of the model_fn contract, for one
Keras model (its *owner*, which tracks the variables and holds any Keras
optimizer):

- **calls**: `model_fn` gets only the arguments it declares, a fresh copy of
  `params` with `batch_size` (per replica), `use_tpu` and `context` (made by the
  model's `RunPath`, which says which path it runs and what follows), inside
  the variable store and with the batch's padding mask available;
- **build once**: the first call of each mode traces `model_fn` in a
  throw-away graph from the per-replica element spec, creating every variable,
  running `scaffold_fn`, replaying `init_from_checkpoint`, and recording what
  the host and the device loop will need;
- **input**: `inputs.prepare_input` does the input job (an `input_fn`, a
  dataset or arrays become a distributed dataset of `params['batch_size']`
  rows per replica, padded in EVAL and PREDICT on the strategy path) and
  returns what it found; the runner keeps the batch and builds from the spec;
- **steps**: the per-replica train, test and predict steps the device loop runs.

It leaves the loop to `engine/loop.py`, the host side to `host/runner.py` and the Keras API
(`fit`, `evaluate`, `predict`) to `model/trainer.py`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator._compat.keras_state import (
    optimizer_update_op,
    recording_keras_optimizers,
)
from keras_tpu_estimator.contract import (
    ModeKeys,
    ModelFn,
    RunConfig,
    TPUEstimatorSpec,
    check_model_fn,
    check_params,
)
from keras_tpu_estimator.distribute import RunPath
from keras_tpu_estimator.host import HostPlan, HostRunner, PredictionPlan, select_keys
from keras_tpu_estimator.inputs import (
    BatchPlan,
    batch_tensor,
    mask_scope,
    placeholders,
    prepare_input,
    unpack,
)
from keras_tpu_estimator.model_dir import init_from_checkpoint
from keras_tpu_estimator.tf1 import (
    ScaffoldSession,
    StepMetrics,
    StepTensors,
    VariableStore,
    always_increments,
    built_hook_tensors,
    run_local_init_op,
    run_scaffold_initialisers,
    summary_names,
    synchronized_gradients,
    traced_saver_of,
    train_op_optimizer,
)
from keras_tpu_estimator.utils import get_logger

from .invoke import call_scaffold_fn, invoke_model_fn

_log = get_logger(__name__)


@dataclasses.dataclass
class ModeRecord:
    """What the runner knows of one mode: the current call's batch and input, and its build.

    Attributes:
        batch: The `BatchPlan` of the current (or last) call.
        element_spec: The per-replica element spec of that call's input.
        built: Whether `model_fn` has been traced in this mode.
        output_spec: What each step returns to the caller (PREDICT: `predictions.output_spec`).
        predictions: PREDICT's `PredictionPlan`: how predictions reach the host.
        hooks: The spec's `training_hooks` / `evaluation_hooks` / `prediction_hooks`.
        hook_tensors: The names of the tensors those hooks held at build (`built_hook_tensors`).
        graph: The build's graph (where hooks find the tensors model_fn computes in the step).
        loss_name: The op name `model_fn` gave its loss (what TF1 hooks fetch).
        host_plan: What each step sends to the host, in which order (`host/plan.py`), or None.
        input_steps: The steps a new iterator of the current call's input holds,
            when known: `math.inf` for a repeated dataset, a count when every
            step takes one element of one dataset of known size (one replica,
            or the CPU path), else None.
        scaffold: The build's Scaffold (`scaffold_fn()` or `EstimatorSpec.scaffold`), or None.
    """

    batch: BatchPlan
    element_spec: Any = None
    built: bool = False
    output_spec: Any = None
    predictions: PredictionPlan | None = None
    hooks: list = dataclasses.field(default_factory=list)
    hook_tensors: list = dataclasses.field(default_factory=list)
    graph: Any = None
    loss_name: str | None = None
    host_plan: HostPlan | None = None
    input_steps: float | None = None
    scaffold: Any = None


class ModelFnRunner:
    """Calls, builds, feeds and steps one `model_fn` for one Keras model.

    Args:
        owner: The `keras.Model` that tracks the variables (and holds any Keras optimizer).
        model_fn: The user's `model_fn`.
        params: The user's params (checked; copied per call).
        config: `RunConfig`.
        path: The owner's `RunPath`: its strategy, and the CPU path or the strategy path.
        batch_sizes: `{mode: global batch size or None}`.

    Example:

    ```python
    path = RunPath.decide(use_tpu=True, strategy=None, config=RunConfig())
    runner = ModelFnRunner(model, model_fn, {}, RunConfig(), path,
                           {"train": 64, "eval": None, "infer": None})
    dataset = runner.distribute_input(input_fn, ModeKeys.TRAIN)   # builds TRAIN
    ```
    """

    def __init__(
        self,
        owner: keras.Model,
        model_fn: ModelFn,
        params: dict,
        config: RunConfig,
        path: RunPath,
        batch_sizes: dict,
    ):
        check_model_fn(model_fn)
        self._owner = owner
        self.model_fn = model_fn
        self.params = check_params(params)
        self.config = config
        self.path = path
        self.strategy = strategy = path.strategy
        # The configured batches, checked here; a call's own batch gets its plan when it runs.
        self.configured = {mode: BatchPlan(mode, size) for mode, size in batch_sizes.items()}
        self.store = VariableStore(owner, strategy)
        self.host = HostRunner(path.host_call_every_n)
        self.modes: dict[str, ModeRecord] = {}
        self.uses_keras_optimizer = False
        self.hook_tensors = StepTensors(strategy)  # in-step tensors session hooks fetch (tf1/step_tensors.py)
        self.keras_optimizers: list = []  # Keras optimizers model_fn created (for model.optimizer)
        self.metrics = StepMetrics()  # the EVAL step's TF1 metrics (tf1/metric_ops.py)
        self.predict_keys: Sequence[str] | str | None = None  # the only predictions PREDICT computes
        self.initialised = False  # restored, or initialised with the Scaffold's init_op / init_fn

    def params_for(self, mode: str, input_context: Any = None, for_input_fn: bool = False) -> dict:
        """A fresh copy of params for one call: `batch_size` (per replica), `context`, `use_tpu` (model_fn)."""
        record = self.modes.get(mode)
        batch = record.batch if record else None
        return self.path.params(
            self.params, mode, batch and batch.global_size, batch and batch.per_replica, input_context, for_input_fn
        )

    def call_model_fn(self, features: Any, labels: Any, mode: str, mask: Any = None) -> Any:
        """Calls `model_fn` with the arguments it declares, inside the variable store.

        Returns the checked spec. Use it inside a trace (a `tf.function` or a
        build graph); it is how every step of this model calls `model_fn`.
        """
        return invoke_model_fn(
            self.model_fn, features, labels, mode, self.params_for(mode), self.config,
            contexts=(
                self.store.scope(),
                recording_keras_optimizers(self.keras_optimizers),
                mask_scope(mask),
                synchronized_gradients(),
            ),
        )

    def build(self, mode: str, element_spec: Any) -> None:
        """Traces `model_fn` once in `mode` in a throw-away graph, creating its variables."""
        record = self.modes[mode]
        record.element_spec = element_spec
        if record.built:
            return
        features_spec, labels_spec, mask_spec = unpack(element_spec)
        if mode == ModeKeys.PREDICT and not self.path.labels_in_predict:
            labels_spec = None  # the original's CPU path predicted as an Estimator: labels None
        if self.path.tpu_strategy:
            for name, spec in (("features", features_spec), ("labels", labels_spec)):
                for tensor_spec in tf.nest.flatten(spec):
                    if not tensor_spec.shape.is_fully_defined():
                        raise ValueError(
                            f"The {name} to the model returned by input_fn must have static "
                            f"shape on a TPU. Tensor: {tensor_spec}. Batch with drop_remainder=True, "
                            "or pad every batch to a fixed size."
                        )
        init_calls: list = []
        existing = set(self.store.variables_by_name)
        if self.config.tf_random_seed is not None and existing <= {"global_step"}:
            # TF1 seeded each new graph: the same seed gives the same initial values
            # however many models were made in this process before this one built.
            keras.utils.set_random_seed(self.config.tf_random_seed)
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.store.creating())
            graph = stack.enter_context(_compat.default_replica_graph(f"build_{mode}"))
            stack.enter_context(_compat.recording_init_from_checkpoint(init_calls))
            stack.enter_context(_compat.moving_averages_on_first_component(self.strategy))
            features = placeholders(features_spec)
            labels = None if labels_spec is None else placeholders(labels_spec)
            mask = None if mask_spec is None else placeholders(mask_spec)
            spec = self.call_model_fn(features, labels, mode, mask)
            scaffold = getattr(spec, "scaffold", None)  # an EstimatorSpec's (invoke checked it)
            if isinstance(spec, TPUEstimatorSpec) and spec.scaffold_fn is not None:
                with self.store.scope():
                    scaffold = call_scaffold_fn(spec.scaffold_fn)
            summaries = summary_names(graph)
            # TF1 summaries: written in TRAIN off a TPU, as the Estimator's SummarySaverHook
            # wrote them (tf1/summaries.py); its evaluate and predict wrote none, nor its TPU path.
            on_tpu = self.path.on_tpu
            writes_summaries = bool(summaries) and self.path.writes_tf1_summaries(mode)
            if summaries and not writes_summaries:
                _log.warning(
                    "model_fn creates TF1 summaries %s in %s mode. Summaries inside model_fn "
                    "are not written %s. Write them in host_call: "
                    "return `host_call=(fn, [tensor])` and call `tf.summary.scalar` in fn.",
                    summaries, mode,
                    "on a TPU (nor were they by TPUEstimator)" if on_tpu
                    else "in evaluation or prediction (nor were they by the Estimator)",
                )
            output_spec = None
            if mode == ModeKeys.PREDICT:
                record.predictions = PredictionPlan.at_build(spec.predictions, mask_spec, self.predict_keys)
                output_spec = record.predictions.output_spec(mask_spec)
            if mode == ModeKeys.EVAL:
                with self.store.scope():
                    self.metrics, pairs = StepMetrics.at_build(
                        spec, not self.path.eval_metrics_in_step, self.strategy.num_replicas_in_sync
                    )
                    output_spec = self.metrics.output_spec(self.metrics.step_values(spec, pairs)[1])
                spec = self.metrics.host_spec(spec)
        # On the CPU path the host gets each step's tensors as model_fn made them (ragged
        # when their shapes vary by step), as the original's CPU path passed them.
        plan = HostPlan.from_spec(
            mode, spec, self.path.local_replicas, padded=mask_spec is not None, ragged=self.path.ragged_host_tensors,
            summaries=writes_summaries, mask_rows=None if mask_spec is None else tf.compat.dimension_value(mask_spec.shape[0]),
        )
        record.host_plan = None if plan is None else self.host.record(plan)
        hooks = {
            ModeKeys.TRAIN: "training_hooks",
            ModeKeys.EVAL: "evaluation_hooks",
            ModeKeys.PREDICT: "prediction_hooks",
        }[mode]
        record.hooks = list(getattr(spec, hooks))
        record.scaffold = scaffold
        record.loss_name = getattr(spec.loss, "op", None) and spec.loss.op.name
        record.graph = graph  # where hooks find tensors model_fn computed
        record.hook_tensors = built_hook_tensors(record.hooks)
        # TF1 ran init_from_checkpoint as the variables' initializers: once, when
        # they are created (a restore from model_dir comes later and wins).
        variables = self.store.variables_by_name
        created = set(variables) - existing
        for ckpt, assignment_map in init_calls:
            init_from_checkpoint(variables, ckpt, assignment_map, only=created)
        if mode == ModeKeys.TRAIN:
            self.uses_keras_optimizer = spec.train_op is None
            if spec.train_op is None:
                if not isinstance(self._owner.optimizer, keras.optimizers.Optimizer):
                    raise ValueError(
                        "Missing train_op. `model_fn` returned no `train_op` in TRAIN mode and "
                        "the model has no optimizer. Return `train_op=optimizer.minimize(loss, "
                        "global_step=...)`, or pass a Keras optimizer: "
                        "`EstimatorModel(..., optimizer=keras.optimizers.Adam())`."
                    )
                with self.strategy.scope():
                    self._owner.optimizer.build(self._owner.trainable_variables)
            else:
                self._owner.optimizer = self.train_op_optimizer()
        record.output_spec = output_spec
        record.built = True
        self._owner.built = True

    def restore_names(self, mode: str) -> dict[str, str]:
        """`{variable: checkpoint name}` where EVAL / PREDICT's Scaffold saver reads another name (EMA).

        Empty in TRAIN, which restores `model_dir` by the variables' own names.
        """
        record = self.modes.get(mode)
        saver = traced_saver_of(record.scaffold) if record is not None and mode != ModeKeys.TRAIN else None
        return {} if saver is None else {name: key for name, key in saver.names.items() if name != key}

    def start_session(self, mode: str, restored: bool) -> None:
        """After a call's restore: the Scaffold's `init_op` / `init_fn` (nothing restored, once), `local_init_op`."""
        record = self.modes.get(mode)
        scaffold = record.scaffold if record is not None else None
        session = ScaffoldSession(self.store.variables_by_name, self.strategy)
        if not restored and not self.initialised:
            run_scaffold_initialisers(scaffold, session)
        self.initialised = True
        run_local_init_op(scaffold, session)

    def train_op_optimizer(self) -> Any:
        """`model.optimizer` when `model_fn` returns its own `train_op` (see `optimizer_view`)."""
        return train_op_optimizer(self._owner.optimizer, self.keras_optimizers, self.store.global_step)

    # ---------------------------------------------------------------- steps
    def _weight(self, features: Any) -> tf.Tensor:
        """How much an unpadded step's loss counts, as a float32 scalar (a constant: the loop skips weighting).

        On the CPU path every step counts once, as the original averaged its
        batches' losses; on the strategy path a replica's loss counts by its
        rows (the first feature with a batch dimension).
        """
        first = batch_tensor(features) if self.path.loss_weighted_by_rows else None
        if first is None:  # the CPU path, or scalar features only: one example
            return tf.constant(1.0)
        rows = tf.compat.dimension_value(first.shape[0]) if first.shape.rank else None
        if rows is not None:
            return tf.constant(float(rows))
        return tf.cast(tf.shape(first)[0], tf.float32)

    def _hook_writes(self, mode: str, spec: Any) -> list:
        """The step's writes of the tensors session hooks fetch (`tf1/step_tensors.py`)."""
        return self.hook_tensors.capture(mode, spec, self.modes[mode].hook_tensors)

    def _host_values(self, mode: str, spec: Any, mask: Any, step_before: Any = None) -> list:
        """What one step sends to the host, in the host plan's order (`host/plan.py`).

        `step_before`: in TRAIN, the global step before the update (it schedules TF1 summaries).
        """
        plan = self.modes[mode].host_plan
        if plan is None:
            return []
        summary = self.host.tf1_summaries.step_summary(step_before) if plan.summaries else None
        return plan.device_values(spec, mask, summary)

    def _host_step_before(self, spec: Any, before: tf.Tensor) -> Any:
        """On the strategy path, `spec` with its `host_call` tensors reading the global step as `before`.

        A TPU's host call saw the step's 0-based index wherever `model_fn` read
        the global step (before or after `minimize`); `train_op`, the loss and
        TF1 summaries keep their own reads. The CPU path keeps program order.
        """
        if not self.path.host_call_reads_step_index or getattr(spec, "host_call", None) is None:
            return spec
        fn, tensors = spec.host_call
        flat = tf.nest.flatten(tensors)
        rewired = _compat.replace_reads(flat, before, before)
        return spec._replace(host_call=(fn, tf.nest.pack_sequence_as(tensors, rewired)))

    def _static(self, mode: str, data: Any) -> Any:
        """`data` with the static per-replica shapes of the build.

        `MirroredStrategy`'s iterators relax the batch dimension to None (to
        allow partial batches); the padded batches are static, so restore it.
        """
        return tf.nest.map_structure(
            # An op of the step's own graph either way: model_fn may return an input as is.
            lambda tensor, spec: tf.identity(tensor) if tensor.shape == spec.shape else tf.ensure_shape(tensor, spec.shape),
            data,
            self.modes[mode].element_spec,
        )

    def train_step(self, data: Any) -> dict:
        """One replica's training step: `model_fn(TRAIN)`, its update, one global-step increment.

        Only what the result needs runs (`tf1/fetches.py`): the `train_op` (or,
        with a Keras optimizer, the gradients `apply_keras_optimizer` applies),
        the loss and the host tensors.
        """
        features, labels, _ = unpack(self._static(ModeKeys.TRAIN, data))
        step_variable = self.store.global_step.value
        before = step_variable.read_value()
        if self.uses_keras_optimizer:
            variables = self._owner.trainable_variables
            with tf.GradientTape() as tape:
                spec = self.call_model_fn(features, labels, ModeKeys.TRAIN)
                with tf.control_dependencies(self._hook_writes(ModeKeys.TRAIN, spec)):
                    loss = tf.cast(tf.identity(spec.loss), tf.float32)
                scaled = loss / self.strategy.num_replicas_in_sync
            gradients = tape.gradient(scaled, [v.value for v in variables])
            return {
                "loss": loss,
                "weight": self._weight(features),
                "host": self._host_values(ModeKeys.TRAIN, self._host_step_before(spec, before), None, before),
                "gradients": gradients,
            }
        spec = self.call_model_fn(features, labels, ModeKeys.TRAIN)
        if spec.train_op is None:
            raise ValueError(
                "`model_fn` returned a `train_op` when the model was built but None now. "
                "Return the same kind of spec on every call."
            )
        host_spec = self._host_step_before(spec, before)
        train_op = optimizer_update_op(spec.train_op, self.keras_optimizers)
        done = []
        if not always_increments(train_op, before):
            with tf.control_dependencies([train_op]):
                after = step_variable.read_value()
            # 1 when the train_op left the step alone, else 0: no branch, so the
            # cross-replica assignment stays outside control flow.
            missed = tf.cast(tf.equal(after, before), tf.int64)
            done = [step_variable.assign_add(missed, read_value=False)]
        # Each replica fetches its own train_op (the step count reads replica 0's only).
        with tf.control_dependencies([train_op, *done, *self._hook_writes(ModeKeys.TRAIN, spec)]):
            loss = tf.identity(tf.cast(spec.loss, tf.float32))
            host = [tf.identity(t) for t in self._host_values(ModeKeys.TRAIN, host_spec, None, before)]
        return {"loss": loss, "weight": self._weight(features), "host": host}

    def apply_keras_optimizer(self, result: dict) -> dict:
        """After a Keras-optimizer train step: applies its gradients, then counts the step."""
        result = dict(result)
        gradients = result.pop("gradients")
        variables = self._owner.trainable_variables
        self._owner.optimizer.apply_gradients(zip(gradients, variables, strict=True))
        self.store.global_step.value.assign_add(1)
        return result

    def test_step(self, data: Any) -> dict:
        """One replica's evaluation step: the loss weighted by real rows, and host tensors."""
        features, labels, mask = unpack(self._static(ModeKeys.EVAL, data))
        spec = self.call_model_fn(features, labels, ModeKeys.EVAL, mask)
        with self.store.scope():
            updates, values = self.metrics.step_values(spec)
        with tf.control_dependencies([*updates, *self._hook_writes(ModeKeys.EVAL, spec)]):
            loss = tf.cast(tf.identity(spec.loss), tf.float32)
        return {
            "loss": loss,
            "weight": self._weight(features) if mask is None else tf.reduce_sum(mask),
            "outputs": values or None,
            "host": self._host_values(ModeKeys.EVAL, self.metrics.host_spec(spec), mask),
        }

    def predict_step(self, data: Any) -> dict:
        """One replica's prediction step: its predictions (`PredictionPlan`), and host tensors."""
        features, labels, mask = unpack(self._static(ModeKeys.PREDICT, data))
        if not self.path.labels_in_predict:  # as the original's CPU path (Estimator.predict): no labels
            labels = None
        spec = self.call_model_fn(features, labels, ModeKeys.PREDICT, mask)
        # Only the selected predictions are fetched: the others do not run (TF1).
        predictions = select_keys(spec.predictions, self.predict_keys)
        writes = self._hook_writes(ModeKeys.PREDICT, spec)
        with tf.control_dependencies(writes):
            loss = tf.identity(tf.constant(0.0)) if writes else tf.constant(0.0)
        return {
            "loss": loss,
            "weight": tf.constant(0.0),
            "outputs": self.modes[ModeKeys.PREDICT].predictions.device_outputs(predictions, mask),
            "host": self._host_values(ModeKeys.PREDICT, spec, mask),
        }

    def built(self, mode: str) -> bool:
        """Whether `model_fn` has been traced in `mode`."""
        record = self.modes.get(mode)
        return record is not None and record.built

    # ---------------------------------------------------------------- input
    def distribute_input(
        self, x: Any, mode: str, batch_size: int | None = None, shuffle: bool = False
    ) -> Any:
        """Turns an `input_fn`, a dataset or arrays into a distributed dataset; builds `mode`.

        The input job is `inputs.prepare_input`'s (batching arrays, padding,
        calling `input_fn` with this call's params, feeding the replicas); the
        runner keeps the call's batch and input steps in the mode's record and
        builds the mode from the per-replica element spec it found.

        Returns:
            A distributed dataset whose replicas see `params['batch_size']` rows.
        """
        found = prepare_input(x, mode, self.path, self.config, self.configured[mode], self.params, batch_size, shuffle)
        record = self.modes.setdefault(mode, ModeRecord(found.batch))
        record.batch, record.input_steps = found.batch, found.input_steps
        self.build(mode, found.element_spec)
        return found.dataset
