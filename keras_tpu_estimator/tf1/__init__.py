"""TODO tf1."""

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
from .saver import (
    ScaffoldSession,
    TracedSaver,
    run_local_init_op,
    run_scaffold_initialisers,
    traced_saver_of,
)
from .step_tensors import (
    StepTensors,
    TracedWithoutError,
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
