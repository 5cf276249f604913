"""Which `tf.distribute` strategy runs a model, and the batch arithmetic over its replicas.

`resolve_strategy` picks the strategy of a run (`TPUStrategy`, `MirroredStrategy`,
`MultiWorkerMirroredStrategy` or the default one); `TPUContext` is the `params['context']`
an `input_fn` reads; ``RunPath` is the CPU path or the strategy path, decided once where a model is made,
with everything that follows from it; `worker_errors` makes the error that ended one worker end the others.

Example:

```python
strategy = resolve_strategy(use_tpu=False)   # the CPU path: the default strategy
```
"""

from .run_path import (
    RunPath,
)
from .strategy import (
    TPUContext,
    any_worker,
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
    "RunPath",
    "TPUContext",
    "any_worker",
    "is_chief",
    "num_workers",
    "per_replica_batch_size",
    "resolve_strategy",
    "sharing_worker_errors",
    "use_cpu_replicas",
]
