"""How each prediction step's outputs travel from the device loop to the caller.

Two forms, chosen per build by `PredictionPlan.at_build`:

- *Padded* (the strategy path): every batch has `params['batch_size']` rows
  per replica and a mask (`padding.py`); predictions must be batch-major with
  that static batch, and the host keeps the rows whose mask is 1.
- *As is* (the CPU path, `use_tpu=False`): `model_fn` sees each batch's real
  rows, as TPUEstimator's CPU path ran it, so a prediction that depends on
  the whole batch (a batch mean, the row count) is the original's. Each step
  sends every prediction flattened, with its shape; the host cuts the
  execution's values back into steps. Any shapes travel, as they did on the
  original's CPU path (`yield_single_examples=False` yields them unchanged).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import tensorflow as tf


def _check_types(predictions: Any) -> list[tuple[str, Any]]:
    if not isinstance(predictions, (dict, tf.Tensor)):
        raise TypeError(
            "TPUEstimatorSpec.predictions must be dict of Tensors (or one Tensor). "
            f"Received: {type(predictions).__name__}."
        )
    items = list(predictions.items()) if isinstance(predictions, dict) else [("predictions", predictions)]
    for key, tensor in items:
        if not isinstance(tensor, tf.Tensor):
            raise TypeError(
                f"TPUEstimatorSpec.predictions[{key!r}] must be a Tensor. Received: "
                f"{type(tensor).__name__}."
            )
    return items


def _check_static_batch(items: list[tuple[str, Any]], rows: int) -> None:
    for key, tensor in items:
        if tensor.shape.rank != 0 and tensor.shape[0] is None:
            raise ValueError(
                f"The tensor with key ({key}) in TPUEstimatorSpec.predictions has dynamic shape "
                f"(should be static). Tensor: {tensor}. Predictions must be batch-major with "
                f"the static batch of params['batch_size'] ({rows})."
            )
        if tensor.shape.rank != 0 and tensor.shape[0] != rows:
            raise ValueError(
                f"Batch length of predictions should be same. {key} has different batch length "
                f"than others. Its shape is {tensor.shape}; params['batch_size'] is {rows}."
            )
        if tensor.shape.rank == 0:
            raise ValueError(
                f"The tensor with key ({key}) in TPUEstimatorSpec.predictions must be "
                f"batch-major with a static first dimension of params['batch_size'] "
                f"({rows}). Received shape {tensor.shape}."
            )


def batch_length(batch: dict) -> int:
    """The rows of one batch of predictions, checked as `Estimator.predict` checked them.

    Every prediction's first dimension must be the same: the original's
    `ValueError` otherwise, and its `IndexError` for a prediction without one.
    """
    length = None
    for key, value in batch.items():
        if np.ndim(value) == 0:
            raise IndexError(
                f"tuple index out of range: the prediction {key!r} has no batch dimension (shape "
                "()), so it cannot be split into examples. Return batch-major predictions, or "
                "pass yield_single_examples=False."
            )
        length = length or value.shape[0]
        if value.shape[0] != length:
            raise ValueError(
                f"Batch length of predictions should be same. {key} has different batch length than others."
            )
    return length or 0


@dataclasses.dataclass(frozen=True)
class PredictionPlan:
    """How one build's predictions reach the host (see the module docstring).

    Attributes:
        specs: `tf.TensorSpec`s of the predictions of one replica's step.
        padded: Padded batches with a mask, rather than predictions as they are.

    Example:

    ```python
    plan = PredictionPlan.at_build(spec.predictions, mask_spec)    # at build
    outputs = plan.device_outputs(spec.predictions, mask)          # in the step
    for batch in plan.steps(arrays, steps, rows):                  # on the host
        ...
    ```
    """

    specs: Any
    padded: bool

    @classmethod
    def at_build(cls, predictions: Any, mask_spec: tf.TensorSpec | None) -> PredictionPlan:
        """Checks `predictions` (traced at build); padded when the batch carries a mask."""
        items = _check_types(predictions)
        if mask_spec is not None:
            _check_static_batch(items, mask_spec.shape[0])
        specs = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), predictions)
        return cls(specs, mask_spec is not None)

    def output_spec(self, mask_spec: tf.TensorSpec | None) -> tuple:
        """The device loop's per-step output specs (concatenated along the first axis)."""
        if self.padded:
            return self.specs, mask_spec
        flat = tf.nest.map_structure(lambda s: tf.TensorSpec([None], s.dtype), self.specs)
        shapes = tf.nest.map_structure(lambda s: tf.TensorSpec([s.shape.rank], tf.int32), self.specs)
        return flat, shapes

    def device_outputs(self, predictions: Any, mask: tf.Tensor | None) -> tuple:
        """One step's outputs: predictions and mask, or each prediction flattened and its shape."""
        if self.padded:
            return predictions, mask
        flat = tf.nest.map_structure(lambda t: tf.reshape(t, [-1]), predictions)
        shapes = tf.nest.map_structure(lambda t: tf.shape(t, out_type=tf.int32), predictions)
        return flat, shapes

    def steps(self, outputs: Any, steps: int, rows: int, first: int = 0) -> list:
        """An execution's outputs (NumPy) cut into its steps' predictions (from step `first`): real rows only.

        `rows` is a padded step's global batch.
        """
        if self.padded:
            predictions, mask = outputs
            keep = mask > 0.5
            return [_real_rows(predictions, keep, slice(i * rows, (i + 1) * rows)) for i in range(first, steps)]
        flat, shapes = outputs
        leaves = []
        for values, shape, spec in zip(
            tf.nest.flatten(flat), tf.nest.flatten(shapes), tf.nest.flatten(self.specs), strict=True
        ):
            shape = shape.reshape(steps, spec.shape.rank)
            ends = np.cumsum(np.prod(shape, axis=1, dtype=np.int64))
            starts = np.concatenate([[0], ends[:-1]])
            leaves.append([values[starts[i]:ends[i]].reshape(shape[i]) for i in range(first, steps)])
        if not leaves:  # no predictions at all: an empty structure per step
            return [tf.nest.pack_sequence_as(self.specs, [])] * (steps - first)
        return [tf.nest.pack_sequence_as(self.specs, list(step)) for step in zip(*leaves, strict=True)]

    def rows_of(self, outputs: Any, steps: int) -> Any:
        """An execution's outputs (NumPy) as one batch: its steps' real rows, concatenated."""
        if self.padded:
            predictions, mask = outputs
            return _real_rows(predictions, mask > 0.5, slice(None))
        flat, shapes = outputs

        def joined(values: np.ndarray, shape: np.ndarray, spec: tf.TensorSpec, path: str) -> np.ndarray:
            shape = shape.reshape(steps, spec.shape.rank)
            if spec.shape.rank == 0 or (shape[:, 1:] != shape[:1, 1:]).any():
                raise ValueError(
                    f"The prediction {path} cannot be concatenated across batches: its shapes are "
                    f"{sorted({tuple(s) for s in shape.tolist()})}. predict() joins batches along "
                    "the first axis; return batch-major predictions, or use predict_batches()."
                )
            return values.reshape([-1, *shape[0, 1:]])

        paths = [str(p) for p, _ in _paths(self.specs)]
        leaves = [
            joined(v, s, spec, path)
            for v, s, spec, path in zip(
                tf.nest.flatten(flat), tf.nest.flatten(shapes), tf.nest.flatten(self.specs), paths, strict=True
            )
        ]
        return tf.nest.pack_sequence_as(self.specs, leaves)

    def empty(self) -> Any:
        """The result of a prediction over no rows: zero rows of each prediction."""
        return tf.nest.map_structure(
            lambda s: np.zeros([0] + [d or 0 for d in s.shape[1:]], s.dtype.as_numpy_dtype), self.specs
        )


def _paths(specs: Any) -> list[tuple[str, Any]]:
    if isinstance(specs, dict):
        return [(repr(key), value) for key, value in sorted(specs.items())]
    return [("predictions", specs)]


def _real_rows(predictions: Any, keep: np.ndarray, rows: slice) -> Any:
    """The rows `rows` of every prediction, without the padded ones (`keep` False)."""
    keep = keep[rows]
    if keep.all():
        return tf.nest.map_structure(lambda t: t[rows], predictions)
    return tf.nest.map_structure(lambda t: t[rows][keep], predictions)
