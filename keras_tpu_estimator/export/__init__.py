"""SavedModel export, with the Estimator's export vocabulary.

`saved_model` writes CPU and TPU serving SavedModels from a `model_fn` in PREDICT mode;
`serving` holds the vocabulary (`ServingInputReceiver`, `build_raw_serving_input_receiver_fn`,
`PredictOutput`, ...); `inference` is TPU inference for export API V2 (a TPU partitioned
call behind server-side batching). `keras_tpu_estimator.export` is a public path.

Example:

```python
receiver_fn = kte.export.build_raw_serving_input_receiver_fn({"x": tf.zeros([1, 4])})
```
"""

from .inference import (
    BatchConfig,
    inference_on_tpu,
    model_fn_inference_on_tpu,
)
from .saved_model import (
    export_estimator_savedmodel,
    export_saved_model,
)
from .serving import (
    DEFAULT_SERVING_SIGNATURE_DEF_KEY,
    ClassificationOutput,
    ExportOutput,
    PredictOutput,
    RegressionOutput,
    ServingInputReceiver,
    SupervisedInputReceiver,
    TensorServingInputReceiver,
    build_parsing_serving_input_receiver_fn,
    build_raw_serving_input_receiver_fn,
    build_raw_supervised_input_receiver_fn,
)

__all__ = [
    "BatchConfig",
    "ClassificationOutput",
    "DEFAULT_SERVING_SIGNATURE_DEF_KEY",
    "ExportOutput",
    "PredictOutput",
    "RegressionOutput",
    "ServingInputReceiver",
    "SupervisedInputReceiver",
    "TensorServingInputReceiver",
    "build_parsing_serving_input_receiver_fn",
    "build_raw_serving_input_receiver_fn",
    "build_raw_supervised_input_receiver_fn",
    "export_estimator_savedmodel",
    "export_saved_model",
    "inference_on_tpu",
    "model_fn_inference_on_tpu",
]
