"""The device loop: many steps in one `tf.function` call, with a tensor trip count.

Vocabulary used across the package:

- *step*: one batch through `model_fn` (one optimizer update in training);
- *execution* (TPUEstimator's *loop*): one call of the loop function, running
  up to `num_steps` steps on the device;
- *global step*: the `global_step` variable, which counts training steps.

`make_loop_function` owns only the loop: reading the distributed iterator,
`strategy.run` of a replica step, reducing the loss over replicas and stacking
per-step outputs (concatenated across replicas in replica order). Because
`num_steps` is a tensor argument, a short tail execution reuses the same trace.
What a step does belongs to `engine/runner.py`; when to stop, to `engine/driver.py`.

Each step has TF1 fetch semantics (`tf1/fetches.py`): only what the replica step
returns, and what that needs, runs. Under a `TPUStrategy` each replica's step
is pruned inside the TPU computation; under other strategies the whole
`strategy.run` is, so that cross-replica `merge_call`s stay in one graph.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, NamedTuple

import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.inputs import batch_tensor
from keras_tpu_estimator.tf1 import run_fetched
from keras_tpu_estimator.xla import StepCompilation, compiled_run

ReplicaStep = Callable[[Any], dict]
"""Runs in replica context on one batch; returns `{"loss", "weight", "outputs", "host"}`.

`loss` is the replica's scalar loss and `weight` the number of real rows it
covers; `outputs` and `host` are optional, and a `replica_tail` may take
further entries (the Keras optimizer's `gradients`) and return the rest.
"""


class ExecutionResult(NamedTuple):
    """What one execution returns: its scalars in one vector (one host fetch), and its tensors.

    Attributes:
        scalars: float64 vector `[steps, loss_sum, weight_sum, last_loss,
            empty_replica, *read_after scalars]`:
            - steps: steps actually run (fewer than asked when the input ended);
            - loss_sum: sum over steps of each step's loss, the mean over
              replicas of their losses weighted by their real rows (`weight`);
            - weight_sum: the number of steps with a real row; `loss_sum /
              weight_sum` is the mean of the steps' losses, as TPUEstimator's
              `evaluate` reported it;
            - last_loss: the loss of the last counted step (what a
              TPUEstimator training loop returned to its hooks);
            - empty_replica: 1 when the execution stopped before a batch
              that would leave a replica with no rows (see `require_rows`).
        outputs: Per-step outputs concatenated over replicas and steps
            (`[steps * global_batch, ...]`), or `None`.
        host: Per-step host tensors concatenated over replicas and stacked
            over steps (`[steps, global_batch, ...]`; `host_concat` ones
            concatenated over steps), or `None`.
        after: The non-scalar part of what `read_after()` returned, or `None`.
    """

    scalars: Any
    outputs: Any
    host: Any = None
    after: Any = None

    @property
    def steps(self) -> tf.Tensor:
        """The number of steps run, as a tensor."""
        return tf.cast(self.scalars[0], tf.int64)


SCALARS = ("steps", "loss_sum", "weight_sum", "last_loss", "empty_replica")
"""The names of `ExecutionResult.scalars`' leading entries, in order."""


def _concat_replicas(strategy: tf.distribute.Strategy, value: Any) -> tf.Tensor:
    parts = strategy.experimental_local_results(value)
    return parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)


def _every_replica_has_rows(strategy: tf.distribute.Strategy, data: Any) -> tf.Tensor:
    """True when each local replica's part of `data` has at least one row."""
    # The replicas' parts of the first tensor with a batch dimension (a per-batch scalar has none).
    local = [strategy.experimental_local_results(t) for t in tf.nest.flatten(data)]
    first = next((parts for parts in local if batch_tensor(parts[0]) is not None), None)
    if first is None:  # scalars only: nothing to split
        return tf.constant(True)
    rows = [tf.shape(part)[0] for part in first]
    return tf.reduce_all(tf.stack(rows) > 0)


class _OneStepArray:
    """Stands for a `tf.TensorArray` of an execution of one step: holds that step's value."""

    def __init__(self, value: tf.Tensor | None = None):
        self.value = value

    def write(self, index: Any, value: tf.Tensor) -> _OneStepArray:
        return _OneStepArray(value)

    def stack(self) -> tf.Tensor:
        return tf.expand_dims(self.value, 0)

    def concat(self) -> tf.Tensor:
        return self.value


