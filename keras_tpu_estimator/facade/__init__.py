"""The facade: `TPUEstimator`, `Estimator` and `train_and_evaluate`, with their old signatures.

`estimator.Estimator` and its subclass `tpu_estimator.TPUEstimator` (constructor checks in
`args`) share their call bodies (`calls`): each call makes a fresh `EstimatorModel`, restores
and runs it with callbacks. `train_and_evaluate` with its `exporters`, `early_stopping` and
`nested_evaluation` drive the facade through its public methods only.

Example:

```python
estimator = kte.TPUEstimator(model_fn, config=kte.RunConfig(model_dir=model_dir), train_batch_size=8)
estimator.train(input_fn, max_steps=2)
```
"""

from .args import (
    ExportSavedModelApiVersion,
    check_estimator_arguments,
)
from .calls import (
    mode_strategy,
)
from .early_stopping import (
    InMemoryEvaluatorHook,
    make_early_stopping_hook,
    make_stop_at_checkpoint_step_hook,
    stop_if_higher_hook,
    stop_if_lower_hook,
    stop_if_no_decrease_hook,
    stop_if_no_increase_hook,
)
from .estimator import (
    Estimator,
)
from .exporters import (
    BestExporter,
    Exporter,
    FinalExporter,
    LatestExporter,
)
from .tpu_estimator import (
    TPUEstimator,
)
from .training import (
    EvalSpec,
    TrainSpec,
    train_and_evaluate,
)

__all__ = [
    "BestExporter",
    "Estimator",
    "EvalSpec",
    "ExportSavedModelApiVersion",
    "Exporter",
    "FinalExporter",
    "InMemoryEvaluatorHook",
    "LatestExporter",
    "TPUEstimator",
    "TrainSpec",
    "check_estimator_arguments",
    "make_early_stopping_hook",
    "make_stop_at_checkpoint_step_hook",
    "mode_strategy",
    "stop_if_higher_hook",
    "stop_if_lower_hook",
    "stop_if_no_decrease_hook",
    "stop_if_no_increase_hook",
    "train_and_evaluate",
]
