"""`tf.compat.v1.estimator.tpu` (and `tf.contrib.tpu`): the TPUEstimator classes.

Example:

```python
from keras_tpu_estimator import estimator as tf_estimator

estimator = tf_estimator.tpu.TPUEstimator(
    model_fn, config=tf_estimator.tpu.RunConfig(model_dir=model_dir), train_batch_size=8)
```

TF 1.x programs that wrote `tf.contrib.tpu.TPUEstimator` and
`tf.contrib.tpu.CrossShardOptimizer` can use this module for `tf.contrib.tpu`
(`contrib_tpu = keras_tpu_estimator.estimator.tpu`): names it does not define
(`CrossShardOptimizer`, `bfloat16_scope`, `cross_replica_sum`, ...) come from
`tf.compat.v1.tpu`.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from keras_tpu_estimator.contract import InputPipelineConfig, RunConfig, TPUConfig, TPUEstimatorSpec
from keras_tpu_estimator.estimator.tpu import experimental
from keras_tpu_estimator.export import BatchConfig
from keras_tpu_estimator.facade import ExportSavedModelApiVersion, TPUEstimator

__all__ = [
    "BatchConfig",
    "ExportSavedModelApiVersion",
    "InputPipelineConfig",
    "RunConfig",
    "TPUConfig",
    "TPUEstimator",
    "TPUEstimatorSpec",
    "experimental",
]


def __getattr__(name: str) -> Any:
    try:
        return getattr(tf.compat.v1.tpu, name)
    except AttributeError:
        raise AttributeError(
            f"Neither keras_tpu_estimator.estimator.tpu nor tf.compat.v1.tpu has {name!r}."
        ) from None
