"""The one device-to-host transfer format: values, shapes and ranks; one cutter; one padding rule.

Host calls, `eval_metrics` and predictions leave the device loop in one of two
forms:

- **stacked**: a tensor of the same shape at every step (the strategy path's
  static batches) is stacked over an execution's steps, `[steps, ...]`;
- **ragged**: a tensor whose shape may change by step (the CPU path's
  batches, as `model_fn` made them) travels as three tensors, each concatenated
  over the steps: its values flattened, its dims, and its rank. Any shape
  travels, a rank that changes from step to step too. `RaggedSteps` is the one
  cutter that takes an execution's three arrays back apart into steps.

Padded rows (EVAL and PREDICT on the strategy path) are dropped by one rule:
a value with one row per batch row (`per_row`, known from the build's static
shapes) loses the rows whose mask is 0; any other value passes as it is.
`drop_padding` applies it to NumPy arrays, `drop_padding_in_graph` inside the
host graph's loop over steps.

Example:

```python
steps = RaggedSteps(np.arange(7), np.array([2, 3, 1]), np.array([2, 1]))
assert steps[0].shape == (2, 3) and steps[1].tolist() == [6]
```
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf


def ragged_encoding(tensor: tf.Tensor) -> list[tf.Tensor]:
    """One step's `tensor` in the ragged form (the device side): values, dims, rank."""
    return [
        tf.reshape(tensor, [-1]),
        tf.shape(tensor, out_type=tf.int32),
        tf.reshape(tf.rank(tensor), [1]),
    ]


def ragged_specs(dtype: tf.DType) -> list[tf.TensorSpec]:
    """The per-step `tf.TensorSpec`s of `ragged_encoding` (each concatenated over steps by the loop)."""
    return [tf.TensorSpec([None], dtype), tf.TensorSpec([None], tf.int32), tf.TensorSpec([1], tf.int32)]


class RaggedSteps:
    """An execution's ragged values of one tensor, cut into steps: `steps[i]` is step i's array.

    Args:
        values: Every step's values, flattened and concatenated.
        dims: Every step's dims, concatenated.
        ranks: Each step's rank.
        count: Keep the first `count` steps only (default: all).

    Example:

    ```python
    steps = RaggedSteps(np.arange(10), np.array([2, 3, 4, 1]), np.array([2, 2]))
    steps[1].tolist()   # [[6], [7], [8], [9]]
    ```
    """

    def __init__(self, values: np.ndarray, dims: np.ndarray, ranks: np.ndarray, count: int | None = None):
        self.values, self.dims, self.ranks = values, dims, ranks
        ranks = np.asarray(ranks, np.int64).reshape([-1])[:count]
        dim_ends = np.cumsum(ranks)
        self.shapes = [tuple(int(d) for d in dims[end - rank : end]) for rank, end in zip(ranks, dim_ends, strict=True)]
        sizes = [int(np.prod(shape, dtype=np.int64)) for shape in self.shapes]
        value_ends = np.cumsum(sizes, dtype=np.int64)
        self.value_bounds = np.stack([value_ends - sizes, value_ends], axis=1).reshape([-1, 2])
        self.dim_bounds = np.stack([dim_ends - ranks, dim_ends], axis=1).reshape([-1, 2])

    def __len__(self) -> int:
        return len(self.shapes)

    def __getitem__(self, index: int) -> np.ndarray:
        start, end = self.value_bounds[index]
        return self.values[int(start) : int(end)].reshape(self.shapes[index])

    def feeds(self) -> list[np.ndarray]:
        """What the host graph's loop over steps is fed for this tensor (`ragged_placeholders`)."""
        return [self.values, self.dims, self.value_bounds.astype(np.int64), self.dim_bounds.astype(np.int64)]


def ragged_placeholders(spec: tf.TensorSpec) -> tuple[list[tf.Tensor], Any]:
    """`(placeholders, step)` for a ragged tensor in a host graph: `step(index)` is step index's value.

    The placeholders take `RaggedSteps.feeds()`; the cutting is `RaggedSteps`', the graph only slices.
    """
    values = tf.compat.v1.placeholder(spec.dtype, [None])
    dims = tf.compat.v1.placeholder(tf.int32, [None])
    value_bounds = tf.compat.v1.placeholder(tf.int64, [None, 2])
    dim_bounds = tf.compat.v1.placeholder(tf.int64, [None, 2])

    def step(index: tf.Tensor) -> tf.Tensor:
        value_span, dim_span = tf.gather(value_bounds, index), tf.gather(dim_bounds, index)
        value = tf.reshape(values[value_span[0] : value_span[1]], dims[dim_span[0] : dim_span[1]])
        value.set_shape(spec.shape)
        return value

    return [values, dims, value_bounds, dim_bounds], step


def drop_padding(values: Sequence[Any], mask: np.ndarray, per_row: Sequence[bool | None] | None = None) -> list:
    """`values` without their padded rows: each per-row value keeps the rows whose `mask` is 1.

    `per_row[i]`: whether value i has one row per batch row, as the build's
    static shapes tell (`HostPart.per_row`); None (or no `per_row`) when they
    do not: then a value whose first dimension is the mask's is per-row.
    `mask` may be one step's (`[rows]`) or several steps' concatenated, as
    long as the per-row values are concatenated the same way.
    """
    keep = np.asarray(mask) > 0.5
    if keep.all():
        return list(values)
    per_row = [None] * len(values) if per_row is None else per_row
    return [
        value[keep] if (row if row is not None else value.shape[:1] == keep.shape) else value
        for value, row in zip(values, per_row, strict=True)
    ]


def drop_padding_in_graph(value: tf.Tensor, keep: tf.Tensor, per_row: bool | None) -> tf.Tensor:
    """`drop_padding`'s rule for one value inside a host graph (`keep`: the step's mask > 0.5)."""
    if per_row is not None:
        return tf.boolean_mask(value, keep) if per_row else value
    rows_match = tf.equal(tf.shape(value)[0], tf.size(keep))
    return tf.cond(rows_match, lambda: tf.boolean_mask(value, keep), lambda: value)
