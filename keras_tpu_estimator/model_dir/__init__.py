"""What a `model_dir` holds, and how it stays whole.

Checkpoints keyed by TF1 variable names (`checkpoints`), the `.meta` beside each one
(`meta_graph`), what a scan of the directory finds and repairs after an interrupted save
(`contents`), the lock that keeps one writer per directory (`lock`), and evaluations read
back from `eval/` event files (`eval_events`). It knows nothing of specs or strategies.

Example:

```python
estimator.train(input_fn, max_steps=1)
step = checkpoint_step(tf.train.latest_checkpoint(model_dir))
assert step == 1
```
"""

from .checkpoints import (
    CheckpointKeeper,
    DamagedCheckpointError,
    WarmStartSettings,
    as_warm_start_settings,
    checkpoint_step,
    init_from_checkpoint,
    open_checkpoint,
    resolve_checkpoint_path,
    restore_checkpoint,
    write_checkpoint,
)
from .contents import (
    check_model_dir,
    checkpoints_newest_first,
    remove_leftovers,
    rewrite_state,
    scanned_checkpoints,
    set_aside_newer,
)
from .eval_events import (
    evaluations,
    read_eval_metrics,
)
from .lock import (
    ModelDirLock,
)
from .meta_graph import (
    meta_graph_bytes,
)

__all__ = [
    "CheckpointKeeper",
    "DamagedCheckpointError",
    "ModelDirLock",
    "WarmStartSettings",
    "as_warm_start_settings",
    "check_model_dir",
    "checkpoint_step",
    "checkpoints_newest_first",
    "evaluations",
    "init_from_checkpoint",
    "meta_graph_bytes",
    "open_checkpoint",
    "read_eval_metrics",
    "remove_leftovers",
    "resolve_checkpoint_path",
    "restore_checkpoint",
    "rewrite_state",
    "scanned_checkpoints",
    "set_aside_newer",
    "write_checkpoint",
]
