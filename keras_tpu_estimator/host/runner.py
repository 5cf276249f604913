"""The host side: `host_call` and `eval_metrics` functions run on each step's gathered tensors.

A step's host tensors arrive concatenated across replicas and stacked over an
execution's steps (`engine/loop.py`), in `host_plan.HostPlan`'s order. The user's
function is built **once** in its own `tf.Graph` and run by a
`tf.compat.v1.Session`, where TF1 code works unchanged (`tf.compat.v1.metrics`,
graph-mode TF2 summaries). Each `fit` / `evaluate` / `predict` is one call
(`HostRunner.running`) with Sessions of its own, as each TPUEstimator call had.
`host_call` runs once per step; `eval_metrics` once per execution when it can.
Each host graph has a global step, set to the step's before `fn` runs on it,
so `tf.compat.v1.train.get_global_step()` in `fn` reads the step its tensors
come from (in TRAIN the global step before that step's update, as the
original's CPU path mostly read; in EVAL and PREDICT the model's).
TF1 summaries made in the TRAIN `model_fn` arrive as each step's merged
summary and are written at the step after it (`tf1/summaries.py`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.contract import ModeKeys
from keras_tpu_estimator.tf1 import TF1Summaries
from keras_tpu_estimator.utils import get_logger

from .gather import GatheredSteps
from .loop import build_steps_loop, steps_feeds
from .plan import HostPart, HostPlan
from .transfer import drop_padding

_log = get_logger(__name__)


class HostFunction:
    """One `(fn, tensors)` function, built once in its own graph; its Session opens when it runs.

    Args:
        part: The plan's part: the function, its keys and gathered specs.
        fetch: Turns `fn`'s return value into what each step runs
            (default: the value itself, or all v2 summary ops when it is None).

    Example:

    ```python
    def host_fn(x):   # the user's host_call function: built once, in the host's own graph
        return tf.reduce_sum(x) + tf.cast(tf.compat.v1.train.get_global_step(), tf.float32)

    spec = kte.TPUEstimatorSpec("train", loss=tf.constant(0.0), host_call=(host_fn, [tf.zeros([32])]))
    plan = HostPlan.from_spec("train", spec, replicas=1, padded=False)
    host = HostFunction(plan.host_call)
    assert host([np.ones(32, np.float32)], global_step=7) == 32 + 7  # opens the Session, runs one step
    assert host.is_open
    host.close()                       # flushes summary writers, closes the Session
    assert not host.is_open
    ```
    """

    def __init__(
        self,
        part: HostPart,
        fetch: Callable[[Any], Any] | None = None,
        *,
        over_steps: bool = False,
        padded: bool = False,
    ):
        self.part = part
        self.over_steps = over_steps
        self.graph = tf.Graph()
        self.variables: list[tuple[tf.Variable, str | None]] = []  # fn's, in creation order
        self.result: Any = None

        def recording(next_creator: Callable, **kwargs: Any) -> Any:
            variable = next_creator(**kwargs)
            self.variables.append((variable, kwargs.get("name")))
            return variable

        with self.graph.as_default():
            self.global_step = tf.compat.v1.train.get_or_create_global_step()
            with tf.variable_creator_scope(recording):
                if over_steps:  # call 0 runs the chosen steps of an execution (`host/loop.py`)
                    feeds, fetches = build_steps_loop(
                        part,
                        padded,
                        lambda values: self._fetches(part.call(values, warn=False), fetch),
                        self.global_step,
                    )
                else:
                    # Unfed (reading results), the step stays as it is.
                    step = tf.compat.v1.placeholder_with_default(self.global_step.read_value(), [])
                    feeds = [step, *(tf.compat.v1.placeholder(s.dtype, s.shape) for s in part.specs)]
                    with tf.control_dependencies([self.global_step.assign(step, read_value=False)]):
                        self.result = part.call(feeds[1:])
                    fetches = self._fetches(self.result, fetch)
            writers = [op for op in self.graph.get_operations() if op.type == "SummaryWriter"]
            self._flush = [tf.raw_ops.FlushSummaryWriter(writer=op.outputs[0]) for op in writers]
            self._variables_init = [
                tf.compat.v1.global_variables_initializer(),
                tf.compat.v1.local_variables_initializer(),
            ]
            self._init = [_compat.summary_writer_init_ops(), *self._variables_init]
        self._callables: list[tuple[Any, list]] = [(fetches, feeds)]
        self._session: tf.compat.v1.Session | None = None
        self._made: dict[int, Callable] = {}  # the callables of calls run in this Session

    @staticmethod
    def _fetches(result: Any, fetch: Callable[[Any], Any] | None) -> Any:
        fetches = result if fetch is None else fetch(result)
        if fetches is None:  # fn returned nothing: run the summaries it wrote
            fetches = tf.compat.v1.summary.all_v2_summary_ops() or []
        return fetches

    @property
    def is_open(self) -> bool:
        """Whether a Session is open (between the first run of a call and `close`)."""
        return self._session is not None

    def add_callable(self, fetches: Any, feeds: list) -> int:
        """Registers another call of this graph; returns its index for `run`."""
        self._callables.append((fetches, feeds))
        return len(self._callables) - 1

    def open(self) -> None:
        """Opens a Session (fresh summary writers, variables at their initial values)."""
        if self._session is not None:
            return
        # Host ops are tiny: they run in the calling thread (a negative
        # inter-op count), never queueing behind the device loop's kernels in a
        # pool, and a call costs about 80 us instead of 200 (a hand-off to a
        # pool thread and back); without Grappler a new Session's first run of
        # a call takes about 10 ms, not 100 (each fit / evaluate / predict opens
        # new Sessions).
        config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=-1, intra_op_parallelism_threads=1)
        config.graph_options.rewrite_options.disable_meta_optimizer = True
        session = tf.compat.v1.Session(graph=self.graph, config=config)
        try:
            session.run(self._init)
        except BaseException:
            session.close()
            raise
        self._session, self._made = session, {}

    def ran(self, index: int) -> bool:
        """Whether call `index` ran in the open Session (its executor exists)."""
        return self._session is not None and index in self._made

    def run(self, index: int, values: Sequence[Any]) -> Any:
        """Runs call `index` (0: `fn` on one step, or on the chosen steps `over_steps`): one Session call.

        `values`: one per feed of the call (`steps_feeds` for a loop over steps).
        """
        feeds = self._callables[index][1]
        if len(values) != len(feeds):  # a callable would feed what it is given and leave the rest
            raise ValueError(f"Host call {index} takes {len(feeds)} values; received {len(values)}.")
        self.open()
        call = self._made.get(index)
        if call is None:
            call = self._made[index] = self._session.make_callable(*self._callables[index])
        return call(*values)

    def __call__(self, values: Sequence[np.ndarray], global_step: int) -> Any:
        """Runs `fn` on one step (not `over_steps`): the global step set, `values` fed to its placeholders."""
        return self.run(0, [np.int64(global_step), *values])

    def evaluate(self, fetches: Any) -> Any:
        """Runs `fetches` (tensors of this graph) without feeding anything."""
        self.open()
        return self._session.run(fetches)

    @property
    def writes_summaries(self) -> bool:
        """Whether `fn` made summary writers (their files end when the Session closes)."""
        return bool(self._flush)

    def reinitialize_variables(self) -> None:
        """Every variable back to its initial value in the open Session, as a new Session would have it."""
        if self._session is not None:
            self._session.run(self._variables_init)

    def flush(self) -> None:
        """Flushes every summary writer `fn` created, if a Session is open."""
        if self._session is not None and self._flush:
            self._session.run(self._flush)

    def close(self) -> None:
        """Flushes and closes the Session; the next run opens a new one."""
        session = self._session
        if session is None:
            return
        try:
            self.flush()
        finally:
            self._session = None
            session.close()


def _host_call_function(part: HostPart, padded: bool) -> HostFunction:
    """`host_call`'s function: one Session call per execution when `fn` runs in a loop, else one per step."""
    try:
        return HostFunction(part, over_steps=True, padded=padded)
    except Exception as error:  # e.g. a variable from a tensor initializer: a call per step
        _log.debug("host_call runs once per step: no loop over steps (%s)", error)
        return HostFunction(part)


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
    metrics = HostMetrics(HostPlan.from_spec("eval", spec, replicas=1, padded=True).eval_metrics, padded=True)
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


