"""`tf.compat.v1.estimator.export`: serving input receivers and export outputs.

Example:

```python
from keras_tpu_estimator import estimator as tf_estimator

def serving_input_receiver_fn():
    x = tf.compat.v1.placeholder(tf.float32, [None, 4])
    return tf_estimator.export.ServingInputReceiver({"x": x}, {"x": x})

export_outputs = {"serving_default": tf_estimator.export.PredictOutput({"y": y})}
```
"""

from keras_tpu_estimator.export import (
    ClassificationOutput,
    ExportOutput,
    PredictOutput,
    RegressionOutput,
    ServingInputReceiver,
    TensorServingInputReceiver,
    build_parsing_serving_input_receiver_fn,
    build_raw_serving_input_receiver_fn,
)

__all__ = [
    "ClassificationOutput",
    "ExportOutput",
    "PredictOutput",
    "RegressionOutput",
    "ServingInputReceiver",
    "TensorServingInputReceiver",
    "build_parsing_serving_input_receiver_fn",
    "build_raw_serving_input_receiver_fn",
]
