"""keras_tpu_estimator: run TPUEstimator `model_fn`s in Keras 3 under `tf.distribute`.

Example:

```python
import keras_tpu_estimator as kte

model = kte.EstimatorModel(model_fn, params={}, train_batch_size=8)
model.fit(input_fn, callbacks=[kte.StopAtStep(steps=2)])

estimator = kte.TPUEstimator(model_fn, config=kte.RunConfig(model_dir=model_dir),
                             train_batch_size=8)
estimator.train(input_fn, max_steps=2)
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
    SessionRunHookCallback,
    StepLogger,
    StepSummaries,
    StopAtStep,
)
from keras_tpu_estimator.contract import (
    EstimatorSpec,
    InputPipelineConfig,
    IterationsPerLoop,
    ModeKeys,
    RunConfig,
    TPUConfig,
    TPUEstimatorSpec,
    parse_iterations_per_loop,
)
from keras_tpu_estimator.distribute import TPUContext, resolve_strategy, use_cpu_replicas
from keras_tpu_estimator.export import (
    BatchConfig,
    export_estimator_savedmodel,
    inference_on_tpu,
    model_fn_inference_on_tpu,
)
from keras_tpu_estimator.facade import Estimator, ExportSavedModelApiVersion, TPUEstimator
from keras_tpu_estimator.inputs import padding_mask
from keras_tpu_estimator.migration import install, installed
from keras_tpu_estimator.model import EstimatorModel
from keras_tpu_estimator.model_dir import WarmStartSettings, checkpoint_step
from keras_tpu_estimator.tf1 import (
    NewVariableAfterBuildError,
    UnsupportedInModelFnError,
    legacy_layers,
)
from keras_tpu_estimator.xla import TPUCompatibilityReport

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
