"""`TPUEstimator`: the old signatures, translated into `EstimatorModel` calls with callbacks.

The facade owns `model_dir` and the seed's argument checks; it holds no
training logic. Each `train`, `evaluate` or `predict` call builds a fresh
`EstimatorModel` (as each Estimator call built a fresh graph), restores the
latest checkpoint (or warm-starts), and runs `fit` / `evaluate` / `predict`
with `StopAtStep`, `CheckpointSaver`, `StepSummaries` and `StepLogger`.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_tpu_estimator.callbacks import CheckpointSaver, StepLogger, StepSummaries, StopAtStep
from keras_tpu_estimator.checkpoints import (
    WarmStartSettings,
    as_warm_start_settings,
    checkpoint_step,
    resolve_checkpoint_path,
    restore_checkpoint,
)
from keras_tpu_estimator.config import RunConfig, check_positive_integer
from keras_tpu_estimator.export import export_saved_model
from keras_tpu_estimator.model import EstimatorModel
from keras_tpu_estimator.model_fn import check_params, verify_model_fn_args
from keras_tpu_estimator.spec import InputFn, ModeKeys, ModelFn, check_hooks
from keras_tpu_estimator.strategy import is_chief, num_workers

_log = logging.getLogger("keras_tpu_estimator")


class ExportSavedModelApiVersion(enum.Enum):
    """How the TPU MetaGraph is exported (see `TPUEstimator.export_saved_model`)."""

    V1 = 1
    V2 = 2


_ABORTED = (
    tf.errors.UnavailableError,
    tf.errors.AbortedError,
    tf.errors.CancelledError,
    tf.errors.DeadlineExceededError,
)


@contextlib.contextmanager
def _sharing_worker_errors(model_dir: str, strategy: tf.distribute.Strategy) -> Iterator[None]:
    """Under several workers, the error that ended one worker ends the others too.

    A failing worker writes its error to `model_dir/worker_errors/`; a worker
    whose collectives were aborted because a peer died re-raises with the
    peer's error, so every process reports the original cause.
    """
    if num_workers(strategy) == 1:
        yield
        return
    folder = os.path.join(model_dir, "worker_errors")
    resolver = strategy.cluster_resolver
    own = os.path.join(folder, f"{resolver.task_type}-{resolver.task_id}.txt")
    tf.io.gfile.makedirs(folder)
    if tf.io.gfile.exists(own):
        tf.io.gfile.remove(own)
    try:
        yield
    except Exception as error:
        if not isinstance(error, _ABORTED):
            with tf.io.gfile.GFile(own, "w") as report:
                report.write(f"{type(error).__name__}: {error}")
            raise
        peers: list[str] = []
        deadline = time.monotonic() + 5.0
        while not peers and time.monotonic() < deadline:
            peers = [p for p in tf.io.gfile.glob(os.path.join(folder, "*.txt")) if p != own]
            time.sleep(0.2)
        if not peers:
            raise
        reports = {}
        for path in sorted(peers):
            with tf.io.gfile.GFile(path) as report:
                reports[os.path.basename(path)[:-4]] = report.read().strip()
        raise RuntimeError(
            f"Training stopped because another worker failed: {reports}. "
            "This worker's collectives were aborted."
        ) from error


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
    loss averages over replicas; `config.log_step_count_steps` is left as given.
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
        if embedding_config_spec is not None:
            raise ValueError(
                "`embedding_config_spec` (TPU embeddings) is not supported by keras_tpu_estimator. "
                "Use tf.tpu.experimental.embedding.TPUEmbedding inside model_fn."
            )
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
                "export_saved_model_api_version should be 1 or 2; got "
                f"{export_saved_model_api_version}."
            )
        if batch_axis is not None:
            _log.warning("`batch_axis` is ignored: tf.distribute splits batches along axis 0.")
        self._model_fn = model_fn
        self._config = config.replace(model_dir=model_dir)
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
        """The newest checkpoint in `model_dir`, or None."""
        return tf.train.latest_checkpoint(self.model_dir)

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

    def _checkpoint_or_initialization(self, checkpoint_path: str | None, action: str) -> str | None:
        """The checkpoint to restore; None (with the original's log line) to run on initial values."""
        path = self._checkpoint(checkpoint_path)
        if path is None:
            _log.warning(
                "Could not find trained model in model_dir: %s, running initialization to %s.",
                self.model_dir,
                action,
            )
        return path

    # ------------------------------------------------------------------ modes
    def _model(self, use_tpu: bool) -> EstimatorModel:
        return EstimatorModel(
            self._model_fn,
            params=self._params,
            config=self._config,
            use_tpu=use_tpu,
            **self._batch_sizes,
        )

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
        latest = self.latest_checkpoint()
        if max_steps is not None and latest and checkpoint_step(latest) >= max_steps:
            _log.info("Skipping training since max_steps has already saved.")
            return self
        hooks = list(check_hooks("hooks", hooks))
        if self._use_tpu and steps is None and max_steps is None:
            raise ValueError(
                "For TPU training, one of `steps` or `max_steps` must be set. Cannot be both `None`."
            )
        # The original checked the types on the TPU path only; its CPU path ran 13 steps for 12.3.
        if steps is not None:
            check_positive_integer(steps, "Train steps")
        if max_steps is not None:
            check_positive_integer(max_steps, "Train max_steps")
        for listener in saving_listeners or ():
            if not isinstance(listener, tf.compat.v1.train.CheckpointSaverListener):
                raise TypeError(
                    f"saving_listeners must be a list of CheckpointSaverListener, given: {listener}"
                )
        if saving_listeners:
            raise TypeError(
                "`saving_listeners` (CheckpointSaverListener) need a TF1 session. Pass a Keras "
                "callback in `hooks` and read `tf.train.latest_checkpoint(model_dir)` in it."
            )
        model = self._model(self._use_tpu)
        config = self._config
        callbacks: list[keras.callbacks.Callback] = [_RestoreOrWarmStart(latest, self._warm_start)]
        if steps is not None or max_steps is not None:
            callbacks.append(StopAtStep(steps=steps, max_steps=max_steps))
        callbacks.append(
            CheckpointSaver(
                self.model_dir,
                save_steps=config.save_checkpoints_steps,
                save_secs=config.save_checkpoints_secs,
                max_to_keep=config.keep_checkpoint_max,
                keep_checkpoint_every_n_hours=config.keep_checkpoint_every_n_hours,
            )
        )
        if config.save_summary_steps:
            callbacks.append(StepSummaries(self.model_dir, config.save_summary_steps))
        if config.log_step_count_steps:
            callbacks.append(StepLogger(config.log_step_count_steps))
        with _sharing_worker_errors(self.model_dir, model.distribute_strategy):
            model.fit(input_fn, callbacks=callbacks + hooks, verbose=0)
        return self

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
        if steps is not None:
            if not (self._use_tpu and self._eval_on_tpu) and steps <= 0:
                raise ValueError(f"Must specify steps > 0, given: {steps}")
            check_positive_integer(steps, "Eval steps")
        path = self._checkpoint_or_initialization(checkpoint_path, "evaluate")
        model = self._model(self._use_tpu and self._eval_on_tpu)
        callbacks = [_RestoreOrWarmStart(path, self._warm_start), *hooks]
        logs = model.evaluate(input_fn, steps=steps, callbacks=callbacks, verbose=0, return_dict=True)
        step = model.global_step
        if is_chief(model.distribute_strategy):
            logdir = os.path.join(self.model_dir, f"eval_{name}" if name else "eval")
            with tf.summary.create_file_writer(logdir).as_default(step=step):
                for key, value in logs.items():
                    tf.summary.scalar(key, value)
                if path:
                    tf.summary.text("checkpoint_path", path)
        results = {key: np.float32(value) for key, value in logs.items()}
        results["global_step"] = np.int64(step)
        return results

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
        path = self._checkpoint_or_initialization(checkpoint_path, "predict")
        model = self._model(self._use_tpu)
        callbacks = [_RestoreOrWarmStart(path, self._warm_start), *hooks]
        for batch in model.predict_batches(input_fn, callbacks=callbacks, verbose=0):
            batch = _select_keys(batch, predict_keys)
            if not yield_single_examples:
                yield batch
            elif not isinstance(batch, dict):
                yield from batch
            else:
                for i in range(len(next(iter(batch.values())))):
                    yield {key: value[i] for key, value in batch.items()}

    def export_saved_model(
        self,
        export_dir_base: str,
        serving_input_receiver_fn: Any,
        assets_extra: dict | None = None,
        as_text: bool = False,
        checkpoint_path: str | None = None,
        experimental_mode: str = ModeKeys.PREDICT,
    ) -> str:
        """Exports the latest (or given) checkpoint as a SavedModel under `export_dir_base/<time>`.

        Writes the `serve` MetaGraph (`export_to_cpu`) and the `serve, tpu`
        MetaGraph (`export_to_tpu`; PREDICT only), variables once, to a
        temporary directory renamed when complete. `experimental_mode` TRAIN or
        EVAL exports a CPU `train` / `eval` MetaGraph from a
        `SupervisedInputReceiver` (with `export_to_tpu`, a warning, as before).

        Returns:
            The export directory.

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
        return export_saved_model(
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

    export_savedmodel = export_saved_model


def _select_keys(predictions: Any, predict_keys: Sequence[str] | str | None) -> Any:
    """The predictions whose key is in `predict_keys` (all when it is empty), as the original chose."""
    if not predict_keys:
        return predictions
    if not isinstance(predictions, dict):
        raise ValueError("predict_keys argument is not valid in case of non-dict predictions.")
    selected = {key: value for key, value in predictions.items() if key in predict_keys}
    if not selected:
        raise ValueError(
            f"Expected to run at least one output from {predictions.keys()}, provided {predict_keys}."
        )
    return selected


class _RestoreOrWarmStart(keras.callbacks.Callback):
    """Before the first execution: restore `checkpoint`, else apply warm-start settings."""

    def __init__(self, checkpoint: str | None, warm_start: WarmStartSettings | None):
        super().__init__()
        self._checkpoint = checkpoint
        self._warm_start = warm_start

    def _restore(self) -> None:
        variables = self.model.checkpoint_variables
        if self._checkpoint:
            optimizer = [name for name in variables if name.startswith("keras_optimizer/")]
            restore_checkpoint(self._checkpoint, variables, allow_missing=optimizer)
        elif self._warm_start is not None:
            names = self._warm_start.apply(variables)
            _log.info("Warm-started %d variables from %s.", len(names), self._warm_start.ckpt_to_initialize_from)

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._restore()

    def on_test_begin(self, logs: dict | None = None) -> None:
        self._restore()

    def on_predict_begin(self, logs: dict | None = None) -> None:
        self._restore()
