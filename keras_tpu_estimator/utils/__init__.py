"""Small tools every wing may use: the package's logger, per-thread containers, user source lines.

- `logs`: one logger hierarchy, `keras_tpu_estimator.*`, under TensorFlow's logger, so
  `tf.compat.v1.logging.set_verbosity(INFO)` shows the step lines TPUEstimator printed.
- `per_thread`: values that belong to the thread that set them (a build, a host thread).
- `source_lines`: the `model_fn` line that made an op, for errors and reports.

Nothing here knows TPUEstimator; every other wing may import it.
"""

from .logs import (
    get_logger,
)
from .per_thread import (
    PerThreadCounts,
    PerThreadList,
)
from .source_lines import (
    user_line,
)

__all__ = [
    "PerThreadCounts",
    "PerThreadList",
    "get_logger",
    "user_line",
]
