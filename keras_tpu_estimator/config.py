"""Run configuration: `RunConfig`, `TPUConfig`, `InputPipelineConfig` and loop-size parsing.

Pure values and their validation; nothing here touches TensorFlow state.
Fields that only meant something to TF1 sessions (`session_config`,
`device_fn`, ...) are accepted and stored so old scripts construct, and
documented as ignored.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, NamedTuple


class InputPipelineConfig:
    """How `input_fn` is deployed (TPUEstimator's values).

    Every mode here calls `input_fn` once per input pipeline with the
    per-replica batch size, as `PER_HOST_V2` did; replicas draw consecutive
    batches, so the rows reach the replicas in the same order as under
    `PER_HOST_V1`'s split. `BROADCAST` is not supported.

    Example:

    ```python
    TPUConfig(per_host_input_for_training=InputPipelineConfig.PER_HOST_V2)
    ```
    """

    PER_SHARD_V1 = 1
    PER_HOST_V1 = 2
    PER_HOST_V2 = 3
    BROADCAST = 4
    SLICED = 5


class IterationsPerLoop(NamedTuple):
    """A parsed `iterations_per_loop`: `value` steps (`unit="count"`) or seconds."""

    value: int
    unit: str


_TIME_UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_iterations_per_loop(value: int | str) -> IterationsPerLoop:
    """Parses `iterations_per_loop`: a positive count, or a duration such as `"30s"`, `"2m"`, `"1h"`.

    Example:

    >>> parse_iterations_per_loop("30s")
    IterationsPerLoop(value=30, unit='seconds')
    """
    if isinstance(value, bool):
        value = str(value)
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(
                f"`iterations_per_loop` must be a positive integer. Received: {value}"
            )
        return IterationsPerLoop(value, "count")
    match = re.fullmatch(r"\s*(\d+)\s*([smh]?)\s*", str(value))
    if not match or int(match.group(1)) <= 0:
        raise ValueError(
            "`iterations_per_loop` must be a positive integer or a duration like "
            f"'30s', '2m' or '1h'. Received: {value!r}"
        )
    number, unit = int(match.group(1)), match.group(2)
    if not unit:
        return IterationsPerLoop(number, "count")
    return IterationsPerLoop(number * _TIME_UNITS[unit], "seconds")


def check_positive_int(name: str, value: Any, allow_none: bool = True) -> None:
    """Raises a ValueError naming `name` unless `value` is a positive int (or None, if allowed)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")


@dataclasses.dataclass(frozen=True)
class TPUConfig:
    """TPU-specific settings, with TPUEstimator's defaults.

    Args:
        iterations_per_loop: Steps per device execution (an int), or a
            duration string (`"30s"`) to size executions by time.
        num_shards: Expected replica count; checked against the strategy.
        num_cores_per_replica: Model parallelism (not supported; must be None).
        per_host_input_for_training: `True` (PER_HOST_V1), `False`
            (PER_SHARD_V1) or an `InputPipelineConfig` value.
        eval_training_input_configuration: `PER_HOST_V1` or `SLICED`.
        experimental_host_call_every_n_steps: host_call frequency in training.
        tpu_job_name, initial_infeed_sleep_secs, input_partition_dims,
        experimental_allow_per_host_v2_parallel_get_next, experimental_feed_hook:
            accepted and ignored.

    Example:

    ```python
    config = RunConfig(tpu_config=TPUConfig(iterations_per_loop=100))
    ```
    """

    iterations_per_loop: int | str = 2
    num_shards: int | None = None
    num_cores_per_replica: int | None = None
    per_host_input_for_training: Any = True
    tpu_job_name: str | None = None
    initial_infeed_sleep_secs: int | None = None
    input_partition_dims: Any = None
    eval_training_input_configuration: int = InputPipelineConfig.PER_HOST_V1
    experimental_host_call_every_n_steps: int = 1
    experimental_allow_per_host_v2_parallel_get_next: bool = False
    experimental_feed_hook: Any = None

    def __post_init__(self) -> None:
        parse_iterations_per_loop(self.iterations_per_loop)
        check_positive_int("num_shards", self.num_shards)
        check_positive_int(
            "experimental_host_call_every_n_steps",
            self.experimental_host_call_every_n_steps,
            allow_none=False,
        )
        if self.num_cores_per_replica is not None:
            raise ValueError(
                "`num_cores_per_replica` (model parallelism) is not supported by "
                "keras_tpu_estimator. Received: num_cores_per_replica="
                f"{self.num_cores_per_replica}. Leave it as None."
            )
        if self.input_pipeline not in (
            InputPipelineConfig.PER_SHARD_V1,
            InputPipelineConfig.PER_HOST_V1,
            InputPipelineConfig.PER_HOST_V2,
        ):
            raise ValueError(
                "`per_host_input_for_training` must be True, False or one of "
                "InputPipelineConfig.PER_SHARD_V1/PER_HOST_V1/PER_HOST_V2 "
                "(BROADCAST is not supported). Received: "
                f"{self.per_host_input_for_training!r}"
            )
        if self.eval_training_input_configuration not in (
            InputPipelineConfig.PER_HOST_V1,
            InputPipelineConfig.SLICED,
        ):
            raise ValueError(
                "`eval_training_input_configuration` must be "
                "InputPipelineConfig.PER_HOST_V1 or SLICED. Received: "
                f"{self.eval_training_input_configuration!r}"
            )

    @property
    def input_pipeline(self) -> int:
        """`per_host_input_for_training` as an `InputPipelineConfig` value."""
        value = self.per_host_input_for_training
        if value is True:
            return InputPipelineConfig.PER_HOST_V1
        if value is False:
            return InputPipelineConfig.PER_SHARD_V1
        return value

    @property
    def parsed_iterations_per_loop(self) -> IterationsPerLoop:
        """`iterations_per_loop` parsed into a count or a number of seconds."""
        return parse_iterations_per_loop(self.iterations_per_loop)

    def replace(self, **changes: Any) -> TPUConfig:
        """A copy with `changes` applied (and validated)."""
        return dataclasses.replace(self, **changes)


_USE_DEFAULT = object()


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Where and how often to save, log and summarise; carries a `TPUConfig`.

    Defaults follow the Estimator: a checkpoint every 600 seconds unless
    `save_checkpoints_steps` is given, 5 checkpoints kept, summaries and step
    logs every 100 steps.

    Args:
        tpu_config: `TPUConfig`.
        model_dir: Directory for checkpoints and summaries.
        master: TPU name or address for `TPUClusterResolver` (`None` means 'local').
        evaluation_master: Accepted; evaluation uses the same strategy.
        cluster: A `tf.distribute.cluster_resolver.ClusterResolver` to use.
        save_checkpoints_steps, save_checkpoints_secs: At most one may be set.
        keep_checkpoint_max, keep_checkpoint_every_n_hours: Checkpoint retention.
        log_step_count_steps, save_summary_steps: Logging and summary frequency.
        tf_random_seed: Global seed set before the model is built.
        train_distribute: A `tf.distribute.Strategy` to run on (with `use_tpu=True`),
            for example a `MultiWorkerMirroredStrategy` created at program start.
        session_config, device_fn, protocol, eval_distribute,
        experimental_max_worker_delay_secs, session_creation_timeout_secs,
        checkpoint_save_graph_def: Accepted and ignored (TF1 session settings;
            evaluation uses the training strategy).

    Example:

    ```python
    config = RunConfig(model_dir="/tmp/m", save_checkpoints_steps=1000,
                       tpu_config=TPUConfig(iterations_per_loop=100))
    ```
    """

    tpu_config: TPUConfig = dataclasses.field(default_factory=TPUConfig)
    model_dir: str | None = None
    master: str | None = None
    evaluation_master: str | None = None
    cluster: Any = None
    save_checkpoints_steps: int | None = None
    save_checkpoints_secs: Any = _USE_DEFAULT
    keep_checkpoint_max: int | None = 5
    keep_checkpoint_every_n_hours: float = 10000
    log_step_count_steps: int | None = 100
    save_summary_steps: int | None = 100
    tf_random_seed: int | None = None
    session_config: Any = None
    device_fn: Any = None
    protocol: str | None = None
    train_distribute: Any = None
    eval_distribute: Any = None
    experimental_max_worker_delay_secs: int | None = None
    session_creation_timeout_secs: int = 7200
    checkpoint_save_graph_def: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.tpu_config, TPUConfig):
            raise TypeError(
                "`tpu_config` must be a keras_tpu_estimator.TPUConfig. Received: "
                f"{type(self.tpu_config).__name__}"
            )
        secs = self.save_checkpoints_secs
        if secs is _USE_DEFAULT:
            secs = None if self.save_checkpoints_steps is not None else 600
            object.__setattr__(self, "save_checkpoints_secs", secs)
        if self.save_checkpoints_steps is not None and secs is not None:
            raise ValueError(
                "Only one of `save_checkpoints_steps` and `save_checkpoints_secs` can be "
                f"set. Received: save_checkpoints_steps={self.save_checkpoints_steps}, "
                f"save_checkpoints_secs={secs}."
            )
        check_positive_int("save_checkpoints_steps", self.save_checkpoints_steps)
        check_positive_int("log_step_count_steps", self.log_step_count_steps)
        if self.keep_checkpoint_max is not None and self.keep_checkpoint_max < 0:
            raise ValueError(
                "`keep_checkpoint_max` must be >= 0 or None. Received: "
                f"{self.keep_checkpoint_max}"
            )

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with `changes` applied (and validated)."""
        if "save_checkpoints_steps" in changes and "save_checkpoints_secs" not in changes:
            changes["save_checkpoints_secs"] = (
                None if changes["save_checkpoints_steps"] is not None else self.save_checkpoints_secs
            )
        return dataclasses.replace(self, **changes)