class HostRunner:
    """The host side of one model: its host plans and functions per mode, and the host thread.

    Args:
        every_n_steps: `experimental_host_call_every_n_steps`: in TRAIN, `fn`
            runs for the steps of each execution whose 0-based index within
            it is a multiple of it (TPUEstimator's outfeed counted each
            loop's steps from 0).
        batch_eval_metrics: Run `eval_metrics` once per execution when it can
            (False: once per step; the results are the same).

    Example:

    ```python
    def metric_fn(labels, predictions):
        return {"accuracy": tf.compat.v1.metrics.accuracy(labels, predictions)}

    rows = tf.zeros([2], tf.int64)   # one replica's step: 2 labels, 2 predictions
    spec = kte.TPUEstimatorSpec("eval", loss=tf.constant(0.0), eval_metrics=(metric_fn, [rows, rows]))
    runner = HostRunner(every_n_steps=1)
    plan = runner.record("eval", spec, replicas=2, padded=True)    # at build: the HostPlan
    assert plan.padded and len(plan.specs) == 3   # labels, predictions, then the mask
    labels, predictions = np.array([[1, 0, 1, 1], [0, 0, 1, 1]]), np.array([[1, 0, 0, 1], [0, 1, 1, 1]])
    mask = np.ones([2, 4], np.float32)    # 2 steps, each 4 rows gathered from 2 replicas
    with runner.running("eval"):                                   # one evaluate call
        runner.submit("eval", [labels, predictions, mask], first_step=0, steps=2)   # after an execution
        assert runner.metric_results() == {"accuracy": 0.75}
    runner.close()   # drained, the thread and every Session closed
    ```
    """

    def __init__(self, every_n_steps: int = 1, batch_eval_metrics: bool = True):
        self.every_n_steps = every_n_steps
        self.batch_eval_metrics = batch_eval_metrics
        self._plans: dict[str, HostPlan | None] = {}
        self._host_calls: dict[str, HostFunction] = {}
        self.metrics: HostMetrics | None = None
        self._worker: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: concurrent.futures.Future | None = None
        self._calls: list[str] = []  # modes of the calls in progress (validation inside fit)
        self._warned_uneven = False
        self._gathered = GatheredSteps()  # one-step EVAL executions not yet handed over
        self.tf1_summaries = TF1Summaries()  # model_fn's tf.compat.v1.summary.* in TRAIN

    def record(
        self, mode: str, spec: Any, replicas: int, padded: bool, ragged: bool = False, summaries: bool = False,
        mask_rows: int | None = None,
    ) -> HostPlan | None:
        """Makes `mode`'s plan at build (`HostPlan.from_spec`) and builds its host functions.

        `summaries`: TRAIN steps send their TF1 summaries (`tf1/summaries.py`).
        `mask_rows`: a padded step's rows per replica.
        Returns the plan (its `specs` are the loop's `host_spec`), or None when nothing is sent.
        """
        plan = HostPlan.from_spec(mode, spec, replicas, padded, ragged, summaries, mask_rows)
        if summaries:
            self.tf1_summaries.schedule  # noqa: B018  (made before the step is traced)
        self._plans[mode] = plan
        if plan is None:
            return None
        if plan.host_call is not None and mode not in self._host_calls:
            self._host_calls[mode] = _host_call_function(plan.host_call, plan.padded)
        if plan.eval_metrics is not None:
            if self.metrics is not None:
                self.metrics.close(keep_results=False)
            self.metrics = HostMetrics(plan.eval_metrics, plan.padded, self.batch_eval_metrics)
        return plan

    def plan(self, mode: str) -> HostPlan | None:
        """`mode`'s plan (from `record`), or None when its steps send nothing to the host."""
        return self._plans.get(mode)

    @contextlib.contextmanager
    def running(self, mode: str) -> Iterator[HostRunner]:
        """One `fit` / `evaluate` / `predict` call's host side.

        Entering starts the call's metrics at zero; Sessions open at its first
        host step. Exiting, also on an error, drains the host thread, flushes
        summary writers and closes `mode`'s Sessions (the thread and every
        Session when no other call is in progress: calls nest, as validation
        in `fit`), but for the `eval_metrics` Session of an evaluation that
        succeeded, which the next evaluation reuses (`HostMetrics.finish`;
        `close` ends it). A host error found while the body raised is only logged.
        """
        if mode == ModeKeys.EVAL:
            self._gathered.clear()  # left by a call whose host side failed
            if self.metrics is not None:
                self.metrics.reset()
        self._calls.append(mode)
        try:
            yield self
        except BaseException:
            self._calls.remove(mode)
            try:
                self._end(mode, failed=True)
            except Exception:  # the body's error wins
                _log.warning("Host error while ending a %s call that failed", mode, exc_info=True)
            raise
        self._calls.remove(mode)
        self._end(mode, failed=False)

    def _end(self, mode: str, failed: bool) -> None:
        keep_results = False
        try:
            self.drain()
            keep_results = not failed
        finally:
            everything, ending = not self._calls, mode not in self._calls
            with contextlib.ExitStack() as closing:  # every close runs, whatever raises
                if everything:
                    closing.callback(self._stop_thread)
                for name, host_call in self._host_calls.items():
                    if everything or (ending and name == mode):
                        closing.callback(host_call.close)
                if self.metrics is not None and (everything or (ending and mode == ModeKeys.EVAL)):
                    closing.callback(self.metrics.finish, keep_results)
                if ending and mode == ModeKeys.TRAIN:  # also when fit raised: the next fit starts off
                    closing.callback(self.tf1_summaries.stop)
                if ending and mode == ModeKeys.EVAL:
                    closing.callback(self._gathered.clear)

    def metric_results(self) -> dict[str, float]:
        """`{name: value}` of `eval_metrics` over the current (or last) evaluation; drains first."""
        self.drain()
        return self.metrics.result() if self.metrics is not None else {}

    def _global_steps(self, mode: str, first_step: int, steps: int, last_step: int | None) -> np.ndarray:
        """Each step's global step: in TRAIN the one before its update, else the model's throughout."""
        if mode != ModeKeys.TRAIN:
            return np.full(steps, first_step)
        moved = steps if last_step is None else last_step - first_step
        if moved % steps and not self._warned_uneven:  # the train_op moved the step by different amounts
            self._warned_uneven = True
            _log.warning(
                "The train_op moved the global step by %d in %d steps: host functions see it spread "
                "evenly over the steps. Pass the step as a host_call tensor to see each step's own.",
                moved, steps,
            )
        return first_step + (moved * np.arange(steps)) // steps  # 1 a step, or e.g. 2 (two minimize calls)

    def _run_execution(self, mode: str, host: list, first_step: int, steps: int, last_step: int | None) -> None:
        plan = self._plans[mode]
        values = plan.split(host)
        global_steps = self._global_steps(mode, first_step, steps, last_step)
        host_call = self._host_calls.get(mode) if plan.host_call is not None else None
        if host_call is not None:
            chosen = [
                index for index in range(steps)
                if mode != ModeKeys.TRAIN or index % self.every_n_steps == 0  # within the execution
            ]
            if host_call.over_steps:
                if chosen:
                    host_call.run(0, steps_feeds(chosen, global_steps, values.host_call, values.mask))
            else:
                for index in chosen:
                    step = [v[index] for v in values.host_call]
                    step = step if values.mask is None else drop_padding(step, values.mask[index], plan.host_call.per_row)
                    host_call(step, global_steps[index])
        if plan.eval_metrics is not None and self.metrics is not None:
            self.metrics.update_steps(values.eval_metrics, values.mask, steps, global_steps)
        if plan.summaries:  # each step's at the global step after its update
            after = first_step + steps if last_step is None else last_step
            self.tf1_summaries.write(plan.summaries_of(host), [*global_steps[1:], after])

    def submit(self, mode: str, host: list, first_step: int, steps: int, last_step: int | None = None) -> None:
        """Runs an execution's host steps on the host thread while the next execution runs.

        `host`: the arrays of `plan(mode).specs`, gathered over local replicas
        and stacked over steps. `first_step`: the global step before the
        first step (TRAIN), or the model's global step (EVAL, PREDICT);
        `last_step`: in TRAIN, the global step after the execution (None: one
        more per step). One thread keeps the steps in order; at most one
        execution is pending; its errors are raised here or at `drain`.
        In EVAL, one-step executions are gathered and run together
        (`host/gather.py`); a longer execution takes the gathered ones along.
        """
        if mode == ModeKeys.EVAL and self._gathered.accepts(first_step):
            if self._gathered.add(host, first_step, steps) is False and steps == 1:
                return  # more one-step executions may join before the host runs them
            self._run_gathered()
            return
        self.drain()
        self._start(mode, host, first_step, steps, last_step)

    def _run_gathered(self) -> None:
        """Hands the gathered EVAL executions to the host thread as one."""
        if self._gathered:
            host, first_step, steps = self._gathered.take()
            self._wait()
            self._start(ModeKeys.EVAL, host, first_step, steps, None)

    def _start(self, mode: str, host: list, first_step: int, steps: int, last_step: int | None) -> None:
        plan = self._plans[mode]
        # Sessions open here: a Session's first runs cost 20-30 ms more on a thread
        # that never ran one (oneDNN's set-up), and the host thread is new in each call.
        values = plan.split(host)
        host_call = self._host_calls.get(mode) if plan.host_call is not None else None
        if host_call is not None:
            host_call.open()
            if host_call.over_steps and not host_call.ran(0):  # its executor made here: a run of no step
                host_call.run(0, steps_feeds([], [], values.host_call, values.mask))
        if plan.eval_metrics is not None and self.metrics is not None:
            self.metrics.prepare(values.eval_metrics, values.mask, steps)
        if self._worker is None:
            self._worker = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="keras_tpu_estimator_host"
            )
        self._pending = self._worker.submit(self._run_execution, mode, host, first_step, steps, last_step)

    def drain(self) -> None:
        """Runs gathered steps and waits for pending ones; re-raises their error in the caller."""
        self._wait()  # an earlier error first, before running more
        self._run_gathered()
        self._wait()

    def _wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _stop_thread(self) -> None:
        if self._worker is not None:
            self._worker.shutdown(wait=True)
            self._worker = None

    def close(self) -> None:
        """Ends the thread and closes every Session (a later call opens new ones)."""
        with contextlib.ExitStack() as closing:
            for host_call in self._host_calls.values():
                closing.callback(host_call.close)
            if self.metrics is not None:
                closing.callback(self.metrics.close)
            closing.callback(self._stop_thread)
            self.drain()
