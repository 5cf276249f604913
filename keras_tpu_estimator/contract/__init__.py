"""What programs write against: the words of a `model_fn` and its configuration.

`ModeKeys`, `TPUEstimatorSpec` and `EstimatorSpec` (with the checks the original made on
them) are what a `model_fn(features, labels, mode, params)` returns; `RunConfig`,
`TPUConfig` and `InputPipelineConfig` are how a program sizes its loops; `TF_CONFIG` is
read as the Estimator read it. This wing imports nothing else of the package.

Example:

```python
loss = tf.constant(0.5)   # in a model_fn: the loss and the train_op it builds
train_op = tf.no_op()
spec = TPUEstimatorSpec(mode=ModeKeys.TRAIN, loss=loss, train_op=train_op)
config = RunConfig(model_dir=model_dir, tpu_config=TPUConfig(iterations_per_loop=100))
```
"""

from .config import (
    InputPipelineConfig,
    IterationsPerLoop,
    RunConfig,
    TPUConfig,
    check_supported,
    parse_iterations_per_loop,
)
from .counts import (
    check_positive_int,
    check_positive_integer,
    index_count,
    plain_count,
    whole_count,
)
from .spec import (
    AnySpec,
    EstimatorSpec,
    InputFn,
    ModeKeys,
    ModelFn,
    TPUEstimatorSpec,
    check_hooks,
    check_model_fn,
    check_params,
    check_spec,
    function_args,
    verify_model_fn_args,
)

__all__ = [
    "AnySpec",
    "EstimatorSpec",
    "InputFn",
    "InputPipelineConfig",
    "IterationsPerLoop",
    "ModeKeys",
    "ModelFn",
    "RunConfig",
    "TPUConfig",
    "TPUEstimatorSpec",
    "check_hooks",
    "check_model_fn",
    "check_params",
    "check_positive_int",
    "check_positive_integer",
    "check_spec",
    "check_supported",
    "function_args",
    "index_count",
    "parse_iterations_per_loop",
    "plain_count",
    "verify_model_fn_args",
    "whole_count",
]
