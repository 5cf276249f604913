"""`BatchPlan`: one mode's batch size in one vocabulary, validated where it enters.

TPUEstimator spoke of three sizes for one batch: the *global* batch
(`train_batch_size`), the *per-replica* batch (`params['batch_size']` on a
TPU, what `model_fn` and each replica see) and the rows each *input
pipeline* produces per step (one per host with `PER_HOST_V2`: per-replica
rows for each of the host's replicas). A `BatchPlan` holds the global size
and the replica layout, and derives the others; the size is checked once,
when the plan is made, and its divisibility by the replicas when the mode
runs (as the original did: a mode that never runs is never checked).

Example:

```python
BatchPlan("train", 64)                     # checks 64 is a positive integer (at construction)
plan = BatchPlan("train", 64, replicas=4)  # also checks 64 divides by 4 (when the mode runs)
assert plan.per_replica == 16              # params['batch_size']
input_context = tf.distribute.InputContext(num_input_pipelines=2, num_replicas_in_sync=4)
assert plan.replicas_per_pipeline(input_context) == 2   # replicas one input pipeline feeds
```
"""

from __future__ import annotations

import dataclasses
from typing import Any

from keras_tpu_estimator.distribute import per_replica_batch_size

BATCH_ARG = {"train": "train_batch_size", "eval": "eval_batch_size", "infer": "predict_batch_size"}
"""The constructor argument that sets each mode's global batch (named in errors)."""


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """A mode's global batch and the replicas it is split over.

    Args:
        mode: The `ModeKeys` value.
        global_size: The global batch, or None while unknown (an `input_fn`
            that batches itself on the CPU path of EVAL).
        replicas: Replicas the batch is split over (1: only the size is checked).
    """

    mode: str
    global_size: int | None
    replicas: int = 1

    def __post_init__(self) -> None:
        if self.global_size is not None:
            per_replica_batch_size(self.global_size, self.replicas, self.argument)

    @property
    def argument(self) -> str:
        """The constructor argument of this mode's batch (`train_batch_size`, ...)."""
        return BATCH_ARG[self.mode]

    @property
    def per_replica(self) -> int | None:
        """`params['batch_size']`: the rows each replica sees per step."""
        return None if self.global_size is None else self.global_size // self.replicas

    def replicas_per_pipeline(self, input_context: Any) -> int:
        """Replicas one input pipeline feeds (1 without an `InputContext`)."""
        if input_context is None:
            return 1
        return input_context.num_replicas_in_sync // input_context.num_input_pipelines
