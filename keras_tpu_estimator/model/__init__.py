"""`EstimatorModel`: a Keras 3 model whose train, test and predict steps call a `model_fn`.

`estimator_model` is the model and its build; `trainer` is its `fit`, `evaluate` and
`predict`; `keras_methods` the inherited `keras.Model` methods with an estimator meaning;
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
    GRAPH_MODE_KERAS_FACE,
    Any,
    Callable,
    EstimatorModel,
    ExecutionDriver,
    ModeKeys,
    ModelFn,
    ModelFnRunner,
    RunConfig,
    Sequence,
    StepCompilation,
    TPUCompatibilityReport,
    check_jit_compile,
    check_model,
    check_model_fn,
    check_supported,
    check_tpu_compatibility,
    checked_variables,
    get_logger,
    make_loop_function,
    num_workers,
    per_replica_collections,
    plain_count,
    resolve_step_compilation,
    resolve_strategy,
    scratch_config,
    tpu_cores,
)
from .keras_methods import (
    KerasMethods,
)
from .trainer import (
    EstimatorTrainer,
)

__all__ = [
    "Any",
    "Callable",
    "EstimatorModel",
    "EstimatorTrainer",
    "ExecutionDriver",
    "GRAPH_MODE_KERAS_FACE",
    "KerasMethods",
    "ModeKeys",
    "ModelFn",
    "ModelFnRunner",
    "RunConfig",
    "Sequence",
    "SingleBatchMethods",
    "StepCompilation",
    "TPUCompatibilityReport",
    "check_jit_compile",
    "check_model",
    "check_model_fn",
    "check_supported",
    "check_tpu_compatibility",
    "checked_variables",
    "get_logger",
    "make_loop_function",
    "num_workers",
    "per_replica_collections",
    "plain_count",
    "resolve_step_compilation",
    "resolve_strategy",
    "scratch_config",
    "tpu_cores",
]
