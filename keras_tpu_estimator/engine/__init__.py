"""The engine: a `model_fn` turned into replica steps, steps into executions, executions into a run.

`runner.ModelFnRunner` builds each mode once (through `invoke.invoke_model_fn`, the one path
every caller of a `model_fn` shares) and turns it into a replica step; `loop` runs up to
`iterations_per_loop` steps in one `tf.function` call; `driver.ExecutionDriver` sizes and
runs the executions and says why a run stopped; `preemption` stops cleanly on SIGTERM/SIGINT;
`nan_errors` are the NaN/Inf errors training raises; `graph_mode` runs the facade's calls
eagerly in programs that switched TensorFlow to graph mode.
"""

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
