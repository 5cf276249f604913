"""How each prediction step's outputs travel from the device loop to the caller.

Two forms, chosen per build by `PredictionPlan.at_build`:

- *Padded* (the strategy path): every batch has `params['batch_size']` rows
  per replica and a mask (`inputs/padding.py`); predictions must be batch-major with
  that static batch, and the host keeps the rows whose mask is 1.
- *As is* (the CPU path, `use_tpu=False`): `model_fn` sees each batch's real
  rows, as TPUEstimator's CPU path ran it, so a prediction that depends on
  the whole batch (a batch mean, the row count) is the original's. Each step
  sends every prediction in the ragged transfer format (`transfer.py`: values,
  dims, rank); the host cuts the execution's values back into steps. Any
  shapes travel, as they did on the original's CPU path
  (`yield_single_examples=False` yields them unchanged).

Padded rows are dropped by the transfer format's one rule (`transfer.drop_padding`):
every prediction is batch-major there, so each keeps its real rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from .transfer import RaggedSteps, drop_padding, ragged_encoding, ragged_specs


def _check_types(predictions: Any) -> list[tuple[str, Any]]:
    if not isinstance(predictions, (dict, tf.Tensor)):
        raise TypeError(
            "TPUEstimatorSpec.predictions must be dict of Tensors (or one Tensor). "
            f"Received: {type(predictions).__name__}."
        )
    items = list(predictions.items()) if isinstance(predictions, dict) else [("predictions", predictions)]
    for key, tensor in items:
        if not isinstance(key, str):  # the Estimator's default PredictOutput refused it
            raise ValueError(f"Prediction output key must be a string; got {key}.")
        if not isinstance(tensor, tf.Tensor):
            raise TypeError(
                f"TPUEstimatorSpec.predictions[{key!r}] must be a Tensor. Received: "
                f"{type(tensor).__name__}."
            )
    return items


def _check_static_batch(items: list[tuple[str, Any]], rows: int) -> None:
    for key, tensor in items:
        batch = tf.compat.dimension_value(tensor.shape[0]) if tensor.shape.rank else None
        if tensor.shape.rank != 0 and batch is None:
            raise ValueError(
                f"The tensor with key ({key}) in TPUEstimatorSpec.predictions has dynamic shape "
                f"(should be static). Tensor: {tensor}. Predictions must be batch-major with "
                f"the static batch of params['batch_size'] ({rows})."
            )
        if tensor.shape.rank != 0 and batch != rows:
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


def select_keys(predictions: Any, predict_keys: Sequence[str] | str | None) -> Any:
    """The predictions whose key is in `predict_keys` (all when it is empty), as the original chose.

    Example:

    ```python
    c, p = tf.constant([1]), tf.constant([[0.9]])
    assert list(select_keys({"class": c, "probabilities": p}, ["class"])) == ["class"]   # {"class": c}
    ```
    """
    if not predict_keys:
        return predictions
    if not isinstance(predictions, dict):
        raise ValueError("predict_keys argument is not valid in case of non-dict predictions.")
    selected = {key: value for key, value in predictions.items() if key in predict_keys}
    if not selected:
        raise ValueError(
            f"Expected to run at least one output from {predictions.keys()}, provided {predict_keys}."
        )
    return selected


def batch_length(batch: dict) -> int:
    """The rows of one batch of predictions, checked as `Estimator.predict` checked them.

    Every prediction's first dimension must be the same: the original's
    `ValueError` otherwise, and its `IndexError` for a prediction without one.
    """
    if not batch:  # the original's range(None)
        raise TypeError(
            "'NoneType' object cannot be interpreted as an integer: the predictions dict is empty, "
            "so it has no examples to yield. Return at least one prediction."
        )
    length = None
    for key, value in batch.items():
        if not hasattr(value, "shape"):  # a string scalar comes back as bytes
            raise AttributeError(
                f"'{type(value).__name__}' object has no attribute 'shape': the prediction {key!r} "
                "has no batch dimension, so it cannot be split into examples. Return batch-major "
                "predictions, or pass yield_single_examples=False."
            )
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
    return length


@dataclasses.dataclass(frozen=True)
class PredictionPlan:
    """How one build's predictions reach the host (see the module docstring).

    Attributes:
        specs: `tf.TensorSpec`s of the predictions of one replica's step.
        padded: Padded batches with a mask, rather than predictions as they are.

    Example:

    ```python
    step = {"y": tf.zeros([4, 1]), "class": tf.zeros([4], tf.int64)}   # one step's predictions, 4 rows
    plan = PredictionPlan.at_build(step, tf.TensorSpec([4], tf.float32))   # at build: padded, a mask
    mask = tf.constant([1.0, 1, 1, 0])
    assert plan.device_outputs(step, mask) == (step, mask)   # in the step: as they are
    # on the host: 2 steps concatenated, the last row of each is padding
    host_mask = np.array([1, 1, 1, 0] * 2, np.float32)
    arrays = ({"y": np.arange(8.0).reshape([8, 1]), "class": np.arange(8)}, host_mask)
    assert [b["class"].tolist() for b in plan.steps(arrays, count=2, rows=4)] == [[0, 1, 2], [4, 5, 6]]

    plan = PredictionPlan.at_build({"y": tf.zeros([3, 1])}, None)   # the CPU path: batches as they are
    steps = [plan.device_outputs({"y": tf.ones([rows, 1])}, None) for rows in (3, 2)]   # values, dims, ranks
    arrays = tf.nest.map_structure(lambda *parts: np.concatenate(parts), *steps)       # over the steps
    assert [batch["y"].shape for batch in plan.steps(arrays, count=2, rows=0)] == [(3, 1), (2, 1)]
    ```
    """

    specs: Any
    padded: bool

    @classmethod
    def at_build(
        cls, predictions: Any, mask_spec: tf.TensorSpec | None, keys: Sequence[str] | str | None = None
    ) -> PredictionPlan:
        """Checks `predictions` (traced at build); padded when the batch carries a mask.

        `keys`: only these travel (`select_keys`); all are checked, as the Estimator checked them.
        """
        _check_types(predictions)
        predictions = select_keys(predictions, keys)
        items = _check_types(predictions)
        if mask_spec is not None:
            _check_static_batch(items, tf.compat.dimension_value(mask_spec.shape[0]))
        specs = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), predictions)
        return cls(specs, mask_spec is not None)

    def output_spec(self, mask_spec: tf.TensorSpec | None) -> tuple:
        """The device loop's per-step output specs (concatenated along the first axis)."""
        if self.padded:
            return self.specs, mask_spec
        return _ragged_parts(self.specs, [ragged_specs(s.dtype) for s in tf.nest.flatten(self.specs)])

    def device_outputs(self, predictions: Any, mask: tf.Tensor | None) -> tuple:
        """One step's outputs: predictions and mask, or each prediction flattened, its shape and rank."""
        if self.padded:
            return predictions, mask
        return _ragged_parts(predictions, [ragged_encoding(t) for t in tf.nest.flatten(predictions)])

    def steps(self, outputs: Any, count: int, rows: int, first: int = 0) -> list:
        """An execution of `count` steps (NumPy outputs) cut into its steps' predictions, from step `first`.

        Real rows only; `rows` is a padded step's global batch.
        """
        if self.padded:
            predictions, mask = outputs
            return [_real_rows(predictions, mask, slice(i * rows, (i + 1) * rows)) for i in range(first, count)]
        leaves = [[_step_value(steps[i], steps.shapes[i]) for i in range(first, len(steps))] for steps in _cut(outputs, count)]
        if not leaves:  # no predictions at all: an empty structure per step
            return [tf.nest.pack_sequence_as(self.specs, [])] * (count - first)
        return [tf.nest.pack_sequence_as(self.specs, list(step)) for step in zip(*leaves, strict=True)]

    def rows_of(self, outputs: Any, count: int) -> Any:
        """An execution of `count` steps (NumPy outputs) as one batch: its steps' real rows, concatenated."""
        if self.padded:
            predictions, mask = outputs
            return _real_rows(predictions, mask, slice(None))
        cuts = dict(zip(_names(self.specs), _cut(outputs, count), strict=True))
        shapes = {name: steps.shapes for name, steps in cuts.items()}
        lengths = None
        for name in _names(self.specs, sort=False):  # the dict's own order, as the original checked it
            if any(len(shape) == 0 for shape in shapes[name]):
                raise ValueError(
                    f"The prediction {name!r} has no batch dimension, so predict() cannot join it "
                    "across batches. Return batch-major predictions, or use predict_batches()."
                )
            step_rows = [shape[0] for shape in shapes[name]]
            lengths = lengths or step_rows
            if step_rows != lengths:
                raise ValueError(
                    f"Batch length of predictions should be same. {name} has different batch length "
                    f"than others: {step_rows} rows per batch against {lengths}."
                )
            _check_joinable(name, shapes[name])
        leaves = [
            steps.values.reshape([sum(lengths), *shapes[name][0][1:]]) for name, steps in cuts.items()
        ]
        return tf.nest.pack_sequence_as(self.specs, leaves)

    def join(self, batches: list) -> Any:
        """`predict()`'s result: the executions' `rows_of` joined along the first axis."""
        if not batches:
            return self.empty()
        leaves = []
        for name, parts in zip(_names(self.specs), zip(*map(tf.nest.flatten, batches), strict=True), strict=True):
            _check_joinable(name, [part.shape for part in parts])
            leaves.append(np.concatenate(parts, axis=0))
        return tf.nest.pack_sequence_as(self.specs, leaves)

    def empty(self) -> Any:
        """The result of a prediction over no rows: zero rows of each prediction."""
        return tf.nest.map_structure(
            lambda s: np.zeros(
                [0] + ([d or 0 for d in s.shape[1:].as_list()] if s.shape.rank is not None else []), s.dtype.as_numpy_dtype
            ),
            self.specs,
        )


