"""The input job: calling `input_fn` as TPUEstimator did, and feeding the replicas.

`input_fn` calls `input_fn(params)` with `params['batch_size']` and splits what it returns
into features and labels; `graph_input` runs an `input_fn` that returns tensors in its own
graph; `batch_plan` holds one mode's batch sizes (global, per replica, per pipeline);
`deployment` decides how the strategy path feeds its replicas (per host, per replica,
broadcast); `padding` pads the last batch to full static shape and says which rows are real.
"""

from .batch_plan import (
    BatchPlan,
)
from .deployment import (
    deploy_input,
)
from .input_fn import (
    array_dataset,
    batch_tensor,
    call_input_fn,
    check_batch_rows,
    keras_input,
    per_replica_spec,
    placeholders,
    refuse_keras_arguments,
    static_batch_size,
)
from .padding import (
    mask_scope,
    pad_batches,
    padding_mask,
    unpack,
)
from .preparation import (
    PreparedInput,
    prepare_input,
)

__all__ = [
    "PreparedInput",
    "prepare_input",
    "BatchPlan",
    "array_dataset",
    "batch_tensor",
    "call_input_fn",
    "check_batch_rows",
    "deploy_input",
    "keras_input",
    "mask_scope",
    "pad_batches",
    "padding_mask",
    "per_replica_spec",
    "placeholders",
    "refuse_keras_arguments",
    "static_batch_size",
    "unpack",
]
