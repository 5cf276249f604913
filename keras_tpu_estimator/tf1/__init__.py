"""Running TF1 model code inside a traced Keras step.

`model_fn`s call `tf.compat.v1.get_variable`, layers, `Saver`s, summaries, metrics and
`SyncReplicasOptimizer`: `legacy` is the scope that gives those calls their TF1 meaning,
`variables` the store of TF1-named variables a Keras model owns, `saver` which checkpoint
name restores which variable, `summaries` and `metric_ops` the in-step summaries and
metrics, `fetches` TF1's "a step runs only what its fetches need", `step_tensors` the
tensors session hooks fetch, `cross_replica` synchronous replicas, and `optimizer_view`
`model.optimizer` when `model_fn` trains with its own `train_op`.

Example:

```python
with tf.Graph().as_default(), model_fn_scope():
    spec = model_fn({"x": tf.zeros([4, 4])}, tf.zeros([4, 1]), kte.ModeKeys.TRAIN, {})
```
"""

from .cross_replica import (
    synchronized_gradients,
)
from .fetches import (
    always_increments,
    run_fetched,
)
from .legacy import (
    UnsupportedInModelFnError,
    legacy_layers,
    model_fn_scope,
    per_replica_collections,
    summary_names,
)
from .metric_ops import (
    StepMetrics,
)
from .optimizer_view import (
    check_learning_rate_callbacks,
    train_op_optimizer,
)
from .saver import TracedSaver, traced_saver_of
from .scaffold import ScaffoldSession, run_local_init_op, run_scaffold_initialisers
from .step_tensors import (
    StepTensors,
    TracedWithoutError,
    built_hook_tensors,
)
from .summaries import (
    SPEC,
    TF1Summaries,
)
from .variables import (
    NewVariableAfterBuildError,
    VariableStore,
)

__all__ = [
    "NewVariableAfterBuildError",
    "SPEC",
    "ScaffoldSession",
    "StepMetrics",
    "StepTensors",
    "built_hook_tensors",
    "TF1Summaries",
    "TracedSaver",
    "TracedWithoutError",
    "UnsupportedInModelFnError",
    "VariableStore",
    "always_increments",
    "check_learning_rate_callbacks",
    "legacy_layers",
    "model_fn_scope",
    "per_replica_collections",
    "run_fetched",
    "run_local_init_op",
    "run_scaffold_initialisers",
    "summary_names",
    "synchronized_gradients",
    "traced_saver_of",
    "train_op_optimizer",
]
