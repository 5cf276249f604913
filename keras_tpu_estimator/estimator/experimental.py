"""`tf.compat.v1.estimator.experimental`, as far as TPUEstimator programs use it.

Example:

```python
from keras_tpu_estimator import estimator as tf_estimator

receiver_fn = tf_estimator.experimental.build_raw_supervised_input_receiver_fn(
    {"x": tf.TensorSpec([None, 4], tf.float32)}, tf.TensorSpec([None, 1], tf.float32))
estimator.export_saved_model("/tmp/export", receiver_fn, experimental_mode=tf_estimator.ModeKeys.EVAL)
```
"""

from keras_tpu_estimator.serving import build_raw_supervised_input_receiver_fn

__all__ = ["build_raw_supervised_input_receiver_fn"]


def __getattr__(name: str) -> None:
    raise AttributeError(
        f"tf.estimator.experimental.{name} is not provided by keras_tpu_estimator: of this namespace, "
        "TPUEstimator programs use build_raw_supervised_input_receiver_fn. For early stopping, use "
        "keras.callbacks.EarlyStopping with EstimatorModel.fit."
    )
