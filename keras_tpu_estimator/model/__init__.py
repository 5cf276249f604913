"""`EstimatorModel`: a Keras 3 model whose train, test and predict steps call a `model_fn`.

`estimator_model` is the model and its build; `trainer` is its `fit`, `evaluate` and
`predict`; `keras_methods` the inherited `keras.Model` methods with an estimator meaning (`summary_table`
writes `summary()`'s table);
`batch_methods` Keras' single-batch methods. `keras_tpu_estimator.model` is a public path.

Example:

```python
model = EstimatorModel(model_fn, params={}, train_batch_size=8)
model.fit(input_fn, callbacks=[kte.StopAtStep(steps=2)])
```
"""

from .batch_methods import (
    SingleBatchMethods,
)
from .estimator_model import (
    EstimatorModel,
    check_tpu_compatibility,
)
from .keras_methods import (
    KerasMethods,
)
from .trainer import (
    EstimatorTrainer,
)

__all__ = [
    "EstimatorModel",
    "EstimatorTrainer",
    "KerasMethods",
    "SingleBatchMethods",
    "check_tpu_compatibility",
]
