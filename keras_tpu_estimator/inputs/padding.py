"""Padding signals: full static batches on the device, exactly the real rows on the host.

TPUs need static shapes, but real inputs end with a partial batch. For
evaluation and prediction this module pads every batch to the static batch
size with zero rows and a mask (1.0 for a real row, 0.0 for padding), and,
when one input pipeline feeds several replicas, appends all-padding batches
so the input ends on a whole global step. The input is read exactly once:
the fillers are built from the element spec, not from the data.

Padding always sits at the end of a batch and fillers at the end of the
input, so after gathering replicas in order the real rows are a prefix in
input order; the host keeps the rows whose mask is 1.

`padding_mask()` gives `model_fn` the mask of the batch it is processing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from .input_fn import split_element

_local = threading.local()


def padding_mask() -> tf.Tensor | None:
    """The current batch's mask inside `model_fn` (1.0 real row, 0.0 padding), or None.

    Available in EVAL and PREDICT on the strategy path, where batches are
    padded to `params['batch_size']` rows (the CPU path does not pad). Use it to weight a loss so padded rows do
    not count.

    Example:

    ```python
    def model_fn(features, labels, mode, params):
        ...
        mask = kte.padding_mask()              # None in TRAIN and with use_tpu=False: not padded
        if mask is None:
            mask = tf.ones_like(labels[:, 0])
        per_row = tf.abs(predictions - labels)[:, 0]
        loss = tf.reduce_sum(per_row * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)
    ```
    """
    return getattr(_local, "mask", None)


@contextlib.contextmanager
def mask_scope(mask: tf.Tensor | None) -> Iterator[None]:
    """Makes `padding_mask()` return `mask` in this thread while active."""
    saved = getattr(_local, "mask", None)
    _local.mask = mask
    try:
        yield
    finally:
        _local.mask = saved


def is_padded(element: Any) -> bool:
    """True for an element made by `pad_batches`."""
    return isinstance(element, dict) and set(element) in ({"features", "mask"}, {"features", "labels", "mask"})


def unpack(element: Any) -> tuple[Any, Any, Any]:
    """`(features, labels, mask)`; mask is None for an element that was not padded."""
    if is_padded(element):
        return element["features"], element.get("labels"), element["mask"]
    features, labels = split_element(element)
    return features, labels, None


def pad_batches(dataset: tf.data.Dataset, batch_size: int, replicas: int = 1) -> tf.data.Dataset:
    """Pads each batch of `dataset` to `batch_size` rows and adds a mask.

    Args:
        dataset: Batched elements `features` or `(features, labels)`.
        batch_size: The static batch size to pad to.
        replicas: Consecutive elements consumed by one step (replicas fed by
            this pipeline); the input is extended with all-padding elements
            to a multiple of it.

    Returns:
        Elements `{"features", "labels" (if any), "mask"}` with static batch dimensions.

    Raises:
        tf.errors.InvalidArgumentError: at run time, for a batch larger than
            `batch_size` ("The real batch size should not be greater than batch_size.").

    Example:

    >>> ds = pad_batches(tf.data.Dataset.range(5).batch(2), 2)
    >>> [int(e["mask"].numpy().sum()) for e in ds]
    [2, 2, 1]
    """

    def pad(*components: Any) -> dict:
        element = components[0] if len(components) == 1 else components
        features, labels = split_element(element)
        tensors = [t for t in tf.nest.flatten((features, labels)) if t is not None]
        if not tensors or any(t.shape.rank == 0 for t in tensors):
            raise ValueError(
                "Every feature and label must be batched (rank >= 1) to be padded. Batch the "
                "dataset with params['batch_size']."
            )
        rows = tf.shape(tensors[0])[0]
        # `tf.debugging.Assert`, not `assert_less_equal`: the same error, and half the
        # ops (the map is traced at each call's start).
        check = tf.debugging.Assert(
            rows <= batch_size, ["The real batch size should not be greater than batch_size.", rows]
        )
        with tf.control_dependencies([check]):
            rows = tf.identity(rows)

        def fill(tensor: tf.Tensor) -> tf.Tensor:
            paddings = [[0, batch_size - rows]] + [[0, 0]] * (tensor.shape.rank - 1)
            padded = tf.pad(tensor, paddings)  # exactly batch_size rows, once the check passed
            padded.set_shape([batch_size] + tensor.shape[1:].as_list())
            return padded

        padded = {"features": tf.nest.map_structure(fill, features)}
        if labels is not None:
            padded["labels"] = tf.nest.map_structure(fill, labels)
        padded["mask"] = tf.cast(tf.range(batch_size) < rows, tf.float32)
        return padded

    # Plain TF ops, no tensor-dependent Python control flow: skip autograph's
    # conversion (a third of a second on a process's first call).
    padded = dataset.map(tf.autograph.experimental.do_not_convert(pad))
    if replicas > 1:
        filler = tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), padded.element_spec)
        fillers = tf.data.Dataset.from_tensors(filler).repeat(replicas - 1)
        padded = padded.concatenate(fillers).batch(replicas, drop_remainder=True).unbatch()
    return padded

