"""The `TPUEstimator` constructor's argument checks, in the original's order and words.

Example:

```python
model_dir, params = check_estimator_arguments(model_fn, None, RunConfig(), {}, True, 64, None, None,
                                              None, True, None, ExportSavedModelApiVersion.V1)
```
"""

from __future__ import annotations

import enum
import os
import tempfile
from typing import Any

from keras_tpu_estimator.contract import (
    InputPipelineConfig,
    RunConfig,
    check_params,
    check_positive_integer,
    verify_model_fn_args,
)
from keras_tpu_estimator.utils import get_logger

_log = get_logger(__name__)


class ExportSavedModelApiVersion(enum.Enum):
    """How the TPU MetaGraph is exported (see `TPUEstimator.export_saved_model`)."""

    V1 = 1
    V2 = 2


def check_estimator_arguments(
    model_fn: Any,
    model_dir: Any,
    config: Any,
    params: dict | None,
    use_tpu: bool,
    train_batch_size: int | None,
    eval_batch_size: int | None,
    predict_batch_size: int | None,
    batch_axis: Any,
    eval_on_tpu: bool,
    embedding_config_spec: Any,
    export_saved_model_api_version: Any,
) -> tuple[str, dict]:
    """Checks the constructor's arguments as the original did; returns `(model_dir, checked params)`.

    `model_dir` is the constructor's or the config's (they must agree), else a
    new temporary directory, as the original chose.
    """
    if config is None or not isinstance(config, RunConfig):
        raise ValueError(
            "`config` must be provided with type `tpu_config.RunConfig`: a "
            f"keras_tpu_estimator RunConfig. Received: {type(config).__name__}"
        )
    params_given = params
    params = check_params(params)
    if use_tpu:
        if train_batch_size is None:
            raise ValueError("`train_batch_size` cannot be `None`")
        check_positive_integer(train_batch_size, "train_batch_size")
        if eval_batch_size is not None:
            check_positive_integer(eval_batch_size, "eval_batch_size")
        if predict_batch_size is not None:
            check_positive_integer(predict_batch_size, "predict_batch_size")
    pipeline = config.tpu_config.per_host_input_for_training
    if use_tpu and pipeline == InputPipelineConfig.PER_SHARD_V1 and config.tpu_config.num_cores_per_replica:
        raise ValueError(
            "Model parallelism only supports per host input for training. Please adjust "
            "TPURunconfig.per_host_input_for_training."
        )
    if use_tpu and embedding_config_spec and pipeline not in (
        InputPipelineConfig.PER_HOST_V1,
        InputPipelineConfig.PER_HOST_V2,
    ):
        raise ValueError(
            f"Only PER_HOST_V1 and PER_HOST_V2 is supported when using TPU Embedding; got {pipeline}."
        )
    if (
        not (use_tpu and eval_on_tpu)
        and embedding_config_spec
        and getattr(embedding_config_spec, "partition_strategy", None) == "mod"
    ):
        raise ValueError("Mod sharding of embedding tables not supported on CPU.")
    if embedding_config_spec is not None:
        raise ValueError(
            "`embedding_config_spec` (TPU embeddings) is not supported by keras_tpu_estimator. "
            "Use tf.tpu.experimental.embedding.TPUEmbedding inside model_fn."
        )
    if not callable(model_fn):
        raise TypeError(f"unsupported callable: model_fn must be a function. Received: {model_fn!r}")
    verify_model_fn_args(model_fn, params_given)
    if model_dir is not None:
        model_dir = os.fspath(model_dir)
        model_dir = model_dir.decode() if isinstance(model_dir, bytes) else model_dir
    if model_dir and config.model_dir and model_dir != config.model_dir:
        raise ValueError(
            "`model_dir` are set both in constructor and `RunConfig`, but with different "
            f"values. In constructor: '{model_dir}', in `RunConfig`: '{config.model_dir}' "
        )
    model_dir = model_dir or config.model_dir
    if not model_dir:
        model_dir = tempfile.mkdtemp(prefix="keras_tpu_estimator_")
        _log.warning("Using temporary folder as model directory: %s", model_dir)
    if not (
        isinstance(export_saved_model_api_version, ExportSavedModelApiVersion)
        or export_saved_model_api_version in (1, 2)
    ):
        raise ValueError(
            f"export_saved_model_api_version should be 1 or 2; got {export_saved_model_api_version}."
        )
    if batch_axis is not None:
        _log.warning("`batch_axis` is ignored: tf.distribute splits batches along axis 0.")
    return model_dir, params
