"""TF1 identity for the tensors and variables `model_fn` sees: hashable, with `.op` names.

A TF1 graph's tensors and variables were hashable (sets, dict keys), and a
variable's `.op.name` was its TF1 name (`{v.op.name: v}` maps for
`init_from_checkpoint`, `ema.variables_to_restore`,
`tf.summary.scalar(v.op.name, v)`). Under TF2 graph tensors and variables
refuse hashing, and a variable created eagerly has no `.op` inside a
`tf.function`. `tf1_identity()` restores both while `model_fn` (or a hook's
`begin`) runs; outside, TensorFlow behaves as its own.

`==` stays TF2's elementwise comparison (`step % 2 == 1` is a tensor, which
TF2-era code inside `model_fn` relies on); sets and dicts still work by
identity, because distinct objects never share an identity hash.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import tensorflow as tf
from tensorflow.python.distribute import values as _distribute_values
from tensorflow.python.framework import tensor as _tensor
from tensorflow.python.ops import resource_variable_ops as _resource_variable_ops
from tensorflow.python.ops import variables as _variables
from tensorflow.python.training import optimizer as _tf1_optimizer

from keras_tpu_estimator._compat import patched_attributes

_RESOURCE_VARIABLE = _resource_variable_ops.BaseResourceVariable
_OWN_OP = _RESOURCE_VARIABLE.op
_OWN_VAR_KEY = _tf1_optimizer._var_key
_DISTRIBUTED = _distribute_values.DistributedVariable
_OWN_DISTRIBUTED_OP = _DISTRIBUTED.op
_plain = threading.local()  # set while TF's own code must see TF2's `.op` (no stand-in)


class VariableOp:
    """What `variable.op` was in TF1 for a variable created outside the graph: its `VarHandleOp`.

    Example:

    ```python
    variable = tf.Variable(tf.zeros([2]), name="dense/kernel")   # eager: no graph op in TF2
    with tf1_identity():
        assert variable.op.name == "dense/kernel"   # the TF1 name
    ```
    """

    type = "VarHandleOp"
    traceback = None  # a TPU variable's `.op` copies it
    inputs: tuple = ()
    control_inputs: tuple = ()

    def __init__(self, variable: Any):
        self._variable = variable
        # A replica's component answers with its distributed variable's name, as the one
        # variable of a TPU program did (not 'dense/kernel/replica_1').
        container = getattr(variable, "_distributed_container", None) or getattr(
            variable._handle, "_distributed_container", None
        )
        named = container() if container is not None else variable
        self.name = named.name.split(":")[0]
        self.device = variable.device
        # The graph every trace is nested in: stable, so TF1 optimizers that key slots by
        # (v.op.graph, v.op.name) find them from any nested graph (a cond branch, a merge_call).
        graph = tf.compat.v1.get_default_graph()
        while getattr(graph, "outer_graph", None) is not None:
            graph = graph.outer_graph
        self.graph = graph

    @property
    def outputs(self) -> list:
        return [self._variable.handle]

    def __repr__(self) -> str:
        return f"<VarHandleOp {self.name!r} (a variable created outside the graph)>"


def _op(variable: Any) -> Any:
    handle = variable._handle
    eager = isinstance(handle, tf.Tensor) and hasattr(handle, "numpy")  # an EagerTensor: no graph op
    if eager and not getattr(_plain, "on", False):
        return VariableOp(variable)
    return _OWN_OP.fget(variable)


def _distributed_op(variable: Any) -> Any:
    """A distributed variable's `.op`: its primary's, named as the one TF1 variable.

    TF2 gave a replica's component op, or outside a replica a read of a
    sync-on-read variable (an `Identity`: batch norm's `moving_mean` was named
    'Identity_2', so `'moving_' in v.op.name` missed it in the build).
    """
    if getattr(_plain, "on", False):
        return _OWN_DISTRIBUTED_OP.fget(variable)
    return variable._primary.op


def _var_key(variable: Any) -> Any:
    """TF1 optimizers' slot key, as TF2 computes it (`_unique_id`) whether or not the stand-in is active.

    Slots created inside `model_fn` are looked up again in `merge_call` code that
    may run while no `model_fn` is active; one key for both.
    """
    _plain.on = True
    try:
        return _OWN_VAR_KEY(variable)
    finally:
        _plain.on = False


def _identity_hash(value: Any) -> int:
    return id(value)


def _patches() -> list:
    return [
        (_tensor.Tensor, "__hash__", _identity_hash),
        (_variables.Variable, "__hash__", _identity_hash),
        (_RESOURCE_VARIABLE, "op", property(_op)),
        (_DISTRIBUTED, "op", property(_distributed_op)),
        (_tf1_optimizer, "_var_key", _var_key),
    ]


@contextlib.contextmanager
def tf1_identity() -> Iterator[None]:
    """While active (any thread): graph tensors and variables hash by identity, `v.op.name` works.

    Reference counted, so replica threads may enter it while the caller is inside.

    Example:

    ```python
    w = tf.Variable(1.0, name="w")

    @tf.function
    def step():
        with tf1_identity():
            loss = w * 2.0
            names = {w.op.name: w}   # {'w': w}
            seen = {loss, w}         # hashable, as in TF1
            assert list(names) == ["w"] and len(seen) == 2
        return loss

    step()
    ```
    """
    with patched_attributes("tf1_identity", _patches):
        yield
