"""`EstimatorSpec.eval_metric_ops`: TF1 metrics updated in the step, read after the last one.

TPUEstimator's CPU path (`use_tpu=False`) accepted a plain `EstimatorSpec`
with `eval_metric_ops={name: (value, update_op)}`, as `tf.compat.v1.metrics`
return them; Estimator ran every update op with each step and read the values
once at the end. Here the update ops are fetched by each EVAL step, and the
values are read by a function that traces `model_fn` once more and fetches
only them (`fetches.py`), so the updates do not run again. The metrics'
accumulators are TF1 local variables, which every `evaluate` starts from zero.
On the TPU path the original refused them; so does this.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from keras_tpu_estimator.fetches import run_fetched


class EvalMetricOps:
    """The `eval_metric_ops` of one model's EVAL spec.

    Args:
        spec: The EVAL spec recorded at build (or None before).
        use_tpu: The strategy path, where `eval_metric_ops` are refused.
        trace_spec: Returns `model_fn(EVAL)`'s spec when called inside a trace.

    Example:

    ```python
    metric_ops = EvalMetricOps(spec, use_tpu=False, trace_spec=runner.eval_spec_on_zeros)
    ...                        # run the EVAL steps
    metric_ops.values()        # {"accuracy": 0.75}
    ```
    """

    def __init__(self, spec: Any, use_tpu: bool, trace_spec: Callable[[], Any] | None):
        metric_ops = getattr(spec, "eval_metric_ops", None) or {}
        if metric_ops and use_tpu:
            raise ValueError(
                "EstimatorSpec.eval_metric_ops cannot run on the TPU path (use_tpu=True), as "
                "in TPUEstimator. Return TPUEstimatorSpec(eval_metrics=(metric_fn, tensors)), "
                "or evaluate with use_tpu=False (eval_on_tpu=False)."
            )
        for name, pair in metric_ops.items():
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise TypeError(
                    f"eval_metric_ops[{name!r}] must be a (value, update_op) pair, as "
                    f"tf.compat.v1.metrics return. Received: {pair!r}"
                )
        self.names = sorted(metric_ops)
        self._trace_spec = trace_spec
        self._read: Any = None

    @staticmethod
    def updates(spec: Any) -> list:
        """The update ops of `spec.eval_metric_ops`, for the EVAL step to depend on."""
        return [pair[1] for pair in (getattr(spec, "eval_metric_ops", None) or {}).values()]

    def values(self) -> dict[str, float]:
        """The metrics' values now: what TF1 read after the last update."""
        if not self.names:
            return {}
        if self._read is None:

            def traced() -> dict:
                spec = self._trace_spec()
                return {name: spec.eval_metric_ops[name][0] for name in self.names}

            self._read = tf.function(lambda: run_fetched(traced), autograph=False)
        return {name: float(np.asarray(value)) for name, value in self._read().items()}
