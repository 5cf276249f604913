"""Which `tf.distribute` strategy runs the model, and the batch arithmetic over its replicas.

Owns strategy resolution (TPU, then GPUs, then the default strategy), the
per-replica batch size, and `TPUContext`, the object a `model_fn` or
`input_fn` finds in `params['context']`.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

import numpy as np
import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.contract import check_positive_integer
from keras_tpu_estimator.utils import get_logger

_log = get_logger(__name__)
_RESOLVED: dict[str, tf.distribute.Strategy] = {}
_INITIALIZED: set[str] = set()


def _tpu_may_exist(master: str | None) -> bool:
    if master and master != "local":
        return True
    return bool(
        os.environ.get("TPU_NAME")
        or os.environ.get("COLAB_TPU_ADDR")
        or glob.glob("/dev/accel*")
        or glob.glob("/dev/vfio/[0-9]*")
    )


def resolve_strategy(
    use_tpu: bool = True,
    master: str | None = None,
    cluster: Any = None,
) -> tf.distribute.Strategy:
    """Picks the strategy a TPUEstimator program would have run on here.

    With `use_tpu`, and a TPU in sight (`master`, `cluster`, `TPU_NAME`,
    `COLAB_TPU_ADDR` or TPU devices under `/dev`), tries
    `TPUClusterResolver(tpu='local')` (Colab and Cloud TPU VMs) and then the
    configured name (`master`, else `TPU_NAME` or `COLAB_TPU_ADDR`, connected
    with `tf.config.experimental_connect_to_cluster`); `cluster` replaces
    both. The TPU system is initialised once per process and resolver. Without
    a TPU: a `MultiWorkerMirroredStrategy` when `TF_CONFIG` lists several
    workers, else a `MirroredStrategy` over the visible GPUs when there are
    two or more, else the default strategy. The result is cached per process: two
    `MirroredStrategy` objects in one process collide on collective keys.

    Example:

    ```python
    strategy = resolve_strategy(use_tpu=True)   # default strategy on a CPU box
    ```
    """
    if use_tpu and (cluster is not None or _tpu_may_exist(master)):
        key = f"tpu:{master}:{id(cluster)}"
        if key not in _RESOLVED:
            _RESOLVED[key] = _tpu_strategy(master, cluster) or _local_strategy()
        return _RESOLVED[key]
    if use_tpu and _tf_config_tasks() > 1:
        return _multi_worker_strategy()
    return _local_strategy() if use_tpu else tf.distribute.get_strategy()


def _tf_config_tasks() -> int:
    """Workers (and chief) listed in the `TF_CONFIG` environment variable; 0 for an `evaluator` task.

    An evaluator is not part of the training cluster (it evaluates checkpoints
    on its own), so it runs on a local strategy.
    """
    try:
        tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    except ValueError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON: {error}") from None
    if (tf_config.get("task") or {}).get("type") == "evaluator":
        return 0
    return _count_workers(tf_config.get("cluster", {}))


def _count_workers(cluster: dict) -> int:
    return len(cluster.get("chief", [])) + len(cluster.get("worker", []))


def _multi_worker_strategy() -> tf.distribute.Strategy:
    if "multi_worker" not in _RESOLVED:
        try:
            _RESOLVED["multi_worker"] = tf.distribute.MultiWorkerMirroredStrategy()
        except RuntimeError as error:
            raise RuntimeError(
                f"TF_CONFIG lists several workers, but MultiWorkerMirroredStrategy could not "
                f"start ({error}). Create it at program start, before other TensorFlow calls, "
                "and pass it: RunConfig(train_distribute=tf.distribute.MultiWorkerMirroredStrategy())."
            ) from error
    return _RESOLVED["multi_worker"]


def num_workers(strategy: tf.distribute.Strategy) -> int:
    """Processes that run replicas of `strategy` (1 unless it is multi-worker).

    Example:

    >>> num_workers(tf.distribute.get_strategy())
    1
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or _compat.is_tpu_strategy(strategy):
        return 1
    return max(1, _count_workers(resolver.cluster_spec().as_dict()))