def make_loop_function(
    strategy: tf.distribute.Strategy,
    replica_step: ReplicaStep,
    *,
    around_run: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    output_spec: Any = None,
    host_spec: Any = None,
    host_concat: Any = None,
    read_after: Callable[[], tuple[list, Any]] | None = None,
    replica_tail: Callable[[dict], dict] | None = None,
    require_rows: bool = False,
    host_from_first_replica: bool = False,
    compilation: StepCompilation = StepCompilation.NONE,
) -> Callable[[Any, tf.Tensor], ExecutionResult]:
    """Builds `loop(iterator, num_steps) -> ExecutionResult`.

    Args:
        strategy: Runs `replica_step` on every replica.
        replica_step: The per-replica step.
        around_run: Context entered in the calling thread around every
            `strategy.run` (the variable store's scope, for `merge_call` code).
        output_spec: Nest of per-replica `tf.TensorSpec`s of
            `replica_step(...)["outputs"]`, or `None` to collect nothing.
        host_spec: List of per-replica `tf.TensorSpec`s of
            `replica_step(...)["host"]`, kept step by step for the host, or `None`.
        host_concat: For each of `host_spec`, whether its steps are
            concatenated (values whose size varies by step) rather than
            stacked; None stacks all.
        read_after: Called after the last step, in the same function; returns
            `(scalars, rest)`: the scalars are appended to
            `ExecutionResult.scalars` (one fetch for all), `rest` comes back as
            `ExecutionResult.after`.
        replica_tail: Runs in replica context on what `replica_step`
            returned, after it and without pruning (every op it makes runs);
            returns the step's result. For work that must always run, such
            as a Keras optimizer's update.
        require_rows: Stop before a batch that gives any local replica no
            rows (an uneven last batch: a `model_fn` mean over no rows is NaN)
            and report it as `ExecutionResult.empty_replica`.
        host_from_first_replica: Keep the first local replica's host tensors
            only (the CPU path: the Estimator ran the hooks of replica 0's
            spec), instead of concatenating every replica's.
        compilation: How the replicas' step (with its `replica_tail`) is
            compiled with XLA off a TPU (`xla/step_compilation.py`); a
            `TPUStrategy` compiles it anyway.

    Returns:
        A `tf.function`. Call it with an iterator of a distributed dataset and
        an int32 scalar tensor; it stops early when the iterator runs out.
        Pass `infinite=True` when the input surely holds `num_steps` more steps
        (a repeated dataset, or a counted one: `engine/driver.py`): its steps then
        read the iterator without checking for the end (on a small model, the
        check and its branch cost about a third of a step). Pass `single=True`
        for an execution of one step (`num_steps` is then ignored): the step
        runs without a loop around it.

    Example:

    ```python
    strategy = tf.distribute.get_strategy()

    def step(batch):   # one replica's step
        return {"loss": tf.reduce_mean(batch), "weight": tf.constant(2.0)}

    dataset = tf.data.Dataset.range(6).map(lambda i: tf.cast(i, tf.float32)).batch(2)
    loop = make_loop_function(strategy, step)
    result = loop(iter(strategy.experimental_distribute_dataset(dataset)), tf.constant(4))
    assert int(result.steps) == 3   # 4 asked, fewer at the end of the input
    ```
    """

    def new_arrays(spec: Any, one_step: bool) -> Any:
        if spec is None:
            return ()
        if one_step:
            return tf.nest.map_structure(lambda s: _OneStepArray(), spec)
        return tf.nest.map_structure(
            lambda s: tf.TensorArray(
                s.dtype,
                size=0,
                dynamic_size=True,
                infer_shape=False,
                # Rows may vary by step (a scalar host tensor has none).
                element_shape=tf.TensorShape([None]).concatenate(s.shape[1:]) if s.shape.rank else s.shape,
            ),
            spec,
        )

    def write(arrays: Any, spec: Any, step: Any, values: Any, first_only: bool = False) -> Any:
        if spec is None:
            return arrays

        def gather(value: Any) -> tf.Tensor:
            if first_only:
                return strategy.experimental_local_results(value)[0]
            return _concat_replicas(strategy, value)

        return tf.nest.map_structure(lambda array, value: array.write(step, gather(value)), arrays, values)

    def run_replicas(data: Any) -> dict:
        if _compat.is_tpu_strategy(strategy):  # one replica function, no threads

            def replica(batch: Any) -> dict:
                result = run_fetched(lambda: replica_step(batch))
                return result if replica_tail is None else replica_tail(result)

            with around_run():
                return strategy.run(replica, args=(data,))

        def replicas(batch: Any) -> dict:
            def traced() -> dict:
                with around_run():
                    return strategy.run(replica_step, args=(batch,))

            result = run_fetched(traced)
            if replica_tail is None:
                return result
            with around_run():
                return strategy.run(replica_tail, args=(result,))

        return compiled_run(strategy, compilation, replicas, data)

    @tf.function(autograph=False)
    def loop(iterator: Any, num_steps: tf.Tensor, infinite: bool = False, single: bool = False) -> ExecutionResult:
        # One step that surely runs (the input holds it, no replica can lack rows): its
        # values are the execution's, without TensorArrays (9 ops fewer for 3 host tensors).
        surely_one_step = single and infinite and not require_rows
        arrays = (new_arrays(output_spec, surely_one_step), new_arrays(host_spec, surely_one_step))

        def keep_going(step: Any, done: Any, sums: Any, arrays: Any, empty: Any) -> Any:
            return tf.logical_and(step < num_steps, tf.logical_not(done))

        def one_step(step: Any, done: Any, sums: Any, arrays: Any, empty: Any) -> Any:
            def run(data: Any) -> Any:
                result = run_replicas(data)
                # Local sums over this host's replicas: no collective op needed.
                losses = strategy.experimental_local_results(result["loss"])
                weights = strategy.experimental_local_results(result["weight"])
                if len(losses) == 1 and (tf.get_static_value(weights[0]) or 0) > 0:
                    # One replica with a static batch: its loss, exactly, and the step counts.
                    step_loss = last = tf.cast(losses[0], tf.float32)
                    counted = 1.0
                else:
                    weighted = tf.add_n(
                        [tf.cast(x, tf.float32) * tf.cast(w, tf.float32) for x, w in zip(losses, weights, strict=True)]
                    )
                    weight = tf.add_n([tf.cast(w, tf.float32) for w in weights])
                    # The step's loss: the replica mean weighted by real rows. A step
                    # of padding only (weight 0) does not count.
                    counted = tf.cast(weight > 0, tf.float32)
                    step_loss = tf.math.divide_no_nan(weighted, weight)
                    last = tf.where(weight > 0, step_loss, sums[2])
                new_arrays = (
                    write(arrays[0], output_spec, step, result.get("outputs")),
                    write(arrays[1], host_spec, step, result.get("host"), host_from_first_replica),
                )
                new_sums = (sums[0] + step_loss, sums[1] + counted, last)
                return step + 1, tf.constant(False), new_sums, new_arrays, tf.constant(False)

            def stop() -> Any:
                return step, tf.constant(True), sums, arrays, tf.constant(False)

            def stop_uneven() -> Any:
                return step, tf.constant(True), sums, arrays, tf.constant(True)

            def run_if_every_replica_has_rows(data: Any) -> Any:
                if not require_rows:
                    return run(data)
                return tf.cond(_every_replica_has_rows(strategy, data), lambda: run(data), stop_uneven)

            if infinite:  # the input holds these steps: no optional and no branch per step
                return run_if_every_replica_has_rows(iterator.get_next())
            optional = iterator.get_next_as_optional()
            return tf.cond(optional.has_value(), lambda: run_if_every_replica_has_rows(optional.get_value()), stop)

        zero = tf.constant(0.0)
        start = [tf.constant(0), tf.constant(False), (zero, zero, zero), arrays, tf.constant(False)]
        if single:  # one step, no loop around it: a while loop costs ~7% of a small step
            steps, _, (loss_sum, weight_sum, last_loss), arrays, empty_replica = one_step(*start)
        else:
            steps, _, (loss_sum, weight_sum, last_loss), arrays, empty_replica = tf.while_loop(
                keep_going, one_step, start
            )

        def gathered(array: tf.TensorArray, spec: tf.TensorSpec, stack: bool) -> tf.Tensor:
            if not stack and spec.shape[1:].is_fully_defined():  # an empty array concatenates to [0, ...]
                return array.concat()
            if surely_one_step:  # no branch
                return array.stack() if stack else array.concat()
            # An execution that found the input ended has nothing to stack.
            empty = [0] * stack + ([0] + [d or 0 for d in spec.shape[1:].as_list()] if spec.shape.rank else [])
            return tf.cond(
                steps > 0,
                lambda: array.stack() if stack else array.concat(),
                lambda: tf.zeros(empty, spec.dtype),
            )

        outputs = host = None
        if output_spec is not None:
            outputs = tf.nest.map_structure(
                lambda array, spec: gathered(array, spec, False), arrays[0], output_spec
            )
        if host_spec is not None:
            concat = host_concat or [False] * len(host_spec)
            host = [gathered(array, spec, not joined) for array, spec, joined in zip(arrays[1], host_spec, concat, strict=True)]
        scalars = [steps, loss_sum, weight_sum, last_loss, empty_replica]
        after = None
        if read_after is not None:
            with tf.control_dependencies([steps]):
                extra, after = read_after()
            scalars += extra
        packed = tf.stack([tf.cast(value, tf.float64) for value in scalars])
        return ExecutionResult(packed, outputs, host, after)

    return loop
