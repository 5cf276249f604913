"""Private Keras state the model reads: the name-scope stack, and the epoch a backup resumes.

Part of `_compat` (see its docstring): Keras' name-scope stack
(`keras.src.backend.common.global_state`, attribute "name_scope_stack") and
`Trainer._initial_epoch` (set by `BackupAndRestore`) are read here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import keras
import tensorflow as tf
from keras.src.backend.common import global_state as _keras_global_state


def _optimizer_in_scope() -> keras.optimizers.Optimizer | None:
    """The outermost Keras optimizer whose name scope is open, or None.

    Keras optimizers open `backend.name_scope(self.name, caller=self)` around
    every variable they create (iterations, learning rate, slots).
    """
    stack = _keras_global_state.get_global_attribute("name_scope_stack") or []
    for entry in stack:
        caller = getattr(entry, "caller", None)
        if isinstance(caller, keras.optimizers.Optimizer):
            return caller
    return None


def _record_apply_ops(optimizer: keras.optimizers.Optimizer) -> None:
    """Makes `optimizer` remember the graph ops its last `apply` created (`optimizer_update_op`).

    Keras 3's `apply_gradients` returns the optimizer's `iterations` variable
    ("for compat with tf.keras"), not an op that depends on the updates, so a
    TF1 `train_op=optimizer.apply_gradients(...)` would run none of them.
    """
    apply = optimizer.apply

    def recorded_apply(*args: Any, **kwargs: Any) -> Any:
        graph = tf.compat.v1.get_default_graph()
        if tf.executing_eagerly():
            return apply(*args, **kwargs)
        before = len(graph.get_operations())
        result = apply(*args, **kwargs)
        ops = graph.get_operations()[before:]
        optimizer._keras_tpu_estimator_apply = (graph, tf.group(ops) if ops else None)
        return result

    optimizer.apply = recorded_apply


def optimizer_update_op(train_op: Any, optimizers: list) -> Any:
    """The op grouping the updates of the `apply` whose result `train_op` is, else `train_op`.

    When `train_op` is the `iterations` variable of a Keras optimizer in
    `optimizers` that applied gradients in the current graph, returns the
    group of ops that `apply` created (what tf.keras' `apply_gradients`
    returned in TF1).
    """
    graph = tf.compat.v1.get_default_graph()
    for optimizer in optimizers:
        recorded = getattr(optimizer, "_keras_tpu_estimator_apply", None)
        if recorded is not None and recorded[0] is graph and train_op is optimizer.iterations:
            return recorded[1] if recorded[1] is not None else train_op
    return train_op


@contextlib.contextmanager
def recording_keras_optimizers(found: list) -> Iterator[None]:
    """Appends to `found` each Keras optimizer that creates a variable inside (once each).

    Each one also records the ops of its `apply` calls (see `optimizer_update_op`).

    Example:

    ```python
    found = []
    with tf.Graph().as_default(), recording_keras_optimizers(found):
        optimizer = keras.optimizers.SGD(0.1)   # as a model_fn would make it
        optimizer.build([tf.Variable(1.0)])     # its variables: iterations, learning rate
    assert len(found) == 1 and found[0] is optimizer
    ```
    """

    def creator(next_creator: Any, **kwargs: Any) -> Any:
        optimizer = _optimizer_in_scope()
        if optimizer is not None and not any(optimizer is seen for seen in found):
            found.append(optimizer)
            _record_apply_ops(optimizer)
        return next_creator(**kwargs)

    with tf.variable_creator_scope(creator):
        yield


def take_resumed_epoch(model: keras.Model) -> int | None:
    """The epoch `BackupAndRestore` restored in `on_train_begin` (`Trainer._initial_epoch`), then clears it.

    Keras' `fit` starts at `model._initial_epoch or initial_epoch`; clearing
    it keeps a later `fit` from resuming a backup that is gone.
    """
    epoch = getattr(model, "_initial_epoch", None)
    model._initial_epoch = None
    return epoch
