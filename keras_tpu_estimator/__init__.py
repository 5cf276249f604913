"""keras_tpu_estimator: run TPUEstimator `model_fn`s in Keras 3 under `tf.distribute`.

Example:

```python
import keras_tpu_estimator as kte

model = kte.EstimatorModel(model_fn, params={}, train_batch_size=64)
model.fit(input_fn, callbacks=[kte.StopAtStep(steps=1000)])

estimator = kte.TPUEstimator(model_fn, config=kte.RunConfig(model_dir="/tmp/m"),
                             train_batch_size=64)
estimator.train(input_fn, max_steps=1000)
```

An unchanged old program: `python -m keras_tpu_estimator script.py ARGS...` (see `install`).
"""

from keras_tpu_estimator.versions import require_tensorflow

require_tensorflow()  # before anything imports it: say which TensorFlow to install

from keras_tpu_estimator import (
    _compat,
    estimator,  # the tf.compat.v1.estimator namespace
    export,
)
from keras_tpu_estimator.callbacks import (
    CheckpointSaver,
    SavedModelExporter,
    StepLogger,
    StepSummaries,
    StopAtStep,
)
from keras_tpu_estimator.checkpoints import WarmStartSettings, checkpoint_step
from keras_tpu_estimator.config import (
    InputPipelineConfig,
    IterationsPerLoop,
    RunConfig,
    TPUConfig,
    parse_iterations_per_loop,
)
from keras_tpu_estimator.install import install, installed
from keras_tpu_estimator.legacy import UnsupportedInModelFnError, legacy_layers
from keras_tpu_estimator.model import EstimatorModel
from keras_tpu_estimator.padding import padding_mask
from keras_tpu_estimator.plain_estimator import Estimator
from keras_tpu_estimator.session_hooks import SessionRunHookCallback
from keras_tpu_estimator.spec import EstimatorSpec, ModeKeys, TPUEstimatorSpec
from keras_tpu_estimator.strategy import TPUContext, resolve_strategy, use_cpu_replicas
from keras_tpu_estimator.tpu_estimator import (
    BatchConfig,
    ExportSavedModelApiVersion,
    TPUEstimator,
    export_estimator_savedmodel,
    inference_on_tpu,
    model_fn_inference_on_tpu,
)
from keras_tpu_estimator.tpu_readiness import TPUCompatibilityReport
from keras_tpu_estimator.variables import NewVariableAfterBuildError

_compat.check_versions()

__version__ = "0.1.0"

__all__ = [
    "BatchConfig",
    "CheckpointSaver",
    "Estimator",
    "EstimatorModel",
    "EstimatorSpec",
    "ExportSavedModelApiVersion",
    "InputPipelineConfig",
    "IterationsPerLoop",
    "ModeKeys",
    "NewVariableAfterBuildError",
    "RunConfig",
    "SavedModelExporter",
    "SessionRunHookCallback",
    "StepLogger",
    "StepSummaries",
    "StopAtStep",
    "TPUCompatibilityReport",
    "TPUConfig",
    "TPUContext",
    "TPUEstimator",
    "TPUEstimatorSpec",
    "UnsupportedInModelFnError",
    "WarmStartSettings",
    "checkpoint_step",
    "estimator",
    "export",
    "export_estimator_savedmodel",
    "inference_on_tpu",
    "install",
    "installed",
    "legacy_layers",
    "model_fn_inference_on_tpu",
    "padding_mask",
    "parse_iterations_per_loop",
    "resolve_strategy",
    "use_cpu_replicas",
]
