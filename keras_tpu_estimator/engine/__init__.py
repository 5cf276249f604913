"""TODO engine."""

from .driver import (
    ExecutionDriver,
    checked_variables,
)
from .graph_mode import (
    GRAPH_MODE_KERAS_FACE,
    eager_call,
    eager_generator,
)
from .invoke import (
    call_scaffold_fn,
    invoke_model_fn,
)
from .loop import (
    make_loop_function,
)
from .nan_errors import (
    NanLossError,
)
from .preemption import (
    StopRequests,
)
from .runner import (
    ModelFnRunner,
)

__all__ = [
    "ExecutionDriver",
    "GRAPH_MODE_KERAS_FACE",
    "ModelFnRunner",
    "NanLossError",
    "StopRequests",
    "call_scaffold_fn",
    "checked_variables",
    "eager_call",
    "eager_generator",
    "invoke_model_fn",
    "make_loop_function",
]
