"""`tf.compat.v1.estimator` as far as TPUEstimator programs use it: migrate with one import.

Replace the program's estimator namespace with this module and keep every
other line:

```python
from keras_tpu_estimator import estimator as tf_estimator  # was: tf_estimator = tf.compat.v1.estimator

config = tf_estimator.tpu.RunConfig(model_dir=model_dir,
                                    tpu_config=tf_estimator.tpu.TPUConfig(iterations_per_loop=100))
estimator = tf_estimator.tpu.TPUEstimator(model_fn, config=config, train_batch_size=8)
if mode == tf_estimator.ModeKeys.TRAIN: ...
```

The session-hook names (`LoggingTensorHook`, `SessionRunHook`, ...) are
TensorFlow's own `tf.compat.v1.train` classes, as in the original namespace.
`train_and_evaluate` with `TrainSpec`, `EvalSpec` and the exporters runs a
`TPUEstimator` as the original did. `Estimator` is the plain one (a
`model_fn` returning an `EstimatorSpec`). Canned estimators and heads are
not provided: an AttributeError says so.
"""

from __future__ import annotations

import tensorflow as tf

from keras_tpu_estimator.contract import EstimatorSpec, ModeKeys, RunConfig
from keras_tpu_estimator.estimator import experimental, export, tpu
from keras_tpu_estimator.facade import (
    BestExporter,
    Estimator,
    EvalSpec,
    Exporter,
    FinalExporter,
    LatestExporter,
    TrainSpec,
    train_and_evaluate,
)
from keras_tpu_estimator.model_dir import WarmStartSettings

_train = tf.compat.v1.train
CheckpointSaverHook = _train.CheckpointSaverHook
CheckpointSaverListener = _train.CheckpointSaverListener
FeedFnHook = _train.FeedFnHook
FinalOpsHook = _train.FinalOpsHook
GlobalStepWaiterHook = _train.GlobalStepWaiterHook
LoggingTensorHook = _train.LoggingTensorHook
NanLossDuringTrainingError = _train.NanLossDuringTrainingError
NanTensorHook = _train.NanTensorHook
ProfilerHook = _train.ProfilerHook
SecondOrStepTimer = _train.SecondOrStepTimer
SessionRunArgs = _train.SessionRunArgs
SessionRunContext = _train.SessionRunContext
SessionRunHook = _train.SessionRunHook
SessionRunValues = _train.SessionRunValues
StepCounterHook = _train.StepCounterHook
StopAtStepHook = _train.StopAtStepHook
SummarySaverHook = _train.SummarySaverHook

__all__ = [
    "BestExporter",
    "CheckpointSaverHook",
    "CheckpointSaverListener",
    "Estimator",
    "EstimatorSpec",
    "EvalSpec",
    "Exporter",
    "FeedFnHook",
    "FinalExporter",
    "FinalOpsHook",
    "GlobalStepWaiterHook",
    "LatestExporter",
    "LoggingTensorHook",
    "ModeKeys",
    "NanLossDuringTrainingError",
    "NanTensorHook",
    "ProfilerHook",
    "RunConfig",
    "SecondOrStepTimer",
    "SessionRunArgs",
    "SessionRunContext",
    "SessionRunHook",
    "SessionRunValues",
    "StepCounterHook",
    "StopAtStepHook",
    "SummarySaverHook",
    "TrainSpec",
    "WarmStartSettings",
    "experimental",
    "export",
    "tpu",
    "train_and_evaluate",
]


def __getattr__(name: str) -> None:
    raise AttributeError(
        f"tf.estimator.{name} is not provided by keras_tpu_estimator.estimator, which covers what "
        "Estimator and TPUEstimator programs use (Estimator, tpu.*, ModeKeys, EstimatorSpec, RunConfig, "
        "WarmStartSettings, train_and_evaluate with TrainSpec, EvalSpec and the exporters, export.* "
        "and the session-hook names). Canned estimators and heads are not part of it: write a "
        "model_fn and call Estimator or TPUEstimator.train and .evaluate, or use "
        "keras_tpu_estimator.EstimatorModel with model.fit."
    )
