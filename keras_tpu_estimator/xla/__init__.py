"""TODO xla."""

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
