"""TODO inputs."""

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

__all__ = [
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
