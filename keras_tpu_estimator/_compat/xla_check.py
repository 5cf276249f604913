"""What the TPU-readiness check needs from TF internals: a step's fetched ops, XLA kernels, HLO.

- `fetched_with_ops(fn)`: `run_fetched`'s trace (only what `fn`'s result
  needs is copied into the current graph), also returning the *original*
  ops it kept, which still carry their creation tracebacks (the copies'
  tracebacks point at the copying code);
- `ops_with_bodies(ops, graph)`: those ops and the ops of the functions they
  call (`tf.cond` / `tf.while_loop` branches and bodies, function calls);
- `has_xla_kernel(op_type)`, `missing_xla_kernel(op, device_type)`: whether
  XLA registers a kernel for an op (from `_compat/xla.py`, as is `ops_with_bodies`);
- `outside_compilation_on_host()`: `tf.compat.v1.tpu.outside_compilation`
  as a TPU program sees it (its computation kept out of the step);
- `hlo_text(function, spec)`: the HLO XLA makes of a `jit_compile` function.

Example:

```python
@tf.function(jit_compile=True)
def step(x):
    result, ops = fetched_with_ops(lambda: {"y": x * 2})
    return result

assert has_xla_kernel("MatMul") and not has_xla_kernel("EagerPyFunc")
assert hlo_text(step, [tf.TensorSpec([8, 4])]).startswith("HloModule")
```
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf
from tensorflow.python.tpu import tpu_replication as _tpu_replication

from keras_tpu_estimator._compat.graph_copy import scratch_graph, trace_needed
from keras_tpu_estimator._compat.patching import swapped_attribute
from keras_tpu_estimator._compat.xla import (  # noqa: F401  (part of this module's API)
    has_xla_kernel,
    missing_xla_kernel,
    ops_with_bodies,
)


def fetched_with_ops(fn: Callable[[], Any], name: str = "checked_step") -> tuple[Any, list[tf.Operation]]:
    """`run_fetched(fn)` (`tf1/fetches.py`), and the ops of `fn`'s trace that its result needs."""
    result, kept = trace_needed(fn, name)
    return result, ops_with_bodies(kept, kept[0].graph if kept else None)


def _host_stand_in(value: Any) -> Any:
    if not isinstance(value, tf.Tensor):
        return None  # an op (a side effect on the host): nothing comes back to the TPU
    if not value.shape.is_fully_defined():
        raise ValueError(
            f"outside_compilation returned {value} without a static shape: a TPU step takes back "
            "only statically shaped tensors from the host. Give it a fixed shape (`tf.ensure_shape`)."
        )
    if value.dtype == tf.string:
        return tf.fill(value.shape, "")
    return tf.zeros(value.shape, value.dtype)


@contextlib.contextmanager
def outside_compilation_on_host() -> Iterator[None]:
    """`tf.compat.v1.tpu.outside_compilation(fn, *args)` traced aside: the step gets zeros of its results.

    Off a TPU it calls `fn` inline (`tpu_replication.outside_compilation`);
    on a TPU `fn` runs on the host, and the compiled step sees only its
    results' shapes and types, which the stand-ins have.
    """

    def on_host(computation: Callable, *args: Any, **kwargs: Any) -> Any:
        with scratch_graph("outside_compilation"):
            result = computation(*args, **kwargs)
        return tf.nest.map_structure(_host_stand_in, result)

    with contextlib.ExitStack() as stack:
        stack.enter_context(swapped_attribute(_tpu_replication, "outside_compilation", on_host))
        stack.enter_context(swapped_attribute(tf.compat.v1.tpu, "outside_compilation", on_host))
        yield


def hlo_text(function: Any, specs: list) -> str:
    """The HLO text of `function` (a `tf.function(jit_compile=True)` of flat arguments) for `specs`.

    Specs, not values: XLA would read a value's contents where it needs a
    compile-time constant (a shape from the data), which a TPU cannot.
    Raises XLA's errors.
    """
    return function.experimental_get_compiler_ir(*specs)(stage="hlo")
