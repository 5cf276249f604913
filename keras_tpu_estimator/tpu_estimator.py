"""`TPUEstimator`: the old signatures, translated into `EstimatorModel` calls with callbacks.

The facade owns `model_dir` and the seed's argument checks; it holds no
training logic. Each `train`, `evaluate` or `predict` call builds a fresh
`EstimatorModel` (as each Estimator call built a fresh graph), restores the
latest checkpoint (or warm-starts), and runs `fit` / `evaluate` / `predict`
with `StopAtStep`, `CheckpointSaver`, `StepSummaries` and `StepLogger`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.callbacks import (
    CheckpointSaver,
    StepLogger,
    StepSummaries,
    StopAtStep,
)
from keras_tpu_estimator.checkpoints import (
    DamagedCheckpointError,
    WarmStartSettings,
    as_warm_start_settings,
    checkpoint_step,
    resolve_checkpoint_path,
)
from keras_tpu_estimator.config import (
    InputPipelineConfig,
    RunConfig,
    check_positive_integer,
    check_supported,
)
from keras_tpu_estimator.estimator_args import ExportSavedModelApiVersion, check_estimator_arguments
from keras_tpu_estimator.export import export_estimator_savedmodel, export_saved_model
from keras_tpu_estimator.graph_mode import eager_call, eager_generator
from keras_tpu_estimator.inference import BatchConfig, inference_on_tpu, model_fn_inference_on_tpu
from keras_tpu_estimator.logs import get_logger
from keras_tpu_estimator.model import EstimatorModel
from keras_tpu_estimator.model_dir import check_model_dir, checkpoints_newest_first
from keras_tpu_estimator.predictions import batch_length, select_keys
from keras_tpu_estimator.restore import RestoreOrWarmStart
from keras_tpu_estimator.spec import (
    InputFn,
    ModeKeys,
    ModelFn,
    TPUEstimatorSpec,
    check_hooks,
)
from keras_tpu_estimator.strategy import is_chief
from keras_tpu_estimator.worker_errors import sharing_worker_errors

_log = get_logger(__name__)

# What `tensorflow_estimator.python.estimator.tpu.tpu_estimator` offered, for `from ... import tpu_estimator`.
__all__ = [
    "BatchConfig",
    "ExportSavedModelApiVersion",
    "TPUEstimator",
    "TPUEstimatorSpec",
    "export_estimator_savedmodel",
    "inference_on_tpu",
    "model_fn_inference_on_tpu",
]


class TPUEstimator:
    """Drop-in `tf.estimator.tpu.TPUEstimator` on Keras 3: same constructor, same methods.

    Args:
        model_fn: `model_fn(features, labels, mode, params, config)` returning a spec.
        model_dir: Checkpoint and summary directory; a temporary directory when
            neither it nor `config.model_dir` is set. If both are set they must match.
        config: `RunConfig` (required, as in TPUEstimator).
        params: Dict passed to `model_fn` and `input_fn`.
        use_tpu: Run on the strategy path (TPU, else GPUs, else CPU), with
            per-replica batches; `False` runs on the default strategy with global batches.
        train_batch_size, eval_batch_size, predict_batch_size: Global batch sizes.
        batch_axis: Accepted and ignored (tf.distribute splits along axis 0).
        eval_on_tpu: `False` evaluates with `use_tpu=False`.
        export_to_tpu, export_to_cpu, export_saved_model_api_version: Export options.
        warm_start_from: A checkpoint path or `WarmStartSettings`.
        embedding_config_spec: Not supported; must be None.

    Example:

    ```python
    estimator = TPUEstimator(model_fn, config=RunConfig(model_dir="/tmp/m"),
                             train_batch_size=64, eval_batch_size=64)
    estimator.train(input_fn, max_steps=1000)
    estimator.evaluate(input_fn, steps=10)   # {"loss": ..., "global_step": 1000}
    ```

    Differences from TPUEstimator: `hooks` are Keras callbacks; the reported
    loss averages over replicas.
    """

    def __init__(
        self,
        model_fn: ModelFn | None = None,
        model_dir: str | None = None,
        config: RunConfig | None = None,
        params: dict | None = None,
        use_tpu: bool = True,
        train_batch_size: int | None = None,
        eval_batch_size: int | None = None,
        predict_batch_size: int | None = None,
        batch_axis: Any = None,
        eval_on_tpu: bool = True,
        export_to_tpu: bool = True,
        export_to_cpu: bool = True,
        warm_start_from: str | WarmStartSettings | None = None,
        embedding_config_spec: Any = None,
        export_saved_model_api_version: ExportSavedModelApiVersion | int = ExportSavedModelApiVersion.V1,
    ):
        model_dir, params = check_estimator_arguments(
            model_fn, model_dir, config, params, use_tpu, train_batch_size, eval_batch_size,
            predict_batch_size, batch_axis, eval_on_tpu, embedding_config_spec,
            export_saved_model_api_version,
        )
        self._model_fn = model_fn
        if use_tpu:
            check_supported(config.tpu_config)
        # As the original: logging every `log_step_count_steps` is the facade's, not the config's.
        self._log_every_n_steps = config.log_step_count_steps
        self._config = config.replace(model_dir=model_dir, log_step_count_steps=None)
        self._params = params
        self._use_tpu = bool(use_tpu)
        self._eval_on_tpu = bool(eval_on_tpu)
        self._batch_sizes = {
            "train_batch_size": train_batch_size,
            "eval_batch_size": eval_batch_size,
            "predict_batch_size": predict_batch_size,
        }
        self._warm_start = as_warm_start_settings(warm_start_from)
        self.export_to_tpu = export_to_tpu
        self.export_to_cpu = export_to_cpu
        self.export_saved_model_api_version = ExportSavedModelApiVersion(
            getattr(export_saved_model_api_version, "value", export_saved_model_api_version)
        )

    # ---------------------------------------------------------------- properties
    @property
    def model_dir(self) -> str:
        """Where checkpoints and summaries live."""
        return self._config.model_dir

    @property
    def config(self) -> RunConfig:
        """The `RunConfig`, with `model_dir` filled in."""
        return self._config

    @property
    def params(self) -> dict:
        """A copy of `params`."""
        return dict(self._params)

    def latest_checkpoint(self) -> str | None:
        """The newest checkpoint in `model_dir` (found by scanning, so a lost state file loses nothing), or None."""
        found = checkpoints_newest_first(self.model_dir)
        return found[0] if found else None

    def eval_dir(self, name: str | None = None) -> str:
        """Where `evaluate(name=...)` writes its summaries: `model_dir/eval` or `model_dir/eval_<name>`."""
        return os.path.join(self.model_dir, f"eval_{name}" if name else "eval")

    def get_variable_names(self) -> list[str]:
        """Names of the variables in the latest checkpoint."""
        return [name for name, _ in tf.train.list_variables(self._require_checkpoint())]

    def get_variable_value(self, name: str) -> np.ndarray:
        """The value of variable `name` in the latest checkpoint."""
        return tf.train.load_variable(self._require_checkpoint(), name)

    def _checkpoint(self, checkpoint_path: str | None) -> str | None:
        """`checkpoint_path` resolved, else the latest checkpoint in `model_dir`, else None."""
        return resolve_checkpoint_path(checkpoint_path) if checkpoint_path else self.latest_checkpoint()

    def _require_checkpoint(self, checkpoint_path: str | None = None) -> str:
        path = self._checkpoint(checkpoint_path)
        if path is None:
            raise ValueError(
                f"Could not find trained model in model_dir: {self.model_dir}. "
                "Call train() first, or pass checkpoint_path."
            )
        return path

    def _checkpoint_or_initialization(self, checkpoint_path: str | None, action: str) -> str | list[str]:
        """`checkpoint_path` resolved, else `model_dir`'s checkpoints newest first (see `RestoreOrWarmStart`).

        With none, logs the original's line: the call runs on initial values.
        """
        if checkpoint_path:
            return resolve_checkpoint_path(checkpoint_path)
        found = checkpoints_newest_first(self.model_dir)
        if not found:
            _log.warning(
                "Could not find trained model in model_dir: %s, running initialization to %s.",
                self.model_dir,
                action,
            )
        return found

    # ------------------------------------------------------------------ modes
    def _checkpoint_saver(self, hooks: list, listeners: list) -> CheckpointSaver:
        """The saver of a `train` call; as the Estimator's, a `CheckpointSaverHook` in `hooks` replaces it.

        The hook's directory, schedule and listeners are used (it is removed
        from `hooks`); `saving_listeners` are called around every save.
        """
        config = self._config
        directory, steps, secs = self.model_dir, config.save_checkpoints_steps, config.save_checkpoints_secs
        for hook in [h for h in hooks if isinstance(h, tf.compat.v1.train.CheckpointSaverHook)]:
            hooks.remove(hook)
            directory, steps, secs, own = _compat.checkpoint_saver_hook_parts(hook)
            listeners = own + listeners
        return CheckpointSaver(
            directory,
            save_steps=steps or None,
            save_secs=secs or None,
            max_to_keep=config.keep_checkpoint_max,
            keep_checkpoint_every_n_hours=config.keep_checkpoint_every_n_hours,
            listeners=listeners,
            save_graph_def=config.checkpoint_save_graph_def,
        )

    def _check_sliced(self, on_tpu: bool) -> None:
        sliced = self._config.tpu_config.eval_training_input_configuration == InputPipelineConfig.SLICED
        if sliced and not on_tpu:
            raise ValueError(
                "Invalid TPUConfig `eval_training_input_configuration` value. SLICED mode only works "
                "on use_tpu = True."
            )

    def _model(self, use_tpu: bool) -> EstimatorModel:
        return EstimatorModel(
            self._model_fn,
            params=self._params,
            config=self._config,
            use_tpu=use_tpu,
            **self._batch_sizes,
        )

    @eager_call
    def train(
        self,
        input_fn: InputFn,
        hooks: Sequence[keras.callbacks.Callback] | None = None,
        steps: int | None = None,
        max_steps: int | None = None,
        saving_listeners: Sequence[Any] | None = None,
    ) -> TPUEstimator:
        """Trains from the latest checkpoint in `model_dir` for `steps` or up to `max_steps`.

        Returns:
            `self`, as the Estimator did.

        Example:

        ```python
        estimator.train(input_fn, max_steps=10_000)
        ```
        """
        if steps is not None and max_steps is not None:
            raise ValueError("Can not provide both steps and max_steps.")
        if steps is not None and steps <= 0:
            raise ValueError(f"Must specify steps > 0, given: {steps}")
        if max_steps is not None and max_steps <= 0:
            raise ValueError(f"Must specify max_steps > 0, given: {max_steps}")
        check_model_dir(self.model_dir)
        found = checkpoints_newest_first(self.model_dir)
        if max_steps is not None and _newest_step(found) >= max_steps:
            _log.info("Skipping training since max_steps has already saved.")
            return self
        hooks = list(check_hooks("hooks", hooks))
        if self._use_tpu and steps is None and max_steps is None:
            raise ValueError(
                "For TPU training, one of `steps` or `max_steps` must be set. Cannot be both `None`."
            )
        if self._use_tpu:
            if steps is not None:
                check_positive_integer(steps, "Train steps")
            if max_steps is not None:
                check_positive_integer(max_steps, "Train max_steps")
        else:  # the original's CPU path stopped at the first step >= the number: 13 for 12.3
            steps, max_steps = _whole_steps(steps), _whole_steps(max_steps)
        for listener in saving_listeners or ():
            if not isinstance(listener, tf.compat.v1.train.CheckpointSaverListener):
                raise TypeError(
                    f"saving_listeners must be a list of CheckpointSaverListener, given: {listener}"
                )
        model = self._model(self._use_tpu)
        config = self._config
        callbacks: list[keras.callbacks.Callback] = [RestoreOrWarmStart(found, self._warm_start)]
        if steps is not None or max_steps is not None:
            callbacks.append(StopAtStep(steps=steps, max_steps=max_steps))
        callbacks.append(self._checkpoint_saver(hooks, list(saving_listeners or [])))
        if config.save_summary_steps:
            callbacks.append(StepSummaries(self.model_dir, config.save_summary_steps))
        if self._log_every_n_steps:
            callbacks.append(StepLogger(self._log_every_n_steps))
        with sharing_worker_errors(self.model_dir, model.distribute_strategy):
            try:
                model.fit(input_fn, callbacks=callbacks + hooks, verbose=0)
            finally:
                model.release_host()
        return self

    @eager_call
    def evaluate(
        self,
        input_fn: InputFn,
        steps: int | None = None,
        hooks: Sequence[keras.callbacks.Callback] | None = None,
        checkpoint_path: str | None = None,
        name: str | None = None,
    ) -> dict:
        """Evaluates the latest (or given) checkpoint for `steps` steps (None: to the end of input).

        Without a checkpoint it evaluates freshly initialised (or warm-started)
        variables, with the original's log line.

        Returns:
            Every `eval_metrics` / `eval_metric_ops` value, `loss` (the mean of
            the steps' losses) and `global_step` (the checkpoint's step); each
            value is also written to `model_dir/eval[_name]` for TensorBoard.

        Example:

        ```python
        estimator.evaluate(eval_input_fn, steps=100)  # {"accuracy": ..., "loss": ..., "global_step": ...}
        ```
        """
        hooks = check_hooks("hooks", hooks)
        on_tpu = self._use_tpu and self._eval_on_tpu
        if steps is not None:
            if on_tpu:
                check_positive_integer(steps, "Eval steps")
            elif steps <= 0:
                raise ValueError(f"Must specify steps > 0, given: {steps}")
            else:  # the original's CPU path ran until at least `steps` evaluations
                steps = _whole_steps(steps)
        if name is not None and not isinstance(name, str):
            raise TypeError(f"`name` must be a string (it names model_dir/eval_<name>). Received: {name!r}")
        if on_tpu and self._batch_sizes["eval_batch_size"] is None:
            raise ValueError(
                "eval_batch_size in TPUEstimator constructor cannot be `None` if .evaluate is "
                "running on TPU."
            )
        self._check_sliced(on_tpu)
        check_model_dir(self.model_dir)
        restore = RestoreOrWarmStart(
            self._checkpoint_or_initialization(checkpoint_path, "evaluate"), self._warm_start
        )
        model = self._model(self._use_tpu and self._eval_on_tpu)
        try:
            logs = model.evaluate(input_fn, steps=steps, callbacks=[restore, *hooks], verbose=0, return_dict=True)
        finally:
            model.release_host()
        step, path = model.global_step, restore.restored
        if is_chief(model.distribute_strategy):
            with tf.summary.create_file_writer(self.eval_dir(name)).as_default(step=step):
                for key, value in logs.items():
                    tf.summary.scalar(key, value)
                if path:
                    tf.summary.text("checkpoint_path", path)
        results = {key: np.float32(value) for key, value in logs.items()}
        results["global_step"] = np.int64(step)
        return results

    @eager_generator
    def predict(
        self,
        input_fn: InputFn,
        predict_keys: Sequence[str] | str | None = None,
        hooks: Sequence[keras.callbacks.Callback] | None = None,
        checkpoint_path: str | None = None,
        yield_single_examples: bool = True,
    ) -> Iterator[Any]:
        """Yields predictions of the latest (or given) checkpoint.

        Yields:
            One dict per example (`yield_single_examples=True`), or one dict
            of arrays per input batch: its real rows only (16, ..., 16, 4 for
            100 rows and a batch of 16).

        Example:

        ```python
        for prediction in estimator.predict(predict_input_fn):
            print(prediction["class"])
        ```
        """
        hooks = check_hooks("hooks", hooks)
        if self._use_tpu and self._batch_sizes["predict_batch_size"] is None:
            raise ValueError(
                "predict_batch_size in TPUEstimator constructor cannot be `None` if .predict is "
                "running on TPU."
            )
        self._check_sliced(self._use_tpu)
        checkpoints = self._checkpoint_or_initialization(checkpoint_path, "predict")
        model = self._model(self._use_tpu)
        if not self._use_tpu:  # TF1 fetched only these (the original's TPU path computed all)
            model.select_predictions(predict_keys)
        callbacks = [RestoreOrWarmStart(checkpoints, self._warm_start), *hooks]
        try:  # a generator closed early (or collected) releases the host too
            for batch in model.predict_batches(input_fn, callbacks=callbacks, verbose=0):
                batch = select_keys(batch, predict_keys)
                if not yield_single_examples:
                    yield batch
                elif not isinstance(batch, dict):
                    yield from batch
                else:
                    for i in range(batch_length(batch)):
                        yield {key: value[i] for key, value in batch.items()}
        finally:
            model.release_host()

    @eager_call
    def export_saved_model(
        self,
        export_dir_base: str | bytes | os.PathLike,
        serving_input_receiver_fn: Any,
        assets_extra: dict | None = None,
        as_text: bool = False,
        checkpoint_path: str | None = None,
        experimental_mode: str = ModeKeys.PREDICT,
    ) -> bytes:
        """Exports the latest (or given) checkpoint as a SavedModel under `export_dir_base/<time>`.

        Writes the `serve` MetaGraph (`export_to_cpu`) and the `serve, tpu`
        MetaGraph (`export_to_tpu`; PREDICT only), variables once, to a
        temporary directory renamed when complete. `experimental_mode` TRAIN or
        EVAL exports a CPU `train` / `eval` MetaGraph from a
        `SupervisedInputReceiver` (with `export_to_tpu`, a warning, as before).

        Returns:
            The export directory as `bytes`, as the original returned it
            (`export_dir_base` may be str, bytes or a path).

        Example:

        ```python
        path = estimator.export_saved_model("/tmp/export", serving_input_receiver_fn)
        ```
        """
        if not serving_input_receiver_fn:
            raise ValueError("An input_receiver_fn must be defined.")
        if not (self.export_to_cpu or self.export_to_tpu):
            raise ValueError("One of export_to_cpu and export_to_tpu must be true.")
        checkpoint = self._checkpoint(checkpoint_path)
        if checkpoint is None and self._warm_start is not None:
            checkpoint = resolve_checkpoint_path(self._warm_start.ckpt_to_initialize_from)
        if checkpoint is None:
            raise ValueError(
                f"Couldn't find trained model at {self.model_dir}. Call train() first, or pass "
                "checkpoint_path."
            )
        path = export_saved_model(
            export_dir_base,
            serving_input_receiver_fn,
            self._model_fn,
            checkpoint,
            params=self._params,
            config=self._config,
            export_to_cpu=self.export_to_cpu,
            export_to_tpu=self.export_to_tpu,
            api_version=self.export_saved_model_api_version.value,
            assets_extra=assets_extra,
            as_text=as_text,
            mode=experimental_mode,
        )
        return os.fsencode(path)  # the original returned bytes, whatever the base

    export_savedmodel = export_saved_model


def _newest_step(checkpoints: list[str]) -> int:
    """The global step of the newest checkpoint that can be read (0 when none)."""
    for path in checkpoints:
        try:
            return checkpoint_step(path)
        except DamagedCheckpointError:
            continue
    return 0


def _whole_steps(steps: float | None) -> int | None:
    """A step count of the original's CPU path: its stop hooks ran to the first step >= `steps`."""
    return None if steps is None else math.ceil(steps)
