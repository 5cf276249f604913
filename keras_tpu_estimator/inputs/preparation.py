"""The input job of one call: an `input_fn`, a dataset or arrays made ready for the replicas.

`prepare_input` does the whole job and returns what it found, a `PreparedInput`:
the dataset to iterate, the call's `BatchPlan`, the per-replica element spec the
mode builds from, and the steps the input holds when that is known. It calls
nothing back; the engine keeps the batch in its mode record and builds from the
spec.

Arrays are batched as Keras batches them (`batch_size`, else the mode's batch
size, else 32; the last batch keeps the remaining rows, except in training on a
TPU, whose shapes are static), and shuffled in training when `shuffle`. On the
strategy path every EVAL and PREDICT batch is padded to the static batch size
with a mask (`padding.py`); on the CPU path batches keep their real rows, and on
a strategy (`RunConfig(train_distribute=...)`) each replica takes whole batches
in turn, `input_fn` getting the `InputContext`.

Example:

```python
path = kte.distribute.RunPath.decide(use_tpu=True, strategy=None, config=kte.RunConfig())
found = prepare_input(input_fn, "train", path, kte.RunConfig(), BatchPlan("train", 8), params={})
assert found.batch.per_replica == 8 and found.input_steps == float("inf")
```
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import tensorflow as tf

from keras_tpu_estimator.contract import InputPipelineConfig, ModeKeys
from keras_tpu_estimator.distribute import RunPath

from .batch_plan import BatchPlan
from .deployment import deploy_input
from .input_fn import (
    InputFnCall,
    array_dataset,
    check_batch_rows,
    per_replica_spec,
    static_batch_size,
)
from .padding import pad_batches


@dataclasses.dataclass(frozen=True)
class PreparedInput:
    """What the input job found for one call.

    Attributes:
        dataset: What the device loop iterates: a dataset, or a distributed dataset.
        batch: The call's `BatchPlan` (global, per replica).
        element_spec: The per-replica element spec the mode is built from.
        input_steps: The steps a new iterator holds, when known: `math.inf` for a
            repeated dataset, a count when every step takes one element of one
            dataset of known size (one replica, or the CPU path), else None.
    """

    dataset: Any
    batch: BatchPlan
    element_spec: Any
    input_steps: float | None


def elements(dataset: tf.data.Dataset) -> float | None:
    """`dataset`'s elements as tf.data knows them: `math.inf` for `repeat()` without a count, else
    the count when known (`from_tensor_slices`, `batch`, `map`, `take`, ...), else None (`filter`, files)."""
    cardinality = tf.get_static_value(dataset.cardinality())
    if cardinality == tf.data.INFINITE_CARDINALITY:
        return math.inf
    return int(cardinality) if cardinality is not None and cardinality >= 0 else None


def _input_steps(counts: list[float | None], replicas: int) -> float | None:
    """The steps the input pipelines of `counts` elements each hold, when known."""
    if counts and all(count == math.inf for count in counts):
        return math.inf
    # Finite: a step takes one element only from a single pipeline feeding a single replica.
    if len(counts) == 1 and replicas == 1:
        return counts[0]
    return None


def deployment_for(config: Any, mode: str) -> int:
    """How the strategy path deploys `input_fn` in `mode`: TPUEstimator's rule.

    `PER_SHARD_V1` only in TRAIN; `PER_HOST_V2` in every mode; otherwise
    (and in EVAL / PREDICT under `PER_SHARD_V1`) `PER_HOST_V1`. EVAL / PREDICT
    with `eval_training_input_configuration=SLICED` (the original's one call
    with the global batch, sliced over every core) are `PER_HOST_V1`: the
    same on one host.
    """
    pipeline = config.tpu_config.per_host_input_for_training
    sliced = config.tpu_config.eval_training_input_configuration == InputPipelineConfig.SLICED
    if sliced and mode != ModeKeys.TRAIN:
        return InputPipelineConfig.PER_HOST_V1
    if pipeline == InputPipelineConfig.PER_HOST_V2:
        return pipeline
    if pipeline == InputPipelineConfig.PER_SHARD_V1 and mode == ModeKeys.TRAIN:
        return pipeline
    return InputPipelineConfig.PER_HOST_V1


def prepare_input(
    x: Any, mode: str, path: RunPath, config: Any, configured: BatchPlan, params: dict,
    batch_size: int | None = None, shuffle: bool = False,
) -> PreparedInput:
    """Turns an `input_fn`, a dataset or arrays into what `mode`'s steps iterate (see the module).

    Args:
        x: An `input_fn(params)`, a `tf.data.Dataset`, or NumPy arrays / tensors.
        mode: A `ModeKeys` value.
        path: The model's `RunPath`.
        config: `RunConfig`.
        configured: The mode's configured `BatchPlan` (the model's `*_batch_size`).
        params: The user's params; `input_fn` gets a fresh copy with this call's batch.
        batch_size: This call's global batch size, overriding the configured one.
        shuffle: Shuffle arrays in training.
    """
    strategy = path.strategy
    cpu_replicas = path.cpu_replicas(mode)  # 0 on the strategy path
    # EVAL and PREDICT end with a partial batch. On the strategy path every
    # batch is padded to a static size with a mask; without it (TPUEstimator's
    # CPU path) batches keep their real rows, so model_fn's loss,
    # eval_metric_ops and predictions see exactly those, as the original's did.
    partial = mode != ModeKeys.TRAIN
    pad = partial and path.pads_partial_batches
    global_batch = batch_size or configured.global_size
    flat = [] if isinstance(x, tf.data.Dataset) or callable(x) else tf.nest.flatten(x)
    if flat and all(isinstance(a, np.ndarray | tf.Tensor) for a in flat):
        global_batch = global_batch or 32  # Keras' default
        x = array_dataset(
            x, global_batch, shuffle=shuffle and not partial, drop_remainder=not partial and path.tpu_strategy
        )
    if isinstance(x, tf.data.Dataset):
        static = static_batch_size(x.element_spec)
        global_batch = global_batch if partial and global_batch else static or global_batch
        if global_batch is None and path.needs_static_batch and not (partial and not pad):
            raise ValueError(
                f"The dataset's batch size is not static. Batch it with "
                f"`drop_remainder=True`, or pass `{configured.argument}`."
            )
        if global_batch is not None and path.needs_static_batch:
            check_batch_rows(static, global_batch, partial, "The dataset")
        plan = BatchPlan(mode, global_batch, path.num_replicas)
        if pad:
            x = pad_batches(x, global_batch)
        steps = _input_steps([elements(x)], strategy.num_replicas_in_sync)
        spec = per_replica_spec(x.element_spec, path.num_replicas)
        if cpu_replicas == 1:
            dataset = x
        elif cpu_replicas:  # whole batches, replica by replica, as the Estimator fed its replicas
            dataset = strategy.distribute_datasets_from_function(lambda _: x)
        else:
            dataset = strategy.experimental_distribute_dataset(x)
        return PreparedInput(dataset, plan, spec, steps)
    if not callable(x):
        raise TypeError(
            "Input must be an `input_fn(params)`, a tf.data.Dataset or NumPy arrays. "
            f"Received: {type(x).__name__}"
        )
    if global_batch is None and path.needs_static_batch:
        raise ValueError(
            f"`{configured.argument}` is needed to call an input_fn: it sets "
            f"params['batch_size']. Pass it to EstimatorModel."
        )
    # On the CPU path params['batch_size'] is advice, as in the original: without a
    # batch size it is missing, and input_fn may batch as it likes.
    plan = BatchPlan(mode, global_batch, path.num_replicas)
    call = InputFnCall(x, mode, path, config, params, plan)
    deployment = deployment_for(config, mode) if path.strategy_path else None
    specs, counts = [], []

    def dataset_fn(input_context: tf.distribute.InputContext | None = None) -> Any:
        if not path.strategy_path:
            dataset = call(input_context, plan.per_replica)
        else:  # the original's deployment (deployment.py): batch, calls, and split over replicas
            dataset = deploy_input(call, deployment, plan, input_context, pad, path.num_replicas)
        specs.append(dataset.element_spec)
        counts.append(elements(dataset))
        return dataset

    if cpu_replicas == 1:
        dataset = dataset_fn()
    else:  # on the CPU path, input_fn gets the InputContext and each replica whole batches
        dataset = strategy.distribute_datasets_from_function(dataset_fn)
    return PreparedInput(dataset, plan, specs[0], _input_steps(counts, strategy.num_replicas_in_sync))
