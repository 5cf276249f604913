"""XLA for the replica step off a TPU: `jit_compile`, and the TF1 `global_jit_level` switch.

On a TPU every replica step is an XLA program (`TPUStrategy` compiles it).
Elsewhere the step is compiled only when asked, in one of two ways
(`StepCompilation`):

- `MUST` (`jit_compile=True` on `EstimatorModel`, `compile` or `RunConfig`):
  the replica step is compiled, and an op XLA cannot compile is an error,
  raised when the step is traced, naming the op and the `model_fn` line. On
  one device (the default strategy, `OneDeviceStrategy`) the step is one XLA
  program, a `tf.function(jit_compile=True)` called inside the device loop, as
  Keras compiles its `train_step`. Under `MirroredStrategy` and
  `MultiWorkerMirroredStrategy` a compiled function cannot hold the
  cross-replica `merge_call`s of a TF1 optimizer (TensorFlow refuses a
  `merge_call` inside a nested `tf.function`; Keras' own `jit_compile` fails
  there), so each replica's ops are marked as XLA clusters of its device and
  the cross-replica reductions run between them.
- `AUTO_CLUSTERS` (`RunConfig(session_config=...)` with
  `graph_options.optimizer_options.global_jit_level` `ON_1` or `ON_2`, how TF1
  programs turned XLA on): the replica step's ops are marked for XLA's
  clustering on every strategy; ops XLA cannot compile (a `tf.py_function`,
  string ops) stay outside the clusters and run as before.

The device loop, the input and the host side (`host_call`, `eval_metrics`'
`metric_fn`, hooks) are never compiled. Results equal the uncompiled step's
within float rounding.

Example:

```python
model = kte.EstimatorModel(model_fn, train_batch_size=4, jit_compile=True)
# or, in a TPUEstimator program: RunConfig(..., jit_compile=True)
model.fit(input_fn, callbacks=[kte.StopAtStep(steps=1)])   # the replica step is one XLA program
```
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator._compat import xla as _xla
from keras_tpu_estimator.utils import user_line

_AUTO = "auto"


class StepCompilation(enum.Enum):
    """How the replica step is compiled off a TPU."""

    NONE = "none"
    MUST = "must"
    AUTO_CLUSTERS = "auto_clusters"


def check_jit_compile(value: Any, where: str) -> Any:
    """`value` if it is `"auto"`, True, False (or None where allowed), else a `ValueError`."""
    if value is None or value is True or value is False or value == _AUTO:
        return value
    raise ValueError(f"`{where}` must be 'auto', True or False. Received: jit_compile={value!r}")


def _session_config_clusters(session_config: Any) -> bool:
    """Whether a TF1 `ConfigProto` asked for XLA auto-clustering (`global_jit_level` ON_1 or ON_2)."""
    if session_config is None:
        return False
    options = tf.compat.v1.OptimizerOptions
    level = session_config.graph_options.optimizer_options.global_jit_level
    return level in (options.ON_1, options.ON_2)


def resolve_step_compilation(jit_compile: Any, config: Any) -> StepCompilation:
    """The model's `StepCompilation` from its `jit_compile` and its `RunConfig`.

    An explicit True or False wins; `"auto"` (the default) takes
    `config.jit_compile` when set, else `global_jit_level` from
    `config.session_config`, else no XLA. Unlike Keras' `"auto"`, which
    compiles on a GPU, this `"auto"` keeps the original's choice (XLA on a TPU
    only): an unchanged TF1 `model_fn` may hold ops XLA refuses that ran on a
    GPU before.
    """
    if jit_compile == _AUTO or jit_compile is None:
        jit_compile = getattr(config, "jit_compile", None)
    if jit_compile is True:
        return StepCompilation.MUST
    if jit_compile is False:
        return StepCompilation.NONE
    if _session_config_clusters(getattr(config, "session_config", None)):
        return StepCompilation.AUTO_CLUSTERS
    return StepCompilation.NONE


def _one_device(strategy: tf.distribute.Strategy) -> bool:
    """No cross-replica calls can happen: the default strategy or `OneDeviceStrategy`."""
    return strategy is _compat.default_strategy() or isinstance(strategy, tf.distribute.OneDeviceStrategy)


def _refuse_uncompilable(ops: list) -> None:
    """Raises for the first op of `ops`, or of a `tf.cond` / `while` body they call, XLA cannot compile."""
    uncompilable = _xla.ops_without_xla_kernel(ops)
    if uncompilable:
        op = uncompilable[0]
        line = user_line(op)
        raise ValueError(
            f"jit_compile=True: XLA cannot compile op '{op.name}' (type {op.type}), made "
            f"{'at ' + line if line else 'by model_fn'}, in the replica step. Move it to a "
            "`host_call` (or compute it outside `model_fn`), or turn XLA off for this model "
            "(`jit_compile=False`); `RunConfig(session_config=...)` with `global_jit_level=ON_1` "
            "compiles what XLA can and runs the rest as before."
        )


def compiled_run(
    strategy: tf.distribute.Strategy,
    compilation: StepCompilation,
    run: Callable[[Any], Any],
    data: Any,
) -> Any:
    """`run(data)` (the replicas' step, traced in the current graph) compiled as `compilation` says.

    Call it while tracing the device loop, off a TPU. `run` returns a nest
    of tensors; with one compiled program, operations in it become `None`.
    """
    if compilation is StepCompilation.NONE:
        return run(data)
    if compilation is StepCompilation.MUST and _one_device(strategy):

        @tf.function(jit_compile=True, autograph=False)
        def replica_program(batch: Any) -> Any:
            result = run(batch)
            _refuse_uncompilable(tf.compat.v1.get_default_graph().get_operations())
            return result

        return replica_program(data)
    graph = tf.compat.v1.get_default_graph()
    first = len(graph.get_operations())
    result = run(data)
    made = graph.get_operations()[first:]
    if compilation is StepCompilation.MUST:
        _refuse_uncompilable([op for op in made if not _xla.crosses_devices(op)])
    by_device: dict[str, list] = {}
    for op in made:
        by_device.setdefault(op.device, []).append(op)
    for device, ops in by_device.items():
        _xla.mark_for_xla(ops, f"keras_tpu_estimator_step_{device or 'default'}")
    return result
