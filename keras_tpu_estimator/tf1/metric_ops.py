"""TF1 metrics updated inside the EVAL step: `eval_metric_ops`, and `eval_metrics` on the CPU path.

TPUEstimator's CPU path (`use_tpu=False`) ran evaluation as an Estimator:
`eval_metric_ops={name: (value, update_op)}` (a plain `EstimatorSpec`), and
a `TPUEstimatorSpec`'s `eval_metrics=(metric_fn, tensors)` turned into them
by calling `metric_fn` on the step's tensors in the same graph
(`as_estimator_spec`). Every step's `session.run` ran the update ops; the
values were read once at the end.

Here each EVAL step runs the update ops and returns the values read after
them; the evaluation keeps the last step's. No host round trip and no second
trace of `model_fn`. The accumulators are TF1 local variables, which every
`evaluate` starts from zero. On the TPU path the original refused
`eval_metric_ops`, and ran `eval_metrics` on the host (`host/runner.py`); so does this.

Example:

```python
from keras_tpu_estimator.tf1 import VariableStore

def eval_spec(labels, predictions):   # model_fn's EVAL spec: a TF1 metric in eval_metrics
    metric_fn = lambda labels, predictions: {"accuracy": tf.compat.v1.metrics.accuracy(labels, predictions)}
    return kte.TPUEstimatorSpec("eval", loss=tf.constant(0.0), eval_metrics=(metric_fn, [labels, predictions]))

store, built = VariableStore(keras.layers.Layer(), tf.distribute.get_strategy()), []   # the model's variables

@tf.function
def build(labels, predictions):   # the build's trace: creates the metric variables
    with store.creating(), store.scope():
        built.append(StepMetrics.at_build(eval_spec(labels, predictions), use_tpu=False)[0])

@tf.function
def eval_step(labels, predictions):   # each EVAL step's trace: the updates, then the values read after them
    with store.scope():
        return built[0].step_values(eval_spec(labels, predictions))[1]

build.get_concrete_function(tf.zeros([2], tf.int64), tf.zeros([2], tf.int64))
assert built[0].eval_metrics_in_step and built[0].names == ["accuracy"]   # the CPU path: in the step
steps = [eval_step(tf.constant(l), tf.constant(p)) for l, p in [([1, 0], [1, 0]), ([1, 1], [0, 1])]]
assert built[0].result({"accuracy": np.concatenate([s["accuracy"] for s in steps])}) == {"accuracy": 0.75}
```
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf


def _check_pairs(metric_ops: Any, source: str) -> dict:
    for name, pair in metric_ops.items():
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise TypeError(
                f"{source}[{name!r}] must be a (value, update_op) pair, as "
                f"tf.compat.v1.metrics return. Received: {pair!r}"
            )
    return dict(metric_ops)


def _call_metric_fn(eval_metrics: Any) -> Any:
    metric_fn, tensors = eval_metrics
    return metric_fn(**tensors) if isinstance(tensors, dict) else metric_fn(*tensors)


def _is_pairs(result: Any) -> bool:
    return isinstance(result, dict) and bool(result) and all(
        isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[1], (tf.Tensor, tf.Operation))
        for pair in result.values()
    )


class StepMetrics:
    """The metrics one model's EVAL step updates: their names, and which source they come from.

    Made by `at_build` in the build graph; `step_values` is called in every
    EVAL step trace; `result` reads an evaluation's last step output.

    Attributes:
        names: Metric names, sorted.
        eval_metrics_in_step: Whether `eval_metrics`' `metric_fn` runs in the
            step (the CPU path, TF1 metric pairs), so the host must not run it.
    """

    def __init__(self, names: list[str] | None = None, eval_metrics_in_step: bool = False):
        self.names = sorted(names or [])
        self.eval_metrics_in_step = eval_metrics_in_step

    @classmethod
    def at_build(cls, spec: Any, use_tpu: bool, replicas: int = 1) -> tuple[StepMetrics, dict]:
        """Checks `spec`'s metrics in the build graph (creating their variables), decides where they run.

        Returns the metrics and their `{name: (value, update_op)}` in the build graph.
        On the CPU path with several `replicas` (`RunConfig(eval_distribute=...)`)
        they must run in the step, merged over replicas as the Estimator merged
        `eval_metric_ops`: a `metric_fn` of Keras metrics is refused there.
        """
        metric_ops = _check_pairs(getattr(spec, "eval_metric_ops", None) or {}, "eval_metric_ops")
        if metric_ops and use_tpu:  # only a plain EstimatorSpec has eval_metric_ops
            raise RuntimeError(
                "estimator_spec used by TPU evaluation must have type`TPUEstimatorSpec`. "
                f"Got {type(spec)}: EstimatorSpec.eval_metric_ops cannot run on the TPU path "
                "(use_tpu=True), as in TPUEstimator. Return TPUEstimatorSpec(eval_metrics=(metric_fn, "
                "tensors)), or evaluate with use_tpu=False (eval_on_tpu=False)."
            )
        eval_metrics = getattr(spec, "eval_metrics", None)
        in_step = False
        if eval_metrics is not None and not use_tpu:
            try:  # TF1 pairs run in the step, as the original's CPU path ran them
                result = _call_metric_fn(eval_metrics)
            except Exception:  # noqa: BLE001  (the host path reports it, with its own checks)
                result = None
            if _is_pairs(result):
                in_step = True
                metric_ops.update(result)
            elif replicas > 1:
                raise ValueError(
                    "On the CPU path (use_tpu=False) with several replicas, eval_metrics run in the "
                    "EVAL step as TF1 metric pairs, merged over replicas as the Estimator merged "
                    "eval_metric_ops; this metric_fn returns something else (Keras metrics?). Return "
                    "tf.compat.v1.metrics pairs, or evaluate on one replica or with use_tpu=True."
                )
        return cls(list(metric_ops), in_step), metric_ops

    def pairs(self, spec: Any) -> dict:
        """`{name: (value, update_op)}` of `spec` (call inside the step's trace)."""
        metric_ops = dict(getattr(spec, "eval_metric_ops", None) or {})
        if self.eval_metrics_in_step:
            metric_ops.update(_call_metric_fn(spec.eval_metrics))
        return metric_ops

    def host_spec(self, spec: Any) -> Any:
        """`spec` as the host should see it: without the `eval_metrics` the step runs."""
        return spec._replace(eval_metrics=None) if self.eval_metrics_in_step else spec

    def step_values(self, spec: Any, pairs: dict | None = None) -> tuple[list, dict]:
        """`(update ops, {name: value read after them, shaped [1, ...]})` for one EVAL step.

        `pairs`: the step's metric pairs if already made (at build), else made from `spec`.
        """
        pairs = self.pairs(spec) if pairs is None else pairs
        updates = [pairs[name][1] for name in self.names]
        with tf.control_dependencies(updates):
            values = {name: tf.expand_dims(tf.identity(pairs[name][0]), 0) for name in self.names}
        return updates, values

    def output_spec(self, values: dict) -> dict | None:
        """The loop's output spec of `step_values`' values (None without metrics)."""
        if not self.names:
            return None
        return {name: tf.TensorSpec(values[name].shape, values[name].dtype) for name in self.names}

    def result(self, outputs: Any) -> dict[str, float]:
        """`{name: value}` from the last execution's outputs (values stacked over its steps)."""
        if not self.names or outputs is None:
            return {}
        return {name: float(np.asarray(outputs[name])[-1]) for name in self.names}
