"""Keras callbacks that do what TPUEstimator's session hooks did.

`keras_callbacks` holds the ones users add (`CheckpointSaver`, `StepLogger`,
`StepSummaries`, `StopAtStep`, `SavedModelExporter`); `session_hooks` runs
`tf.compat.v1.train.SessionRunHook`s as callbacks, once per execution, against the TF1
graph of `hook_graph`; `profiler` takes the traces a `ProfilerHook` asks for; `restore`
restores or warm-starts before a call. `keras_tpu_estimator.callbacks` is a public path.

Example:

```python
model.fit(input_fn, callbacks=[StopAtStep(steps=2), CheckpointSaver(model_dir, save_steps=1)])
```
"""

from .hook_graph import (
    hook_session,
)
from .keras_callbacks import (
    CheckpointSaver,
    SavedModelExporter,
    StepLogger,
    StepSummaries,
    StopAtStep,
)
from .restore import (
    RestoreOrWarmStart,
)
from .session_hooks import (
    SessionRunHookCallback,
    as_callback,
)

__all__ = [
    "CheckpointSaver",
    "RestoreOrWarmStart",
    "SavedModelExporter",
    "SessionRunHookCallback",
    "StepLogger",
    "StepSummaries",
    "StopAtStep",
    "as_callback",
    "hook_session",
]
