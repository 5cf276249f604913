"""The host side: `host_call` and `eval_metrics` functions run once per step on gathered tensors.

On the device, a step's `host_call` / `eval_metrics` tensors are concatenated
across replicas (replica 0's rows first) and stacked over the steps of an
execution (`loop.py`). This module owns what happens after: the user's
function is built **once** in a dedicated `tf.Graph` with placeholders of the
gathered shape, and a `tf.compat.v1.Session` runs it for every step with that
step's values. That is where TF1 code works unchanged: `tf.compat.v1.metrics.*`
(local variables, update ops) and TF2 summaries written in graph mode
(`create_file_writer(...).as_default()`, `record_if`, `all_v2_summary_ops()`).

A `metric_fn` may instead return `keras.metrics.Metric` objects (created once,
outside it): it is then called eagerly for every step.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.logs import get_logger

_log = get_logger(__name__)


def split_host_call(name: str, host_call: Any) -> tuple[Callable, list[str] | None, list[Any]]:
    """`(fn, keys or None, flat tensors)` from a validated `(fn, list or dict)` pair."""
    fn, tensors = host_call
    if isinstance(tensors, dict):
        keys = sorted(tensors)
        return fn, keys, [tensors[key] for key in keys]
    return fn, None, list(tensors)


def check_batch_major(name: str, tensors: Sequence[Any], keys: list[str] | None) -> None:
    """Raises a ValueError naming any host tensor that cannot be concatenated across replicas."""
    for index, tensor in enumerate(tensors):
        label = f"{name}[1][{keys[index]!r}]" if keys else f"{name}[1][{index}]"
        if not isinstance(tensor, (tf.Tensor, tf.Variable)) and not hasattr(tensor, "shape"):
            raise ValueError(
                f"{label} must be a tensor; received {type(tensor).__name__}. Nested "
                "structures are not supported: pass a flat list or dict of tensors."
            )
        if tensor.shape.rank == 0:
            raise RuntimeError(
                "All tensors outfed from TPU should preserve batch size dimension, but got scalar "
                f"{tensor}. {label} must keep a batch dimension so it can be concatenated across "
                "replicas: use `tf.reshape(t, [1])` for a scalar."
            )


def _call(name: str, fn: Callable, keys: list[str] | None, args: Sequence[Any]) -> Any:
    try:
        return fn(**dict(zip(keys, args, strict=True))) if keys is not None else fn(*args)
    except TypeError:
        _log.warning(
            "Exception while calling %s. It is likely the tensors (%s[1]) do not match the "
            "function's arguments.",
            name,
            name,
        )
        raise


class HostFunction:
    """One `(fn, tensors)` function, built once in its own graph and run per step.

    Args:
        name: `"host_call"` or `"eval_metrics"`, for messages.
        fn: The user's function.
        keys: Dict keys (tensors passed as keywords), or None (positional).
        specs: `tf.TensorSpec` of each tensor as gathered for one step.
        fetch: Turns `fn`'s return value into what each step runs
            (default: the value itself, or all v2 summary ops when it is None).

    Example:

    ```python
    host = HostFunction("host_call", fn, None, [tf.TensorSpec([32], tf.float32)])
    host([np.zeros(32, np.float32)])
    host.flush()
    ```
    """

    def __init__(
        self,
        name: str,
        fn: Callable,
        keys: list[str] | None,
        specs: Sequence[tf.TensorSpec],
        fetch: Callable[[Any], Any] | None = None,
    ):
        self.name = name
        self._graph = tf.Graph()
        with self._graph.as_default():
            self._placeholders = [tf.compat.v1.placeholder(s.dtype, s.shape) for s in specs]
            self.result = _call(name, fn, keys, self._placeholders)
            if fetch is not None:
                self._fetches = fetch(self.result)
            elif self.result is None:
                self._fetches = tf.compat.v1.summary.all_v2_summary_ops() or []
            else:
                self._fetches = self.result
            writers = [op for op in self._graph.get_operations() if op.type == "SummaryWriter"]
            self._flush = [tf.raw_ops.FlushSummaryWriter(writer=op.outputs[0]) for op in writers]
            self._reset_locals = tf.compat.v1.local_variables_initializer()
            init = [
                _compat.summary_writer_init_ops(),
                tf.compat.v1.global_variables_initializer(),
                self._reset_locals,
            ]
        # Host ops are tiny: their own single-threaded pools keep them from
        # queueing behind the device loop's kernels in the shared pools.
        config = tf.compat.v1.ConfigProto(
            inter_op_parallelism_threads=1,
            intra_op_parallelism_threads=1,
            use_per_session_threads=True,
        )
        self._session = tf.compat.v1.Session(graph=self._graph, config=config)
        self._session.run(init)
        # A prepared callable skips per-step fetch and feed processing (the hot path).
        self._step = self._session.make_callable(self._fetches, feed_list=self._placeholders)

    @property
    def num_inputs(self) -> int:
        """How many tensors one step feeds."""
        return len(self._placeholders)

    def __call__(self, values: Sequence[np.ndarray]) -> Any:
        """Runs one step with `values` fed to the placeholders."""
        return self._step(*values)

    def evaluate(self, fetches: Any) -> Any:
        """Runs `fetches` (tensors of this graph) without feeding anything."""
        return self._session.run(fetches)

    def reset_local_variables(self) -> None:
        """Zeroes TF1 metric accumulators (local variables)."""
        self._session.run(self._reset_locals)

    def flush(self) -> None:
        """Flushes every summary writer `fn` created."""
        if self._flush:
            self._session.run(self._flush)

    def close(self) -> None:
        """Flushes and releases the session."""
        self.flush()
        self._session.close()


def _is_eager_only_error(error: Exception) -> bool:
    return "eager execution" in str(error)


class HostMetrics:
    """`eval_metrics=(metric_fn, tensors)` accumulated over every step of one evaluation.

    `metric_fn` returns `{name: (value, update_op)}` built from
    `tf.compat.v1.metrics.*` (run in a host graph and session), or
    `{name: keras.metrics.Metric}` (called eagerly each step; create the
    metrics once, outside `metric_fn`).

    Example:

    ```python
    metrics = HostMetrics(metric_fn, None, specs)
    metrics.reset()
    metrics.update(step_values)
    metrics.result()     # {"accuracy": 0.75}
    ```
    """

    def __init__(self, fn: Callable, keys: list[str] | None, specs: Sequence[tf.TensorSpec]):
        self._fn, self._keys, self._specs = fn, keys, list(specs)
        self._graph_metrics: HostFunction | None = None
        self._keras_metrics: dict[str, keras.metrics.Metric] | None = None

    def _start(self, values: Sequence[np.ndarray]) -> None:
        try:
            result = _call("eval_metrics", self._fn, self._keys, [tf.constant(v) for v in values])
        except RuntimeError as error:
            if not _is_eager_only_error(error):
                raise
            result = None
        if isinstance(result, dict) and result and all(
            isinstance(m, keras.metrics.Metric) for m in result.values()
        ):
            self._keras_metrics = result
            for metric in result.values():
                metric.reset_state()
            return
        self._graph_metrics = HostFunction(
            "eval_metrics", self._fn, self._keys, self._specs, fetch=self._updates
        )
        self._values = {name: pair[0] for name, pair in self._graph_metrics.result.items()}

    @staticmethod
    def _updates(result: Any) -> list:
        if not isinstance(result, dict) or not all(
            isinstance(pair, (tuple, list)) and len(pair) == 2 for pair in result.values()
        ):
            raise TypeError(
                f"eval_metric_ops must be a dict, given: {result}. "
                "metric_fn must return a dict {name: (value, update_op)} built from "
                "tf.compat.v1.metrics.*, or a dict {name: keras.metrics.Metric}. "
                f"Received: {result!r}"
            )
        return [pair[1] for pair in result.values()]

    def close(self) -> None:
        """Closes the metric graph's session, if any."""
        if self._graph_metrics is not None:
            self._graph_metrics.close()

    def reset(self) -> None:
        """Starts a new evaluation: all accumulators to zero."""
        if self._graph_metrics is not None:
            self._graph_metrics.reset_local_variables()
        for metric in (self._keras_metrics or {}).values():
            metric.reset_state()

    def update(self, values: Sequence[np.ndarray]) -> None:
        """Adds one step's gathered tensors."""
        if self._graph_metrics is None and self._keras_metrics is None:
            self._start(values)
        if self._graph_metrics is not None:
            self._graph_metrics(values)
        else:
            _call("eval_metrics", self._fn, self._keys, [tf.constant(v) for v in values])

    def result(self) -> dict[str, float]:
        """`{name: value}` over every step since `reset`."""
        if self._graph_metrics is not None:
            values = self._graph_metrics.evaluate(self._values)
        elif self._keras_metrics is not None:
            values = {name: m.result() for name, m in self._keras_metrics.items()}
        else:
            return {}
        return {name: float(np.asarray(value)) for name, value in values.items()}


