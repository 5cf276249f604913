"""`keras_tpu_estimator.tpu_estimator`: the old import path of `TPUEstimator` and its companions.

The class lives in the facade wing (`facade/tpu_estimator.py`); this path stays for programs
that import it, as they imported `tensorflow_estimator...tpu.tpu_estimator` (which
`install()` points here).
"""

from keras_tpu_estimator.contract import InputPipelineConfig, ModeKeys, RunConfig, TPUEstimatorSpec
from keras_tpu_estimator.export import (
    BatchConfig,
    export_estimator_savedmodel,
    inference_on_tpu,
    model_fn_inference_on_tpu,
)
from keras_tpu_estimator.facade import ExportSavedModelApiVersion, TPUEstimator
from keras_tpu_estimator.model import EstimatorModel
from keras_tpu_estimator.model_dir import WarmStartSettings
from keras_tpu_estimator.xla import TPUCompatibilityReport

__all__ = [
    "BatchConfig",
    "EstimatorModel",
    "ExportSavedModelApiVersion",
    "InputPipelineConfig",
    "ModeKeys",
    "RunConfig",
    "TPUCompatibilityReport",
    "TPUEstimator",
    "TPUEstimatorSpec",
    "WarmStartSettings",
    "export_estimator_savedmodel",
    "inference_on_tpu",
    "model_fn_inference_on_tpu",
]
