"""`TPUEstimator`: the old signatures, translated into `EstimatorModel` calls with callbacks.

`TPUEstimator` subclasses the plain `Estimator` (`facade/estimator.py`), as
the original did: the calls (`facade/calls.py`), `model_dir` and the
results are the Estimator's; this class adds the seed's constructor checks
(`facade/args.py`), the batch sizes, `use_tpu` and the TPU paths' argument
checks, and exports the `serve, tpu` MetaGraph. Each `train`, `evaluate` or
`predict` call builds a fresh `EstimatorModel` (as each Estimator call built
a fresh graph), restores the latest checkpoint (or warm-starts), and runs
`fit` / `evaluate` / `predict` with `StopAtStep`, `CheckpointSaver`,
`StepSummaries` and `StepLogger`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from keras_tpu_estimator.contract import (
    InputFn,
    InputPipelineConfig,
    ModeKeys,
    ModelFn,
    RunConfig,
    TPUEstimatorSpec,
    check_positive_integer,
    check_supported,
    plain_count,
)
from keras_tpu_estimator.export import (
    BatchConfig,
    export_estimator_savedmodel,
    inference_on_tpu,
    model_fn_inference_on_tpu,
)
from keras_tpu_estimator.model import EstimatorModel, check_tpu_compatibility
from keras_tpu_estimator.model_dir import WarmStartSettings, as_warm_start_settings
from keras_tpu_estimator.utils import get_logger
from keras_tpu_estimator.xla import TPUCompatibilityReport

from .args import ExportSavedModelApiVersion, check_estimator_arguments
from .calls import mode_strategy
from .estimator import Estimator, _check_members_not_overridden

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


class TPUEstimator(Estimator):
    """Drop-in `tf.estimator.tpu.TPUEstimator` on Keras 3: same constructor, same methods.

    Args:
        model_fn: `model_fn(features, labels, mode, params, config)` returning a spec.
        model_dir: Checkpoint and summary directory; a temporary directory when
            neither it nor `config.model_dir` is set. If both are set they must match.
        config: `RunConfig` (required, as in TPUEstimator).
        params: Dict passed to `model_fn` and `input_fn`.
        use_tpu: Run on the strategy path (TPU, else GPUs, else CPU), with
            per-replica batches; `False` runs the CPU path with the configured
            batches, on `config.train_distribute` / `eval_distribute` if set.
        train_batch_size, eval_batch_size, predict_batch_size: Global batch sizes.
        batch_axis: Accepted and ignored (tf.distribute splits along axis 0).
        eval_on_tpu: `False` evaluates with `use_tpu=False`.
        export_to_tpu, export_to_cpu, export_saved_model_api_version: Export options.
        warm_start_from: A checkpoint path or `WarmStartSettings`.
        embedding_config_spec: Not supported; must be None.

    Example:

    ```python
    estimator = TPUEstimator(model_fn, config=RunConfig(model_dir=model_dir),
                             train_batch_size=8, eval_batch_size=8)
    estimator.train(input_fn, max_steps=2)
    estimator.evaluate(input_fn, steps=1)   # {"loss": ..., "global_step": 1000}
    ```

    With `use_tpu=False`, `RunConfig(train_distribute=...)` / `eval_distribute`
    run training / evaluation on the strategy's replicas, as the original's CPU
    path did: `input_fn` gets the strategy's `InputContext` and
    `params['batch_size']` is the configured batch; each replica takes whole
    batches of its dataset in turn.

    Differences from TPUEstimator: `hooks` may also be Keras callbacks; the
    reported loss averages over replicas.
    """

    # Its public path, where programs import it from (and where pickle and reprs should look).
    __module__ = "keras_tpu_estimator.tpu_estimator"

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
        _check_members_not_overridden(type(self))
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
            "train_batch_size": plain_count(train_batch_size),
            "eval_batch_size": plain_count(eval_batch_size),
            "predict_batch_size": plain_count(predict_batch_size),
        }
        self._warm_start = as_warm_start_settings(warm_start_from)
        self.export_to_tpu = export_to_tpu
        self.export_to_cpu = export_to_cpu
        self.export_saved_model_api_version = ExportSavedModelApiVersion(
            getattr(export_saved_model_api_version, "value", export_saved_model_api_version)
        )

    # ------------------------------------------- what the Estimator's calls use
    def _library_model_fn(self) -> ModelFn:
        return self._model_fn

    def _library_input_fn(self, input_fn: InputFn) -> InputFn:
        return input_fn

    def _library_params(self) -> dict:
        return self._params

    def _model(self, mode: str) -> EstimatorModel:
        """A fresh model of one call: the strategy path, or the CPU path on the mode's strategy."""
        use_tpu = self._use_tpu and (mode != ModeKeys.EVAL or self._eval_on_tpu)
        return EstimatorModel(
            self._model_fn,
            params=self._params,
            config=self._config,
            use_tpu=use_tpu,
            strategy=None if use_tpu else mode_strategy(self._config, mode),
            **self._batch_sizes,
        )

    def check_tpu_compatibility(
        self, input_fn: InputFn, mode: str | Sequence[str] = ("train", "eval", "predict")
    ) -> TPUCompatibilityReport:
        """Whether `model_fn` will compile for a TPU in `mode` (a `ModeKeys` value, or several), on any machine.

        Builds the mode's replica step with one TPU core's batch (the
        configured batch over `TPUConfig.num_shards` cores, else 8; EVAL and
        PREDICT padded), compiles it with XLA and returns the report
        (`xla/readiness.py`). Nothing is trained; `model_dir` is untouched.

        Example:

        ```python
        report = estimator.check_tpu_compatibility(train_input_fn, ModeKeys.TRAIN)
        print(report)
        ```
        """
        sizes = {
            ModeKeys.TRAIN: self._batch_sizes["train_batch_size"],
            ModeKeys.EVAL: self._batch_sizes["eval_batch_size"],
            ModeKeys.PREDICT: self._batch_sizes["predict_batch_size"],
        }
        return check_tpu_compatibility(
            self._model_fn, self._params, self._config, sizes, self._library_input_fn(input_fn), mode
        )

    def _export_options(self) -> dict:
        return {
            "export_to_cpu": self.export_to_cpu,
            "export_to_tpu": self.export_to_tpu,
            "api_version": self.export_saved_model_api_version.value,
        }

    def _check_sliced(self, on_tpu: bool) -> None:
        sliced = self._config.tpu_config.eval_training_input_configuration == InputPipelineConfig.SLICED
        if sliced and not on_tpu:
            raise ValueError(
                "Invalid TPUConfig `eval_training_input_configuration` value. SLICED mode only works "
                "on use_tpu = True."
            )

    def _train_steps(self, steps: float | None, max_steps: float | None) -> tuple[int | None, int | None]:
        if not self._use_tpu:  # the original's CPU path stopped at the first step >= the number: 13 for 12.3
            return super()._train_steps(steps, max_steps)
        if steps is None and max_steps is None:
            raise ValueError(
                "For TPU training, one of `steps` or `max_steps` must be set. Cannot be both `None`."
            )
        if steps is not None:
            steps = check_positive_integer(steps, "Train steps")
        if max_steps is not None:
            max_steps = check_positive_integer(max_steps, "Train max_steps")
        return steps, max_steps

    def _eval_steps(self, steps: float | None) -> int | None:
        if steps is not None and self._use_tpu and self._eval_on_tpu:
            return check_positive_integer(steps, "Eval steps")
        return super()._eval_steps(steps)

    def _eval_loop_steps(self, steps: int | None) -> int | None:
        # On a TPU, _SetEvalIterationsHook set the loop's trip count to `steps`: one loop of N steps.
        return steps if self._use_tpu and self._eval_on_tpu else None

    def _check_evaluate(self) -> None:
        on_tpu = self._use_tpu and self._eval_on_tpu
        if on_tpu and self._batch_sizes["eval_batch_size"] is None:
            raise ValueError(
                "eval_batch_size in TPUEstimator constructor cannot be `None` if .evaluate is "
                "running on TPU."
            )
        self._check_sliced(on_tpu)

    def _check_predict(self) -> None:
        if self._use_tpu and self._batch_sizes["predict_batch_size"] is None:
            raise ValueError(
                "predict_batch_size in TPUEstimator constructor cannot be `None` if .predict is "
                "running on TPU."
            )
        self._check_sliced(self._use_tpu)

    def _check_export(self) -> None:
        if not (self.export_to_cpu or self.export_to_tpu):
            raise ValueError("One of export_to_cpu and export_to_tpu must be true.")
