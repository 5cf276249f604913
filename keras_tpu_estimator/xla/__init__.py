"""XLA off a TPU, and the check that a `model_fn` will compile for a TPU.

`step_compilation` compiles the replica step with `jit_compile` (and honours the TF1
`global_jit_level` switch), refusing, with its `model_fn` line, an op XLA cannot compile;
`readiness` answers "will this `model_fn` compile for a TPU?" on any machine, as a
`TPUCompatibilityReport`.

Example:

```python
report = kte.EstimatorModel(model_fn, train_batch_size=8).check_tpu_compatibility(input_fn)
```
"""

from .readiness import (
    TPUCompatibilityReport,
    check_model,
    scratch_config,
    tpu_cores,
)
from .step_compilation import (
    StepCompilation,
    check_jit_compile,
    compiled_run,
    resolve_step_compilation,
)

__all__ = [
    "StepCompilation",
    "TPUCompatibilityReport",
    "check_jit_compile",
    "check_model",
    "compiled_run",
    "resolve_step_compilation",
    "scratch_config",
    "tpu_cores",
]
