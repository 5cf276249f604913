"""Run configuration: `RunConfig`, `TPUConfig`, `InputPipelineConfig` and loop-size parsing.

Pure values and their validation; nothing here touches TensorFlow state.
Fields that only meant something to TF1 sessions (`session_config` but its XLA switch,
`device_fn`, ...) are accepted and stored so old scripts construct, and
documented as ignored.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from .counts import check_positive_int, check_positive_integer
from .spec import function_args
from .tf_config import cluster_settings, read_tf_config


class InputPipelineConfig:
    """How `input_fn` is deployed (TPUEstimator's values).

    On the strategy path `input_fn` is deployed as the original deployed it
    (`inputs/deployment.py`): `PER_HOST_V1` once per host with the per-host
    batch, split over the host's replicas; `PER_HOST_V2` once per host with
    the per-replica batch; `PER_SHARD_V1` (TRAIN) once per replica.
    `BROADCAST` is not supported.

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


# The original's pattern, `re.match`ed: `$` also matches before a final newline, and its
# character class `[s|m|h]` takes `|` as a count suffix.
_ITERATIONS_PER_LOOP = re.compile(r"^(?P<value>[1-9]\d*)((?P<unit>[s|m|h])$|$)")
_TIME_UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_iterations_per_loop(value: int | str) -> IterationsPerLoop:
    """Parses `iterations_per_loop` as the original did: `N` steps, or `"Ns"`, `"Nm"`, `"Nh"`.

    `N` is a positive integer without leading zeros; the value is read
    through `str()`, so `5` and `"5"` are the same and `2.5` or `True` are errors.

    Example:

    >>> parse_iterations_per_loop("2m")
    IterationsPerLoop(value=120, unit='seconds')
    """
    match = _ITERATIONS_PER_LOOP.match(str(value))
    if match is None:
        raise ValueError(
            "Invalid TPUConfig `iterations_per_loop` value. Value must be positive integer value "
            "or time-based value `<N><s|m|h>` where <N> is anypositive integer and `s`, `m`, `h` "
            "are unit of time in seconds, minutes, hours respectively. Examples of valid values: "
            f"`3600s`, `60m`, `1h`. Received: {value!r}"
        )
    number, unit = int(match.group("value")), match.group("unit")
    if unit not in _TIME_UNITS:
        return IterationsPerLoop(number, "count")
    return IterationsPerLoop(number * _TIME_UNITS[unit], "seconds")


_TPU_CONFIG_FIELDS = (
    "iterations_per_loop",
    "num_shards",
    "num_cores_per_replica",
    "per_host_input_for_training",
    "tpu_job_name",
    "initial_infeed_sleep_secs",
    "input_partition_dims",
    "eval_training_input_configuration",
    "experimental_host_call_every_n_steps",
    "experimental_allow_per_host_v2_parallel_get_next",
    "experimental_feed_hook",
)


class TPUConfig(collections.namedtuple("TPUConfig", _TPU_CONFIG_FIELDS)):
    """TPU-specific settings: a namedtuple with TPUEstimator's defaults and checks.

    Args:
        iterations_per_loop: Steps per device execution (an int), or a
            duration string (`"30s"`) to size executions by time.
        num_shards: Expected replica count; must equal the strategy's.
        num_cores_per_replica: Model parallelism: None or 1 here (larger
            values pass this constructor, as in the original, and are refused
            when a model is built on the TPU path).
        per_host_input_for_training: `True` (stored as PER_HOST_V1, as the
            original did), `False` (PER_SHARD_V1) or an `InputPipelineConfig` value.
        eval_training_input_configuration: `PER_HOST_V1` or `SLICED`.
        experimental_host_call_every_n_steps: host_call frequency in TPU-path training.
        tpu_job_name: Defaults to TF_CONFIG's `service.tpu_worker_job_name`.
        initial_infeed_sleep_secs, input_partition_dims,
        experimental_allow_per_host_v2_parallel_get_next, experimental_feed_hook:
            checked as the original did, otherwise unused.

    Example:

    ```python
    config = RunConfig(tpu_config=TPUConfig(iterations_per_loop=100))
    ```
    """

    def __new__(
        cls,
        iterations_per_loop: int | str = 2,
        num_shards: int | None = None,
        num_cores_per_replica: int | None = None,
        per_host_input_for_training: Any = True,
        tpu_job_name: str | None = None,
        initial_infeed_sleep_secs: int | None = None,
        input_partition_dims: Any = None,
        eval_training_input_configuration: int = InputPipelineConfig.PER_HOST_V1,
        experimental_host_call_every_n_steps: int = 1,
        experimental_allow_per_host_v2_parallel_get_next: bool = False,
        experimental_feed_hook: Any = None,
    ) -> TPUConfig:
        parse_iterations_per_loop(iterations_per_loop)
        if num_shards is not None:
            check_positive_integer(num_shards, "TPUConfig num_shards")
        if input_partition_dims is not None:
            if len(input_partition_dims) not in (1, 2):
                raise ValueError("input_partition_dims must be a list/tuple with one or two elements.")
            if per_host_input_for_training is not InputPipelineConfig.PER_HOST_V2:
                raise ValueError("input_partition_dims is only supported in PER_HOST_V2 mode.")
            if num_cores_per_replica is None:
                raise ValueError("input_partition_dims requires setting num_cores_per_replica.")
        if num_cores_per_replica is not None and num_cores_per_replica not in (1, 2, 4, 8, 16, 32, 64, 128):
            raise ValueError(
                f"num_cores_per_replica must be 1, 2, 4, 8, 16, 32, 64, 128; got {num_cores_per_replica}"
            )
        if eval_training_input_configuration not in (InputPipelineConfig.PER_HOST_V1, InputPipelineConfig.SLICED):
            raise ValueError(
                "eval_training_input_configuration must be PER_HOST_V1 or SLICED; got "
                f"{eval_training_input_configuration}"
            )
        if per_host_input_for_training is False:
            per_host_input_for_training = InputPipelineConfig.PER_SHARD_V1
        elif per_host_input_for_training is True:
            per_host_input_for_training = InputPipelineConfig.PER_HOST_V1
        if initial_infeed_sleep_secs:
            check_positive_integer(initial_infeed_sleep_secs, "TPUConfig initial_infeed_sleep_secs")
        if isinstance(experimental_host_call_every_n_steps, np.integer):  # a Python int for the step's ops
            experimental_host_call_every_n_steps = int(experimental_host_call_every_n_steps)
        tpu_job_name = tpu_job_name or read_tf_config().get("service", {}).get("tpu_worker_job_name")
        return super().__new__(
            cls,
            iterations_per_loop,
            num_shards,
            num_cores_per_replica,
            per_host_input_for_training,
            tpu_job_name,
            initial_infeed_sleep_secs,
            input_partition_dims,
            eval_training_input_configuration,
            experimental_host_call_every_n_steps,
            experimental_allow_per_host_v2_parallel_get_next,
            experimental_feed_hook,
        )

    @property
    def input_pipeline(self) -> int:
        """`per_host_input_for_training` as an `InputPipelineConfig` value (True and False mapped)."""
        return self.per_host_input_for_training

    @property
    def parsed_iterations_per_loop(self) -> IterationsPerLoop:
        """`iterations_per_loop` parsed into a count or a number of seconds."""
        return parse_iterations_per_loop(self.iterations_per_loop)

    def replace(self, **changes: Any) -> TPUConfig:
        """A copy with `changes` applied and checked (`_replace` copies without checks, as a namedtuple)."""
        return TPUConfig(**{**self._asdict(), **changes})


def check_supported(tpu_config: TPUConfig) -> None:
    """Refuses the TPU-path settings this library does not run, naming what to use instead.

    The original accepted them in `TPUConfig`; they are refused where a model
    is built on the strategy path (`use_tpu=True`), after the original's own checks.

    Example:

    >>> check_supported(TPUConfig(num_cores_per_replica=2))
    Traceback (most recent call last):
    ValueError: Model parallelism (`num_cores_per_replica` > 1, ...
    """
    cores, dims = tpu_config.num_cores_per_replica, tpu_config.input_partition_dims
    if (cores or 1) > 1 or dims is not None:
        raise ValueError(
            "Model parallelism (`num_cores_per_replica` > 1, `input_partition_dims`) is not "
            f"supported by keras_tpu_estimator. Received: num_cores_per_replica={cores}, "
            f"input_partition_dims={dims}. Use one core per replica, or tf.distribute's "
            "TPUStrategy with experimental_split_to_logical_devices in Keras."
        )
    pipelines = (InputPipelineConfig.PER_SHARD_V1, InputPipelineConfig.PER_HOST_V1, InputPipelineConfig.PER_HOST_V2)
    if tpu_config.per_host_input_for_training not in pipelines:
        raise ValueError(
            "`per_host_input_for_training` must be True, False or one of "
            "InputPipelineConfig.PER_SHARD_V1/PER_HOST_V1/PER_HOST_V2: keras_tpu_estimator "
            f"does not run BROADCAST. Received: {tpu_config.per_host_input_for_training!r}"
        )
    check_positive_int(
        "experimental_host_call_every_n_steps",
        tpu_config.experimental_host_call_every_n_steps,
        allow_none=False,
    )


_USE_DEFAULT = object()


def _check_at_least(config: Any, name: str, bound: int, strict: bool = False) -> None:
    value = getattr(config, name)
    # The original's comparisons (`value > bound`, `value >= bound`): a string fails on the same operator.
    if value is not None and not (value > bound if strict else value >= bound):
        raise ValueError(f"{name} should be {'>' if strict else '>='} {bound}")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Where and how often to save, log and summarise; carries a `TPUConfig`.

    Defaults follow the Estimator: a checkpoint every 600 seconds unless
    `save_checkpoints_steps` is given, 5 checkpoints kept, summaries and step
    logs every 100 steps. TF_CONFIG is read as the Estimator read it
    (`model_dir`, `session_master`, `eval_session_master`, the cluster and task,
    and `service.tpu_worker_job_name` for `TPUConfig.tpu_job_name`).

    Args:
        tpu_config: `TPUConfig` (None: the defaults).
        model_dir: Directory for checkpoints and summaries (else TF_CONFIG's).
        master: TPU name or address for `TPUClusterResolver`; defaults to
            TF_CONFIG's `session_master`, else `''` (local, or `TPU_NAME`).
        evaluation_master: Defaults to `master` (an evaluator task: TF_CONFIG's
            `eval_session_master`); evaluation uses the training strategy.
        cluster: A `tf.distribute.cluster_resolver.ClusterResolver` to use
            (then `master` is its `master()`).
        save_checkpoints_steps, save_checkpoints_secs: At most one may be set.
        keep_checkpoint_max, keep_checkpoint_every_n_hours: Checkpoint retention.
        log_step_count_steps, save_summary_steps: Logging and summary frequency.
        tf_random_seed: Global seed set before the model is built.
        train_distribute: A `tf.distribute.Strategy` to run on, for example a
            `MultiWorkerMirroredStrategy` created at program start. With
            `use_tpu=False` (and in the plain `Estimator`) it runs training on
            its replicas as the Estimator did, and `eval_distribute` evaluation.
        checkpoint_save_graph_def: Write `model.ckpt-<N>.meta` beside each
            checkpoint, as the original's Saver did (default True).
        eval_distribute: The CPU path's evaluation strategy (the strategy path
            evaluates on the training strategy).
        jit_compile: `True` compiles each replica step with XLA off a TPU
            (this library's keyword; the models' `jit_compile="auto"` reads
            it), `False` never; None (default) leaves it to `session_config`.
        session_config: A TF1 `ConfigProto`; its XLA switch
            (`graph_options.optimizer_options.global_jit_level` `ON_1` or
            `ON_2`) turns on XLA auto-clustering of the replica step, the rest
            is ignored (TF1 session settings).
        device_fn, protocol,
        experimental_max_worker_delay_secs, session_creation_timeout_secs:
            Accepted and ignored (TF1 session settings).

    The Estimator's read-only properties `task_type`, `task_id`, `is_chief`,
    `num_worker_replicas`, `num_ps_replicas`, `global_id_in_cluster` and
    `cluster_spec` come from TF_CONFIG.

    Example:

    ```python
    config = RunConfig(model_dir=model_dir, save_checkpoints_steps=1000,
                       tpu_config=TPUConfig(iterations_per_loop=100))
    ```
    """

    tpu_config: TPUConfig | None = None
    model_dir: str | None = None
    master: str | None = None
    evaluation_master: str | None = None
    cluster: Any = None
    save_checkpoints_steps: Any = _USE_DEFAULT
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
    jit_compile: bool | None = None
    task_type: str | None = dataclasses.field(init=False, default=None)
    task_id: int = dataclasses.field(init=False, default=0)
    is_chief: bool = dataclasses.field(init=False, default=True)
    num_worker_replicas: int = dataclasses.field(init=False, default=1)
    num_ps_replicas: int = dataclasses.field(init=False, default=0)
    global_id_in_cluster: int | None = dataclasses.field(init=False, default=0)
    cluster_spec: dict = dataclasses.field(init=False, default_factory=dict, repr=False)
    service: dict | None = dataclasses.field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        steps, secs = self.save_checkpoints_steps, self.save_checkpoints_secs
        if steps is _USE_DEFAULT and secs is _USE_DEFAULT:
            steps, secs = None, 600
        elif secs is _USE_DEFAULT:
            secs = None
        elif steps is _USE_DEFAULT:
            steps = None
        elif steps is not None and secs is not None:
            raise ValueError("`save_checkpoints_steps` and `save_checkpoints_secs` cannot be both set.")
        object.__setattr__(self, "save_checkpoints_steps", steps)
        object.__setattr__(self, "save_checkpoints_secs", secs)
        tf_config = read_tf_config()
        self._set_model_dir(tf_config.get("model_dir"))
        for name, bound, strict in (
            ("save_summary_steps", 0, False),
            ("save_checkpoints_steps", 0, False),
            ("save_checkpoints_secs", 0, False),
            ("keep_checkpoint_max", 0, False),
            ("keep_checkpoint_every_n_hours", 0, True),
            ("log_step_count_steps", 0, True),
            ("session_creation_timeout_secs", 0, True),
        ):
            _check_at_least(self, name, bound, strict)
        if self.tf_random_seed is not None and not isinstance(self.tf_random_seed, int):
            raise ValueError("tf_random_seed must be integer.")
        if self.protocol not in (None, "grpc", "grpc+verbs"):
            raise ValueError("protocol should be grpc or grpc+verbs")
        if self.session_config is not None and not isinstance(self.session_config, tf.compat.v1.ConfigProto):
            raise ValueError("session_config must be instance of ConfigProto")
        if self.jit_compile not in (None, True, False):
            raise ValueError(f"jit_compile must be True, False or None. Received: {self.jit_compile!r}")
        if self.device_fn is not None and not (
            callable(self.device_fn) and function_args(self.device_fn) == ("op",)
        ):
            raise ValueError('device_fn must be callable with exactly one argument "op".')
        delay = self.experimental_max_worker_delay_secs
        if delay is not None and not isinstance(delay, int):
            raise ValueError("experimental_max_worker_delay_secs must be an integer if set.")
        if self.tpu_config is None:
            object.__setattr__(self, "tpu_config", TPUConfig())
        elif not isinstance(self.tpu_config, TPUConfig):
            raise TypeError(
                "`tpu_config` must be a keras_tpu_estimator.TPUConfig. Received: "
                f"{type(self.tpu_config).__name__}"
            )
        settings = cluster_settings(tf_config)
        master, evaluation_master = settings.pop("master"), settings.pop("evaluation_master")
        for name, value in settings.items():
            object.__setattr__(self, name, value)
        if self.master is not None:
            if self.cluster is not None:
                raise ValueError("Both master and cluster are set.")
            master = self.master
        elif self.cluster is not None:
            master = self.cluster.master()
        object.__setattr__(self, "master", master)
        if self.evaluation_master is None:
            if not evaluation_master and self.task_type != "evaluator":
                evaluation_master = master
            object.__setattr__(self, "evaluation_master", evaluation_master)

    def _set_model_dir(self, from_tf_config: str | None) -> None:
        model_dir = os.fspath(self.model_dir) if self.model_dir is not None else None
        if isinstance(model_dir, bytes):
            model_dir = model_dir.decode()
        if model_dir == "":
            raise ValueError("model_dir should be non-empty.")
        if from_tf_config == "":
            raise ValueError("model_dir in TF_CONFIG should be non-empty.")
        if from_tf_config:
            if model_dir and model_dir != from_tf_config:
                raise ValueError(
                    "`model_dir` provided in RunConfig construct, if set, must have the same value "
                    f"as the model_dir in TF_CONFIG. model_dir: {model_dir}\n"
                    f"TF_CONFIG[\"model_dir\"]: {from_tf_config}.\n"
                )
            model_dir = from_tf_config
        object.__setattr__(self, "model_dir", model_dir)

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with `changes` applied (and validated), as the Estimator's `replace`.

        Only the Estimator's replaceable properties (and `tpu_config`, `jit_compile`) may
        change. Setting one of `save_checkpoints_steps` / `save_checkpoints_secs`
        to a value clears the other; setting both to values is an error.

        Example:

        ```python
        config = RunConfig(save_checkpoints_steps=1000)
        config = config.replace(save_checkpoints_steps=500)
        assert config.save_checkpoints_steps == 500
        ```
        """
        for key in changes:
            if key not in _REPLACEABLE and key not in ("tpu_config", "jit_compile"):  # the latter two: this library's
                raise ValueError(
                    f"Replacing {key} is not supported. Allowed properties are {list(_REPLACEABLE)}."
                )
        steps, secs = "save_checkpoints_steps", "save_checkpoints_secs"
        if steps in changes and secs in changes:
            if changes[steps] is not None and changes[secs] is not None:
                raise ValueError("`save_checkpoints_steps` and `save_checkpoints_secs` cannot be both set.")
        elif steps in changes and changes[steps] is not None:
            changes[secs] = None
        elif secs in changes and changes[secs] is not None:
            changes[steps] = None
        current = {
            field.name: getattr(self, field.name) for field in dataclasses.fields(self) if field.init
        }
        if self.cluster is not None:
            current["master"] = None  # derived from the cluster again
        return RunConfig(**{**current, **changes})


_REPLACEABLE = (
    "model_dir",
    "tf_random_seed",
    "save_summary_steps",
    "save_checkpoints_steps",
    "save_checkpoints_secs",
    "session_config",
    "keep_checkpoint_max",
    "keep_checkpoint_every_n_hours",
    "log_step_count_steps",
    "train_distribute",
    "device_fn",
    "protocol",
    "eval_distribute",
    "experimental_distribute",
    "experimental_max_worker_delay_secs",
    "session_creation_timeout_secs",
    "checkpoint_save_graph_def",
)