def _ragged_parts(structure: Any, encoded: list[list]) -> tuple:
    """`(values, dims, ranks)`, each shaped as `structure`, from each leaf's three ragged parts."""
    return tuple(tf.nest.pack_sequence_as(structure, [parts[i] for parts in encoded]) for i in range(3))


def _cut(outputs: Any, count: int) -> list[RaggedSteps]:
    """Per prediction: the execution's ragged outputs cut into its first `count` steps."""
    values, dims, ranks = (tf.nest.flatten(part) for part in outputs)
    return [RaggedSteps(v, d, r, count) for v, d, r in zip(values, dims, ranks, strict=True)]


def _step_value(value: np.ndarray, shape: tuple) -> Any:
    """One step's prediction; a scalar as NumPy scalar (or bytes), as session.run returned it."""
    return value[()] if not shape else value


def _check_joinable(name: str, shapes: list[tuple]) -> None:
    if len({tuple(shape[1:]) for shape in shapes}) > 1:
        raise ValueError(
            f"The prediction {name!r} cannot be joined across batches: its shapes are "
            f"{sorted({tuple(shape) for shape in shapes})}. predict() joins batches along the first "
            "axis; use predict_batches() for predictions whose other dimensions change."
        )


def _names(specs: Any, sort: bool = True) -> list[str]:
    """Each prediction's name: in `tf.nest.flatten`'s order (sorted keys), or the dict's own."""
    if not isinstance(specs, dict):
        return ["predictions"]
    return [str(key) for key in (sorted(specs) if sort else specs)]


def _real_rows(predictions: Any, mask: np.ndarray, rows: slice) -> Any:
    """The rows `rows` of every prediction without the padded ones (all are batch-major: per-row)."""
    leaves = [leaf[rows] for leaf in tf.nest.flatten(predictions)]
    return tf.nest.pack_sequence_as(predictions, drop_padding(leaves, mask[rows], [True] * len(leaves)))
