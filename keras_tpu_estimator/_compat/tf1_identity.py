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
from collections.abc import Iterator
from typing import Any

import tensorflow as tf
from tensorflow.python.framework import tensor as _tensor
from tensorflow.python.ops import resource_variable_ops as _resource_variable_ops
from tensorflow.python.ops import variables as _variables

from keras_tpu_estimator._compat import patched_attributes

_RESOURCE_VARIABLE = _resource_variable_ops.BaseResourceVariable
_OWN_OP = _RESOURCE_VARIABLE.op


class VariableOp:
    """What `variable.op` was in TF1 for a variable created outside the graph: its `VarHandleOp`.

    Example:

    ```python
    with tf1_identity():
        variable.op.name   # 'dense/kernel', the TF1 name
    ```
    """

    type = "VarHandleOp"
    inputs: tuple = ()
    control_inputs: tuple = ()

    def __init__(self, variable: Any):
        self._variable = variable
        self.name = variable.name.split(":")[0]
        self.device = variable.device
        self.graph = tf.compat.v1.get_default_graph()

    @property
    def outputs(self) -> list:
        return [self._variable.handle]

    def __repr__(self) -> str:
        return f"<VarHandleOp {self.name!r} (a variable created outside the graph)>"


def _op(variable: Any) -> Any:
    handle = variable._handle
    if isinstance(handle, tf.Tensor) and hasattr(handle, "numpy"):  # an EagerTensor: no graph op
        return VariableOp(variable)
    return _OWN_OP.fget(variable)


def _identity_hash(value: Any) -> int:
    return id(value)


def _patches() -> list:
    return [
        (_tensor.Tensor, "__hash__", _identity_hash),
        (_variables.Variable, "__hash__", _identity_hash),
        (_RESOURCE_VARIABLE, "op", property(_op)),
    ]


@contextlib.contextmanager
def tf1_identity() -> Iterator[None]:
    """While active (any thread): graph tensors and variables hash by identity, `v.op.name` works.

    Reference counted, so replica threads may enter it while the caller is inside.

    Example:

    ```python
    with tf1_identity():
        names = {v.op.name: v for v in tf.compat.v1.global_variables()}
        seen = {loss, logits}   # hashable, as in TF1
    ```
    """
    with patched_attributes("tf1_identity", _patches):
        yield
