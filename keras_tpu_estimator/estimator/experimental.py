"""`tf.compat.v1.estimator.experimental`, as far as TPUEstimator programs use it: receivers and training hooks.

Example:

```python
from keras_tpu_estimator import estimator as tf_estimator

receiver_fn = tf_estimator.experimental.build_raw_supervised_input_receiver_fn(
    {"x": tf.TensorSpec([None, 4], tf.float32)}, tf.TensorSpec([None, 1], tf.float32))
estimator.train(input_fn, max_steps=1)
estimator.export_saved_model(os.path.join(model_dir, "export"), receiver_fn, experimental_mode=tf_estimator.ModeKeys.EVAL)
```
"""

from keras_tpu_estimator.export import build_raw_supervised_input_receiver_fn
from keras_tpu_estimator.facade import (
    InMemoryEvaluatorHook,
    make_early_stopping_hook,
    make_stop_at_checkpoint_step_hook,
    stop_if_higher_hook,
    stop_if_lower_hook,
    stop_if_no_decrease_hook,
    stop_if_no_increase_hook,
)

__all__ = [
    "InMemoryEvaluatorHook",
    "build_raw_supervised_input_receiver_fn",
    "make_early_stopping_hook",
    "make_stop_at_checkpoint_step_hook",
    "stop_if_higher_hook",
    "stop_if_lower_hook",
    "stop_if_no_decrease_hook",
    "stop_if_no_increase_hook",
]


def __getattr__(name: str) -> None:
    raise AttributeError(
        f"tf.estimator.experimental.{name} is not provided by keras_tpu_estimator: of this namespace, "
        "TPUEstimator programs use build_raw_supervised_input_receiver_fn, the early-stopping hooks "
        "(stop_if_*_hook, make_early_stopping_hook, make_stop_at_checkpoint_step_hook) and "
        "InMemoryEvaluatorHook. Canned estimators (LinearSDCA, RNNClassifier, KMeans) and logit_fn "
        "builders are not part of it."
    )
