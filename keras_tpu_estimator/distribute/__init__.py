"""TODO distribute."""

from .strategy import (
    TPUContext,
    any_worker,
    cpu_path_replicas,
    is_chief,
    num_workers,
    per_replica_batch_size,
    resolve_strategy,
    use_cpu_replicas,
)
from .worker_errors import (
    sharing_worker_errors,
)

__all__ = [
    "TPUContext",
    "any_worker",
    "cpu_path_replicas",
    "is_chief",
    "num_workers",
    "per_replica_batch_size",
    "resolve_strategy",
    "sharing_worker_errors",
    "use_cpu_replicas",
]