def any_worker(strategy: tf.distribute.Strategy, flag: bool) -> bool:
    """True on every worker if `flag` is True on any worker (an all-reduce when multi-worker).

    Workers must take the same decisions (save now, stop now): a collective op
    that one worker skips leaves the others waiting.

    Example:

    >>> any_worker(tf.distribute.get_strategy(), False)
    False
    """
    if num_workers(strategy) == 1:
        return flag
    votes = strategy.run(lambda: tf.constant(int(flag), tf.int32))
    return bool(strategy.reduce(tf.distribute.ReduceOp.SUM, votes, axis=None) > 0)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True in the process that writes checkpoints and summaries (always, on one machine).

    Example:

    >>> is_chief(tf.distribute.get_strategy())
    True
    """
    return bool(strategy.extended.should_checkpoint)


def _tpu_candidates(master: str | None) -> list[str]:
    configured = master or os.environ.get("TPU_NAME")
    if not configured and os.environ.get("COLAB_TPU_ADDR"):
        configured = f"grpc://{os.environ['COLAB_TPU_ADDR']}"
    candidates = ["local"]
    if configured and configured != "local":
        candidates.append(configured)
    return candidates


def _tpu_strategy(master: str | None, cluster: Any) -> tf.distribute.Strategy | None:
    attempts = [(None, cluster)] if cluster is not None else [(n, None) for n in _tpu_candidates(master)]
    errors = []
    for name, resolver in attempts:
        try:
            if resolver is None:
                resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name)
            if name != "local" and resolver.master():
                tf.config.experimental_connect_to_cluster(resolver)
            init_key = name or f"cluster:{id(resolver)}"
            if init_key not in _INITIALIZED:
                tf.tpu.experimental.initialize_tpu_system(resolver)
                _INITIALIZED.add(init_key)
            return tf.distribute.TPUStrategy(resolver)
        except (ValueError, tf.errors.OpError, RuntimeError) as error:
            errors.append(f"{name or 'cluster'}: {error}")
    _log.warning("No TPU found (%s); falling back to GPUs or CPU.", "; ".join(errors))
    return None


def _local_strategy() -> tf.distribute.Strategy:
    if "local" not in _RESOLVED:
        gpus = tf.config.list_logical_devices("GPU")
        _RESOLVED["local"] = (
            tf.distribute.MirroredStrategy([d.name for d in gpus])
            if len(gpus) > 1
            else tf.distribute.get_strategy()
        )
    return _RESOLVED["local"]


def use_cpu_replicas(count: int) -> tf.distribute.Strategy:
    """Splits the host CPU into `count` logical devices; the strategy path then mirrors over them.

    A TPU program's replicas, on a laptop or in CI: where no TPU is found,
    `use_tpu=True` runs on a `MirroredStrategy` over the `count` CPUs (as it
    would over a TPU's cores). Call it before TensorFlow starts its devices
    (`python -m keras_tpu_estimator --replicas N script.py` does).

    Example:

    ```text
    use_cpu_replicas(2)   # then TPUEstimator(use_tpu=True) runs 2 replicas
    ```
    """
    check_positive_integer(count, "replicas")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError as error:
        raise RuntimeError(
            f"use_cpu_replicas({count}) must run before TensorFlow starts its devices ({error}). "
            "Call it at program start, or pass --replicas to python -m keras_tpu_estimator."
        ) from None
    devices = [device.name for device in tf.config.list_logical_devices("CPU")]
    _RESOLVED["local"] = tf.distribute.MirroredStrategy(devices) if count > 1 else tf.distribute.get_strategy()
    return _RESOLVED["local"]


def per_replica_batch_size(global_batch_size: int, num_replicas: int, name: str) -> int:
    """`global_batch_size / num_replicas`, or a ValueError naming `name` and the fix.

    Example:

    >>> per_replica_batch_size(16, 4, "train_batch_size")
    4
    """
    if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int | np.integer):
        raise ValueError(f"`{name}` must be a positive integer. Received: {global_batch_size!r}")
    if global_batch_size <= 0:
        raise ValueError(f"`{name}` must be a positive integer. Received: {global_batch_size}")
    if global_batch_size % num_replicas:
        raise ValueError(  # the original's text first (tpu_context.py)
            f"{name.replace('_', ' ')} {global_batch_size} must be divisible by number of replicas "
            f"{num_replicas}. Set `{name}` to a multiple of {num_replicas}."
        )
    return global_batch_size // num_replicas


class TPUContext:
    """What `params['context']` holds on the strategy path: the replica layout seen by `model_fn` and `input_fn`.

    The original's public members, with its values mapped onto the strategy's
    replicas: a host is a worker (a TPU host under `TPUStrategy`), a core a
    replica, and device names are the strategy's own devices (under
    `MirroredStrategy` over logical CPUs each replica's host is the
    worker's `CPU:0`). There is no model parallelism: `device_assignment` is
    `None`.

    Args:
        strategy: The model's `tf.distribute.Strategy`.
        mode: The `ModeKeys` value of the current call.
        global_batch_size: The global batch of this mode, or `None`.
        input_context: The `tf.distribute.InputContext` of an `input_fn` call:
            which input pipeline this call builds, of how many. `None`: one
            pipeline feeds every replica.
        call_from_input_fn: True in `input_fn`'s params, False in `model_fn`'s.

    Example:

    ```python
    def input_fn(params):
        ctx = params["context"]
        host, index, count, replicas = ctx.current_input_fn_deployment()   # (CPU:0, 0, 1, 1) here
        with tf.device(ctx.tpu_host_placement_function(ctx.current_host)):
            dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, y)).shard(count, index)
            return dataset.repeat().batch(params["batch_size"], drop_remainder=True)

    model.fit(input_fn, callbacks=[kte.StopAtStep(steps=1)])
    ```
    """

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        mode: str,
        global_batch_size: int | None = None,
        input_context: tf.distribute.InputContext | None = None,
        call_from_input_fn: bool = False,
    ):
        self._strategy = strategy
        self.mode = mode
        self.global_batch_size = global_batch_size
        self.input_context = input_context
        self._call_from_input_fn = call_from_input_fn

    def _only_in(self, caller: str) -> None:
        """The original's RuntimeError when an `input_fn`-only (or `model_fn`-only) member is misused."""
        if self._call_from_input_fn != (caller == "input_fn"):
            other = "model_fn" if caller == "input_fn" else "input_fn"
            raise RuntimeError(f"This TPUContext instance must not be called from {other}.")

    @property
    def num_replicas(self) -> int:
        """Replicas in sync across all hosts (TPU cores, without model parallelism)."""
        return self._strategy.num_replicas_in_sync

    @property
    def num_hosts(self) -> int:
        """Hosts: a `TPUStrategy`'s TPU hosts, else the workers (1 off a cluster)."""
        return _num_hosts(self._strategy)

    @property
    def current_host(self) -> int:
        """Index of the host this `input_fn` call runs on (`input_fn` only)."""
        self._only_in("input_fn")
        return self._first_replica_fed() // self.num_of_replicas_per_host

    @property
    def num_of_replicas_per_host(self) -> int:
        """Replicas on one host."""
        return max(1, self.num_replicas // self.num_hosts)

    num_of_cores_per_host = num_of_replicas_per_host

    @property
    def device_assignment(self) -> None:
        """`None` (no model parallelism), as the original's without it (`model_fn` only)."""
        self._only_in("model_fn")
        return None

    @property
    def is_running_on_tpu(self) -> bool:
        """True under a `TPUStrategy`."""
        return _compat.is_tpu_strategy(self._strategy)

    def current_input_fn_deployment(self) -> tuple[str, int, int, int]:
        """`(host_device, invocation_index, total_invocations, replicas_fed)` of this `input_fn` call.

        As the original's: per host (`PER_HOST_V1`/`V2`), `(host CPU, host index,
        hosts, replicas per host)`; per replica, `(host CPU, replica index,
        replicas, 1)`. Here the invocations are the input pipelines the
        strategy asks for (`input_context`). `input_fn` only.
        """
        self._only_in("input_fn")
        index, count = 0, 1
        if self.input_context is not None:
            index, count = self.input_context.input_pipeline_id, self.input_context.num_input_pipelines
        return (self.tpu_host_placement_function(self.current_host), index, count, self._replicas_fed())

    def device_for_replica(self, replica_id: int) -> tuple[str, int]:
        """`(host CPU device, device ordinal on that host)` of replica `replica_id`.

        Example (`ctx` is `params['context']` in an `input_fn`):

        >>> ctx.device_for_replica(3)  # MirroredStrategy over 4 logical CPUs
        ('/job:localhost/replica:0/task:0/device:CPU:0', 3)
        """
        device = _replica_device(self._strategy, _index(replica_id, self.num_replicas, "replica_id"))
        ordinal = device.device_index
        if ordinal is None:
            ordinal = replica_id % self.num_of_replicas_per_host
        return _host_device(device), ordinal

    @property
    def tpu_host_placement_function(self) -> Any:
        """A function of `host_id` that returns that host's CPU device.

        Example:

        >>> ctx.tpu_host_placement_function(host_id=0)
        '/job:localhost/replica:0/task:0/device:CPU:0'
        """

        def placement(host_id: int) -> str:
            host_id = _index(host_id, self.num_hosts, "host_id")
            replica = host_id * self.num_of_replicas_per_host
            return _host_device(_replica_device(self._strategy, replica))

        return placement

    def _replicas_fed(self) -> int:
        pipelines = self.input_context.num_input_pipelines if self.input_context is not None else 1
        return max(1, self.num_replicas // pipelines)

    def _first_replica_fed(self) -> int:
        pipeline = self.input_context.input_pipeline_id if self.input_context is not None else 0
        return pipeline * self._replicas_fed()


def _num_hosts(strategy: tf.distribute.Strategy) -> int:
    if _compat.is_tpu_strategy(strategy):
        return getattr(strategy.extended, "num_hosts", 1)
    return num_workers(strategy)


def _index(value: Any, count: int, name: str) -> int:
    """`value` as an index below `count`, or a ValueError naming `name` and the valid range."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 0 <= value < count:
        raise ValueError(f"`{name}` must be an integer in [0, {count}); this strategy has {count}. Received: {value!r}")
    return int(value)


def _replica_device(strategy: tf.distribute.Strategy, replica: int) -> tf.DeviceSpec:
    """The full device of global replica `replica` (its first core under a `TPUStrategy`)."""
    try:
        devices = list(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy: one replica, on this process's first device
        kind = "GPU" if tf.config.list_logical_devices("GPU") else "CPU"
        devices = [f"/job:localhost/replica:0/task:0/device:{kind}:0"]
    if len(devices) == strategy.num_replicas_in_sync:
        return tf.DeviceSpec.from_string(devices[replica])
    # Multi-worker: worker_devices are this worker's; the others' replicas sit alike on their tasks.
    per_worker = len(devices)
    local = tf.DeviceSpec.from_string(devices[replica % per_worker])
    return local.replace(task=replica // per_worker)


def _host_device(device: tf.DeviceSpec) -> str:
    """The CPU device of `device`'s host."""
    return device.replace(device_type="CPU", device_index=0).to_string()