class HostRunner:
    """The host side of one model: its host functions per mode, eval metrics and the host thread.

    Args:
        every_n_steps: `experimental_host_call_every_n_steps`: in TRAIN, `fn`
            runs for steps whose 0-based global step is a multiple of it.

    Example:

    ```python
    runner = HostRunner(every_n_steps=1)
    specs = runner.record("train", spec, replicas=4, padded=False)   # at build
    runner.submit("train", host_arrays, first_step=0, steps=4)      # after an execution
    runner.finish("train")                                          # drain and flush
    ```
    """

    def __init__(self, every_n_steps: int = 1):
        self.every_n_steps = every_n_steps
        self._host_calls: dict[str, HostFunction] = {}
        self._padded: dict[str, bool] = {}
        self.metrics: HostMetrics | None = None
        self._worker: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: concurrent.futures.Future | None = None

    @staticmethod
    def tensors(spec: Any, mode: str) -> list:
        """The spec's host tensors in transfer order: `host_call`'s, then `eval_metrics`'."""
        tensors = []
        if getattr(spec, "host_call", None) is not None:
            tensors += split_host_call("host_call", spec.host_call)[2]
        if mode == "eval" and getattr(spec, "eval_metrics", None) is not None:
            tensors += split_host_call("eval_metrics", spec.eval_metrics)[2]
        return tensors

    def record(
        self, mode: str, spec: Any, replicas: int, padded: bool, rows: int | None = None
    ) -> list | None:
        """Checks `spec`'s host tensors at build and makes their host functions.

        `rows`: with `padded`, the per-replica batch that tensors without a
        static row count are padded to on the device (EVAL on the CPU path).

        Returns:
            Per-replica `tf.TensorSpec`s of what each step sends to the host
            (the padding mask last when `padded`), or None when nothing is sent.
        """
        def gathered(tensor: Any) -> tf.TensorSpec:
            shape = tensor.shape.as_list()
            # Padded rows are dropped before the host sees them: any row count.
            shape[0] = None if padded or shape[0] is None else shape[0] * replicas
            return tf.TensorSpec(shape, tensor.dtype)

        tensors = []
        if getattr(spec, "host_call", None) is not None:
            fn, keys, call_tensors = split_host_call("host_call", spec.host_call)
            check_batch_major("host_call", call_tensors, keys)
            tensors += call_tensors
            if mode not in self._host_calls:
                specs = [gathered(t) for t in call_tensors]
                self._host_calls[mode] = HostFunction("host_call", fn, keys, specs)
        if mode == "eval" and getattr(spec, "eval_metrics", None) is not None:
            fn, keys, metric_tensors = split_host_call("eval_metrics", spec.eval_metrics)
            check_batch_major("eval_metrics", metric_tensors, keys)
            tensors += metric_tensors
            self.metrics = HostMetrics(fn, keys, [gathered(t) for t in metric_tensors])
        self._padded[mode] = padded
        if not tensors:
            return None
        specs = [
            tf.TensorSpec([rows if t.shape[0] is None else t.shape[0], *t.shape[1:]], t.dtype)
            for t in tensors
        ]
        if padded:
            specs.append(tf.TensorSpec([rows or specs[0].shape[0]], tf.float32))
        return specs

    def _step(self, mode: str, values: list, step_index: int) -> None:
        if self._padded.get(mode):
            # Per-row tensors lose their padded rows; others (a [1] step) pass as they are.
            keep = values[-1] > 0.5
            values = [v[keep] if v.shape[:1] == keep.shape else v for v in values[:-1]]
        host_call = self._host_calls.get(mode)
        count = 0
        if host_call is not None:
            count = host_call.num_inputs
            if mode != "train" or step_index % self.every_n_steps == 0:
                host_call(values[:count])
        if mode == "eval" and self.metrics is not None:
            self.metrics.update(values[count:])

    def _steps(self, mode: str, host: list, first_step: int, steps: int) -> None:
        for index in range(steps):
            self._step(mode, [tensor[index] for tensor in host], first_step + index)

    def submit(self, mode: str, host: list, first_step: int, steps: int) -> None:
        """Runs an execution's host steps on the host thread while the next execution runs.

        One thread keeps the steps in order; at most one execution's work is
        pending, and its errors are raised here or at `drain`.
        """
        self.drain()
        if self._worker is None:
            self._worker = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="keras_tpu_estimator_host"
            )
        self._pending = self._worker.submit(self._steps, mode, host, first_step, steps)

    def drain(self) -> None:
        """Waits for pending host steps; re-raises their error in the caller."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def finish(self, mode: str) -> None:
        """Drains the host thread, flushes `mode`'s summary writers and ends the thread.

        The thread is started again by the next `submit`.
        """
        try:
            self.drain()
        finally:
            if self._worker is not None:
                self._worker.shutdown(wait=True)
                self._worker = None
        if mode in self._host_calls:
            self._host_calls[mode].flush()

    def close(self) -> None:
        """Ends the thread and closes every host function's session (the runner is done)."""
        try:
            self.finish("")
        finally:
            for host_call in self._host_calls.values():
                host_call.close()
            if self.metrics is not None:
                self.metrics.close()
            self._host_calls.clear()
