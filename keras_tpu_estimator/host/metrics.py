"""`HostMetrics`: `eval_metrics` accumulated on the host over every step of one evaluation.

TF1 metric pairs run in a `HostFunction`'s graph (over an execution's steps in
one Session call when they can); Keras metrics run eagerly, once per step.
Padded rows are dropped by the transfer format's rule (`transfer.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_tpu_estimator.utils import get_logger

from .functions import HostFunction
from .loop import build_steps_loop, steps_feeds
from .plan import HostPart
from .transfer import drop_padding

_log = get_logger(__name__)


def _keras_metrics(result: Any) -> bool:
    """Whether `metric_fn` returned `{name: keras.metrics.Metric}`."""
    return isinstance(result, dict) and bool(result) and all(
        isinstance(m, keras.metrics.Metric) for m in result.values()
    )


class HostMetrics:
    """`eval_metrics=(metric_fn, tensors)` accumulated over every step of one evaluation.

    `metric_fn` returns `{name: (value, update_op)}` from `tf.compat.v1.metrics`
    (run in a host graph), or `{name: keras.metrics.Metric}` (created once,
    outside it; called eagerly each step). With a host graph `update_steps`
    runs an execution in one Session call: `metric_fn` is called again inside
    a `tf.while_loop` over the steps, on the variables its first call created,
    so the updates are exactly those of a call per step (which it falls back
    to when that second call cannot be built).

    Args:
        part: The plan's `eval_metrics` part.
        padded: Each step comes with a padding mask (rows to drop).
        batched: Try the one-call-per-execution loop (False: one call per step).

    Example:

    ```python
    def metric_fn(labels, predictions):
        return {"accuracy": tf.compat.v1.metrics.accuracy(labels, predictions)}

    rows = tf.zeros([4], tf.int64)   # each step: 4 labels and 4 predictions
    spec = kte.TPUEstimatorSpec("eval", loss=tf.constant(0.0), eval_metrics=(metric_fn, [rows, rows]))
    metrics = HostMetrics(kte.host.HostPlan.from_spec("eval", spec, replicas=1, padded=True).eval_metrics, padded=True)
    labels, predictions = np.array([[1, 0, 1, 0], [1, 0, 0, 0]]), np.array([[1, 0, 0, 1], [1, 1, 1, 1]])
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0]], np.float32)   # 4 real rows, 3 of them right
    metrics.update_steps([labels, predictions], mask, steps=2, global_steps=[9, 9])
    assert metrics.result() == {"accuracy": 0.75}
    metrics.close()
    ```
    """

    def __init__(self, part: HostPart, padded: bool, batched: bool = True):
        self.part = part
        self._padded, self._batched = padded, batched
        self._graph_metrics: HostFunction | None = None
        self._keras_metrics: dict[str, keras.metrics.Metric] | None = None
        self._values: dict = {}
        # The graph's callable indices of the loops over steps: with the padding mask, and (padded
        # evaluations) without it, for executions whose rows are all real (about 60 % faster).
        self._loop: int | None = None
        self._unmasked_loop: int | None = None
        self._last: dict[str, float] | None = None  # results when the Session closed

    @property
    def batched(self) -> bool:
        """Whether executions run in one Session call (known after the first step)."""
        return self._loop is not None

    def _start(self, values: Sequence[np.ndarray]) -> None:
        eager_error = None
        try:  # eagerly first: only Keras metrics work there
            result = self.part.call([tf.constant(v) for v in values])
        except Exception as error:  # TF1 metrics refuse eager execution, no global step eagerly, ...
            result, eager_error = None, error
        if _keras_metrics(result):
            self._keras_metrics = result
            for metric in result.values():
                metric.reset_state()
            return
        try:
            self._graph_metrics = HostFunction(self.part, fetch=self._updates)
        except Exception:
            if eager_error is not None and "eager execution" not in str(eager_error):
                raise eager_error from None  # e.g. Keras metrics that failed where they run, eagerly
            raise
        self._values = {name: pair[0] for name, pair in self._graph_metrics.result.items()}
        if self._batched:
            self._loop = self._build_loop(self._padded)
            if self._padded and self._loop is not None:
                self._unmasked_loop = self._build_loop(False)

    @staticmethod
    def _updates(result: Any) -> list:
        if not isinstance(result, dict) or not all(
            isinstance(pair, (tuple, list)) and len(pair) == 2 for pair in result.values()
        ):
            raise TypeError(
                f"eval_metric_ops must be a dict, given: {result}. metric_fn must return a dict "
                "{name: (value, update_op)} built from tf.compat.v1.metrics.*, or a dict "
                f"{{name: keras.metrics.Metric}}. Received: {result!r}"
            )
        return [pair[1] for pair in result.values()]

    def _build_loop(self, padded: bool) -> int | None:
        """Adds a loop running `metric_fn`'s updates once per stacked step; its index, or None."""
        host, part = self._graph_metrics, self.part

        def updates(values: list) -> list:
            pending = list(host.variables)

            def replay(next_creator: Callable, **kwargs: Any) -> Any:
                # The variables the build-time call created, in the same order.
                if not pending or pending[0][1] != kwargs.get("name"):
                    raise ValueError("metric_fn creates other variables when called again")
                return pending.pop(0)[0]

            with tf.variable_creator_scope(replay):
                result = part.call(values, warn=False)
            if pending:
                raise ValueError("metric_fn creates fewer variables when called again")
            return self._updates(result)

        try:
            with host.graph.as_default():
                feeds, done = build_steps_loop(part, padded, updates, host.global_step)
            return host.add_callable(done, feeds)
        except Exception as error:  # any failure: the per-step path gives the same results
            _log.debug("eval_metrics run once per step: no loop over steps (%s)", error)
            return None

    def prepare(self, values: Sequence[np.ndarray], mask: np.ndarray | None, steps: int) -> None:
        """Opens the Session and runs the loop over no steps on the calling thread (no effect)."""
        host = self._graph_metrics
        loop, mask = self._loop_for(mask)
        if host is not None and loop is not None and steps > 1 and not host.ran(loop):
            host.run(loop, steps_feeds([], [], values, mask))

    def _loop_for(self, mask: np.ndarray | None) -> tuple[int | None, np.ndarray | None]:
        """The loop for an execution with `mask`, and the mask to feed it (None: every row is real)."""
        if mask is not None and self._unmasked_loop is not None and mask.all():
            return self._unmasked_loop, None
        return self._loop, mask

    def reset(self) -> None:
        """Starts a new evaluation: every metric variable at its initial value."""
        self._last = None
        if self._graph_metrics is not None:
            self._graph_metrics.reinitialize_variables()
        for metric in (self._keras_metrics or {}).values():
            metric.reset_state()

    def update(self, values: Sequence[np.ndarray], global_step: int) -> None:
        """Adds one step's gathered tensors (padded rows already dropped)."""
        if self._graph_metrics is None and self._keras_metrics is None:
            self._start(values)
        if self._graph_metrics is not None:
            self._graph_metrics(values, global_step)
        else:
            self._merge(self.part.call([tf.constant(v) for v in values]))

    def _merge(self, result: Any) -> None:
        """Adds the state of metrics `metric_fn` created in this call to the evaluation's own.

        A `metric_fn` that creates its Keras metrics inside (as TF1 code did: it
        was called once) returns new objects, each updated on one step. Keras'
        metrics keep sums and counts, so adding their variables accumulates the
        step; metrics created outside `metric_fn` are the evaluation's own already.
        """
        for name, metric in (result or {}).items():
            own = self._keras_metrics[name]
            if metric is own:
                continue
            if type(metric) is not type(own) or len(metric.variables) != len(own.variables):
                raise TypeError(
                    f"metric_fn returned a different metric for {name!r} ({type(metric).__name__}) than on "
                    f"its first call ({type(own).__name__}). Return the same kind of metric every time."
                )
            for total, part in zip(own.variables, metric.variables, strict=True):
                total.assign_add(part)

    def update_steps(
        self, values: Sequence[np.ndarray], mask: np.ndarray | None, steps: int, global_steps: Sequence[int]
    ) -> None:
        """Adds an execution's steps: `values` stacked `[steps, ...]`, `mask` `[steps, rows]`, their global steps."""
        def step(index: int) -> list:
            step_values = [v[index] for v in values]
            return step_values if mask is None else drop_padding(step_values, mask[index], self.part.per_row)

        if steps <= 0:
            return
        if self._graph_metrics is None and self._keras_metrics is None:
            self._start(step(0))
        host, (loop, loop_mask) = self._graph_metrics, self._loop_for(mask)
        # One step runs faster alone, unless only the loop is ready.
        if loop is not None and (steps > 1 or (host.ran(loop) and not host.ran(0))):
            host.run(loop, steps_feeds(range(steps), global_steps, values, loop_mask))
            return
        for index in range(steps):
            self.update(step(index), global_steps[index])

    def result(self) -> dict[str, float]:
        """`{name: value}` over every step since `reset` (or of the last evaluation, once closed)."""
        host = self._graph_metrics
        if host is not None and not host.is_open and self._last is not None:
            return dict(self._last)
        if host is not None:
            with contextlib.ExitStack() as closing:
                if not host.is_open:  # no step since `reset`: a new Session's initial values
                    closing.callback(host.close)
                values = host.evaluate(self._values)
        elif self._keras_metrics is not None:
            values = {name: m.result() for name, m in self._keras_metrics.items()}
        else:
            return {}
        return {name: float(np.asarray(value)) for name, value in values.items()}

    def finish(self, succeeded: bool) -> None:
        """Ends an evaluation. After a success the Session stays open for the next one: a new
        Session's first run of the loop costs about 15 ms (its executor), 5 % of a 300-step
        evaluation of a small model; `reset` starts the next from initial values. Sessions with
        summary writers, and those of failed evaluations, close."""
        if succeeded and self._graph_metrics is not None and not self._graph_metrics.writes_summaries:
            return
        self.close(keep_results=succeeded)

    def close(self, keep_results: bool = True) -> None:
        """Closes the metric graph's Session, keeping its results for `result` (if asked)."""
        if self._graph_metrics is None or not self._graph_metrics.is_open:
            return
        try:
            if keep_results:
                self._last = self.result()
        finally:
            self._graph_metrics.close()
