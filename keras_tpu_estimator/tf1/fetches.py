"""TF1 fetch semantics for traced steps: a step runs only what its fetches need.

A TF1 program ran `session.run(fetches)`: only the ops the fetched tensors
depend on (by data or control dependencies) executed, and initializers ran
once. A TF2 `tf.function` runs every stateful op it traced, in program order.
Traced naively, a `model_fn` that builds `minimize()` in every mode would
train during `evaluate`, and `init_from_checkpoint` would restore at every
step.

`run_fetched(fn)` closes that gap: it traces `fn` in a scratch graph without
automatic control dependencies, then copies into the real graph only the ops
that the values `fn` returned need (`_compat.copy_needed_ops`). What a step
returns is therefore exactly what it runs: the `train_op`, the loss, the
host tensors, the predictions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from keras_tpu_estimator import _compat


def run_fetched(fn: Callable[[], Any], name: str = "fetched_step") -> Any:
    """Traces `fn()` and keeps only what its result needs, as a TF1 `session.run` would.

    Call it while tracing (inside a `tf.function`). `fn` returns a nest of
    tensors, operations and composite values (such as a strategy's
    `PerReplica`); operations in it are run (kept) and returned as copies.

    Returns:
        `fn()`'s result, with every tensor and operation replaced by its copy
        in the current graph.

    Example:

    ```python
    @tf.function
    def step():
        def traced():
            counter.assign_add(1)          # not fetched: never runs
            return {"loss": tf.reduce_sum(w)}
        return run_fetched(traced)
    ```
    """
    return _compat.trace_needed(fn, name)[0]


_WRITES = frozenset({"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"})
_V1_CONTROL_FLOW = frozenset({"Switch", "Merge", "RefSwitch", "RefMerge", "Enter", "Exit"})


def always_increments(fetch: Any, read: tf.Tensor) -> bool:
    """Whether running `fetch` surely adds a positive constant to the variable `read` was read from.

    True when the ops `fetch` needs (by data or control dependencies) write
    that variable only through `AssignAddVariableOp`s of positive constants
    outside any branch: as `minimize(global_step=...)` counts a step. False
    when unsure (a write in a branch, another write, v1 control flow, the
    variable passed into a function call or v2 branch, whose ops are not in
    `fetch`'s graph): then the caller checks at run time.

    Example:

    ```python
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        loss = tf.square(tf.compat.v1.get_variable("w", [], initializer=tf.compat.v1.ones_initializer()))
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        train_op = optimizer.minimize(loss, global_step)
        assert always_increments(train_op, global_step.read_value())
    ```
    """
    source = read.op
    while source.type == "Identity":
        source = source.inputs[0].op
    if source.type != "ReadVariableOp":
        return False
    handle = source.inputs[0]
    seen, pending, increments = set(), list(tf.nest.flatten(fetch)), 0
    while pending:
        op = pending.pop()
        op = op if isinstance(op, tf.Operation) else getattr(op, "op", None)
        if op is None or op in seen:
            continue
        seen.add(op)
        if op.type in _V1_CONTROL_FLOW:
            return False
        if op.type in _WRITES and op.inputs[0].name == handle.name:
            delta = tf.get_static_value(op.inputs[1]) if op.type == "AssignAddVariableOp" else None
            if delta is None or delta <= 0:  # only positive steps: they cannot cancel out
                return False
            increments += 1
        elif op.type != "ReadVariableOp" and any(t.name == handle.name for t in op.inputs):
            return False  # the handle goes into a function call or a v2 branch, which may write it
        pending.extend(op.inputs)
        pending.extend(op.control_inputs)
    return increments > 0
