"""Tensors computed inside a step that session hooks fetch: kept as of the last step run.

A TF1 hook could fetch any tensor of the step's graph (a learning rate, a
batch metric, a summary op) and saw its value in the `session.run` that ran
the step. Here a step runs inside the device loop, so a tensor a hook asks for
(`StepTensors.want`, when its hook graph is made) is written, at every step of
the mode, to a variable of its own that the hook's session reads after the
execution: on the CPU path (one step per execution while a hook is present) the
step's value, as the original's; on the strategy path the value of the last
step of the execution on replica 0 (the original's TPU path could not fetch it
at all). The variables are `ONLY_FIRST_REPLICA` mirrored variables, so
replica 0's value is the one kept.

In each step trace the tensor is found again, as `model_fn` made it in that
trace: through the spec's hooks (the tensors that the build's hooks held, in
the same order) or by name, under the replica's name scope.

Example:

```python
wanted = StepTensors(tf.distribute.get_strategy())
wanted.want("train", "learning_rate:0", tf.float32, [])   # a hook fetches it: before the step is traced
built = built_hook_tensors([])                            # the build's spec.training_hooks (none here)

@tf.function
def train_step(step):   # as the device loop traces it: model_fn, then the assignments capture adds
    rate = tf.identity(0.1 / tf.cast(step, tf.float32), name="learning_rate")
    spec = kte.TPUEstimatorSpec("train", loss=rate, train_op=tf.no_op())
    wanted.capture("train", spec, built)

train_step(tf.constant(4))
assert np.isclose(wanted.value("train", "learning_rate:0"), 0.025)   # after an execution
```
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from keras_tpu_estimator import _compat

_REPLICA_SCOPE = re.compile(r"^(replica_\d+)(/|$)")


def hook_tensors(value: Any, seen: set[int] | None = None) -> list[tf.Tensor]:
    """The graph tensors held by `value` (a hook, or its attributes), in a fixed order."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return []
    if isinstance(value, tf.Tensor) and hasattr(value, "graph") and not hasattr(value, "numpy"):
        return [value]
    if isinstance(value, tf.compat.v1.train.SessionRunHook):
        seen.add(id(value))
        return hook_tensors(dict(vars(value)), seen)
    found: list = []
    if isinstance(value, dict):
        seen.add(id(value))
        for item in value.values():
            found += hook_tensors(item, seen)
    elif isinstance(value, list | tuple):
        seen.add(id(value))
        for item in value:
            found += hook_tensors(item, seen)
    return found


class TracedWithoutError(ValueError):
    """A hook fetches an in-step tensor that the mode's step was traced without."""


class StepTensors:
    """The in-step tensors session hooks of each mode fetch, and their last values.

    Args:
        strategy: The model's strategy (the variables that keep the values are made under it).
    """

    def __init__(self, strategy: tf.distribute.Strategy):
        self._strategy = strategy
        self._variables: dict[str, dict[str, tf.Variable]] = {}
        self._traced: dict[str, set[str]] = {}  # names each mode's step was traced with
        self._written: set[str] = set()

    def wanted(self, mode: str) -> list[str]:
        """The tensor names hooks of `mode` asked for."""
        return list(self._variables.get(mode, {}))

    def want(self, mode: str, name: str, dtype: tf.DType, shape: tf.TensorShape) -> None:
        """Keeps tensor `name` of `mode`'s steps from now on (call before the step is traced).

        Raises:
            TracedWithoutError: `mode`'s step was traced without it (a model reused with new hooks).
        """
        variables = self._variables.setdefault(mode, {})
        if name in variables:
            return
        if mode in self._traced and name not in self._traced[mode]:
            raise TracedWithoutError(
                f"A session hook fetches {name!r}, computed inside the {mode} step, but this model's "
                f"{mode} step was already traced without it. Pass the hook in the model's first "
                f"{mode} call (or build a new model)."
            )
        if dtype == tf.resource or dtype == tf.variant:
            raise ValueError(f"A session hook fetches {name!r}, a {dtype.name} tensor, which has no value to show.")
        shape = tf.TensorShape(shape)
        zeros = [d or 0 for d in shape.as_list()] if shape.rank is not None else [0]
        with _compat.eager_mode(), self._strategy.scope():  # eagerly, also while a hook graph is the default
            variables[name] = tf.Variable(
                tf.zeros(zeros, dtype), trainable=False, shape=shape, name="session_hook_value",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )

    def capture(self, mode: str, spec: Any, built: Sequence[str] = ()) -> list:
        """Inside `mode`'s step: assignments of this trace's wanted tensors to their variables.

        `built`: the names of the tensors the build's spec hooks held (`built_hook_tensors`):
        the step's own hooks hold this trace's tensors in the same order.
        """
        variables = self._variables.get(mode, {})
        self._traced[mode] = set(variables)
        if not variables:
            return []
        graph = tf.compat.v1.get_default_graph()
        scope = _REPLICA_SCOPE.match(graph.get_name_scope())
        prefix = scope.group(1) + "/" if scope else ""
        rebound: dict[str, tf.Tensor] = {}
        now = hook_tensors(list(getattr(spec, _HOOKS.get(mode, ""), None) or []))
        if len(built) == len(now):
            rebound = {b: n for b, n in zip(built, now, strict=True)}
        writes = []
        for name, variable in variables.items():
            tensor = rebound.get(name)
            if tensor is None:
                try:
                    tensor = graph.get_tensor_by_name(prefix + name)
                except (KeyError, ValueError):
                    raise ValueError(
                        f"A session hook fetches {name!r}, which model_fn made when the model was built "
                        f"but not in the {mode} step. Name it (tf.identity(t, name=...)) and fetch it by "
                        "that name, or pass it in the spec's hooks."
                    ) from None
            writes.append(variable.assign(tf.cast(tensor, variable.dtype), read_value=False))
        self._written.add(mode)
        return writes

    def value(self, mode: str, name: str) -> np.ndarray:
        """The value tensor `name` had in the last step of `mode` that ran.

        Raises:
            ValueError: No step of `mode` ran yet.
        """
        if mode not in self._written:
            raise ValueError(f"A session hook fetched {name!r}, computed inside the step, before any step ran.")
        with _compat.eager_mode():
            return self._variables[mode][name].numpy()


_HOOKS = {"train": "training_hooks", "eval": "evaluation_hooks", "infer": "prediction_hooks"}


def built_hook_tensors(hooks: list) -> list[str]:
    """The names of the tensors the build's spec hooks hold (`begin()` rebinds the hooks later)."""
    return [t.name for t in hook_tensors(list(hooks))]
