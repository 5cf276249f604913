"""Input deployment: how the strategy path calls `input_fn` and feeds its replicas, as TPUEstimator did.

TPUEstimator deployed `input_fn` by `TPUConfig.per_host_input_for_training`:

- `PER_HOST_V1` (the default; EVAL and PREDICT unless `PER_HOST_V2`): one
  call per host with the host's batch, each batch (padded in EVAL /
  PREDICT) split along dim 0 into contiguous per-replica slices;
- `PER_HOST_V2`: one call per host with the per-replica batch, consecutive
  batches to the host's replicas in turn;
- `PER_SHARD_V1` (TRAIN): one call per replica, each with its own context
  and the per-replica batch.

Here a host is an input pipeline of `distribute_datasets_from_function`
(one per worker), which hands one pipeline's consecutive elements to its
replicas in order; `deploy_input` returns those per-replica elements.
The CPU path (`use_tpu=False`) never comes here.

Example:

```python
def call(input_context, batch_size):   # input_fn, called with params["batch_size"] = batch_size
    return tf.data.Dataset.range(16).batch(batch_size, drop_remainder=True)

plan = BatchPlan("train", 8, replicas=4)
input_context = tf.distribute.InputContext(num_input_pipelines=1, num_replicas_in_sync=4)
dataset = deploy_input(call, InputPipelineConfig.PER_HOST_V1, plan, input_context, pad=False, num_replicas=4)
# PER_HOST_V1: one call with the host's batch of 8, cut into the 4 replicas' slices
assert [list(batch.numpy()) for batch in dataset.take(2)] == [[0, 1], [2, 3]]
```
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from keras_tpu_estimator.contract import InputPipelineConfig

from .batch_plan import BatchPlan
from .padding import pad_batches

InputCall = Callable[[Any, "int | None"], tf.data.Dataset]
"""Calls `input_fn` with an `InputContext` (or None) and `params['batch_size']` (`InputFnCall`)."""


def deploy_input(
    call: InputCall, deployment: int, plan: BatchPlan, input_context: Any, pad: bool, num_replicas: int
) -> tf.data.Dataset:
    """One input pipeline's per-replica elements, in replica order, as TPUEstimator deployed `input_fn`.

    `deployment`: the call's `InputPipelineConfig` value (`preparation.deployment_for`).
    `pad`: EVAL / PREDICT batches are padded (to the batch the call was
    given) before any split, so each replica gets a full, masked batch.
    """
    k = plan.replicas_per_pipeline(input_context)
    per_replica = plan.per_replica
    if deployment == InputPipelineConfig.PER_SHARD_V1 and k > 1:
        pipeline = input_context.input_pipeline_id if input_context is not None else 0
        pipelines = input_context.num_input_pipelines if input_context is not None else 1
        contexts = [
            tf.distribute.InputContext(pipelines * k, pipeline * k + core, num_replicas) for core in range(k)
        ]
        return interleave_replicas([call(context, per_replica) for context in contexts])
    if deployment == InputPipelineConfig.PER_HOST_V2 or k == 1:
        dataset = call(input_context, per_replica)
        return pad_batches(dataset, per_replica, k) if pad else dataset
    dataset = call(input_context, per_replica * k)
    if pad:
        dataset = pad_batches(dataset, per_replica * k)
    return split_to_replicas(dataset, k)


def split_to_replicas(dataset: tf.data.Dataset, replicas: int) -> tf.data.Dataset:
    """Each element (a per-host batch) as `replicas` consecutive elements: contiguous slices, replica 0 first.

    TPUEstimator's `PER_HOST_V1` split each batch along dim 0 over the host's
    cores; a strategy hands consecutive elements of one pipeline to its
    replicas in order. A per-batch scalar (rank 0) goes to every replica.

    Example:

    >>> [e.numpy().tolist() for e in split_to_replicas(tf.data.Dataset.range(8).batch(4), 2)]
    [[0, 1], [2, 3], [4, 5], [6, 7]]
    """
    if replicas == 1:
        return dataset

    def split(*components: Any) -> Any:
        element = components[0] if len(components) == 1 else components

        def slices(tensor: tf.Tensor) -> tf.Tensor:
            if tensor.shape.rank == 0:
                return tf.stack([tensor] * replicas)
            rows = tf.compat.dimension_value(tensor.shape[0])
            per = rows // replicas if rows is not None else -1
            check = tf.debugging.Assert(
                tf.equal(tf.shape(tensor)[0] % replicas, 0),
                [f"A batch of input_fn must split evenly over the host's {replicas} replicas; rows:",
                 tf.shape(tensor)[0]],
            )
            with tf.control_dependencies([check]):
                return tf.reshape(tensor, [replicas, per] + tensor.shape[1:].as_list())

        return tf.nest.map_structure(slices, element)

    return dataset.map(tf.autograph.experimental.do_not_convert(split)).unbatch()


def interleave_replicas(datasets: list[tf.data.Dataset]) -> tf.data.Dataset:
    """One element of each dataset in turn (replica 0's first): `PER_SHARD_V1`'s per-core pipelines as one.

    Ends with the shortest dataset, so every step has a batch for each replica.

    Example:

    >>> a, b = tf.data.Dataset.range(0, 3), tf.data.Dataset.range(10, 13)
    >>> [int(e) for e in interleave_replicas([a, b])]
    [0, 10, 1, 11, 2, 12]
    """
    if len(datasets) == 1:
        return datasets[0]

    def stack(*elements: Any) -> Any:
        return tf.nest.map_structure(lambda *tensors: tf.stack(tensors), *elements)

    return tf.data.Dataset.zip(tuple(datasets)).map(tf.autograph.experimental.do_not_convert(stack)).unbatch()
