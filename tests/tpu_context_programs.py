"""Programs that record every public member of `params['context']` in `input_fn` and `model_fn`.

They run unchanged on the original (`scripts/record_tpu_context_numbers.py`, which
writes `tests/recorded_tpu_context_numbers.py`) and on this library
(`tests/test_tpu_context.py`). `estimator` is `tf.compat.v1.estimator` or
`keras_tpu_estimator.estimator`. `model_fn` raises `Stop` once it has recorded:
off a TPU the original builds its TPU graph but cannot run it.
"""

from __future__ import annotations

import contextlib
from typing import Any

import tensorflow as tf

PIPELINES = ("PER_HOST_V1", "PER_HOST_V2", "PER_SHARD_V1")
MODES = ("train", "evaluate", "predict")
BATCH = 16


class Stop(Exception):
    """Raised by `model_fn` after recording its context."""


def _value(read: Any) -> Any:
    """`read()` as plain data, or `[error type, message]` for the error it raises."""
    try:
        value = read()
    except Exception as error:  # noqa: BLE001 - the error is the recorded value
        return [type(error).__name__, str(error)]
    if isinstance(value, tuple | list):
        return [_value(lambda v=v: v) for v in value]
    return value


def snapshot(context: Any) -> dict:
    """Every public member of the original's `TPUContext`, read from `context`."""
    return {
        "num_replicas": _value(lambda: context.num_replicas),
        "num_hosts": _value(lambda: context.num_hosts),
        "num_of_replicas_per_host": _value(lambda: context.num_of_replicas_per_host),
        "current_host": _value(lambda: context.current_host),
        "device_assignment": _value(lambda: context.device_assignment),
        "current_input_fn_deployment()": _value(context.current_input_fn_deployment),
        "device_for_replica(r)": [
            _value(lambda r=r: context.device_for_replica(r)) for r in range(context.num_replicas)
        ],
        "tpu_host_placement_function(h)": [
            _value(lambda h=h: context.tpu_host_placement_function(h)) for h in range(context.num_hosts)
        ],
        "tpu_host_placement_function(host_id=0)": _value(lambda: context.tpu_host_placement_function(host_id=0)),
    }


def as_devices(value: Any) -> Any:
    """`value` with each device name as `(job, replica, task, type, index)`; a missing job is the local one.

    The original's local names leave the job out (`/replica:0/task:0/device:CPU:0`);
    this library's are the strategy's full names: compared as devices they are equal.
    """
    if isinstance(value, dict):
        return {key: as_devices(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [as_devices(item) for item in value]
    if isinstance(value, str) and value.startswith("/"):
        spec = tf.DeviceSpec.from_string(value)
        return (spec.job or "localhost", spec.replica or 0, spec.task or 0, spec.device_type, spec.device_index)
    return value


def run(estimator: Any, model_dir: str, pipeline: str, mode: str, use_tpu: bool = True,
        strategy: Any = None, master: str | None = None) -> dict:
    """`{'input_fn': [snapshot per call], 'model_fn': [snapshot], 'context_in_params': {...}}` of one call.

    `TPUEstimator(use_tpu, batch 16 in every mode)` with `per_host_input_for_training=pipeline`;
    `mode` is `train` (1 step), `evaluate` (1 step) or `predict`.
    """
    tpu = estimator.tpu
    seen: dict[str, Any] = {"input_fn": [], "model_fn": [], "context_in_params": {}}

    def input_fn(params):
        seen["context_in_params"]["input_fn"] = "context" in params
        if "context" in params:
            seen["input_fn"].append(snapshot(params["context"]))
        rows = params["batch_size"]
        features = tf.zeros([rows, 2])
        labels = tf.zeros([rows, 1])
        if pipeline == "PER_SHARD_V1" and mode == "train" and use_tpu:
            return features, labels  # the original's per-core pipeline takes tensors, not a Dataset
        dataset = tf.data.Dataset.from_tensors((features, labels)).repeat()
        return dataset.map(lambda x, y: x) if mode == "predict" else dataset

    def model_fn(features, labels, mode, params):
        seen["context_in_params"]["model_fn"] = "context" in params
        if "context" in params:
            seen["model_fn"].append(snapshot(params["context"]))
        raise Stop

    extra = {"master": master} if master else {}
    config = tpu.RunConfig(
        model_dir=model_dir,
        train_distribute=strategy,
        **extra,
        tpu_config=tpu.TPUConfig(
            iterations_per_loop=1, per_host_input_for_training=getattr(tpu.InputPipelineConfig, pipeline)
        ),
    )
    model = tpu.TPUEstimator(model_fn, config=config, use_tpu=use_tpu, train_batch_size=BATCH,
                             eval_batch_size=BATCH, predict_batch_size=BATCH)
    with contextlib.suppress(Stop):
        if mode == "train":
            model.train(input_fn, steps=1)
        elif mode == "evaluate":
            model.evaluate(input_fn, steps=1)
        else:
            next(model.predict(input_fn))
    return seen
