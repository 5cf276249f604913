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
from collections.abc import Iterator

import numpy as np

from keras_tpu_estimator.contract import ModeKeys
from keras_tpu_estimator.tf1 import TF1Summaries
from keras_tpu_estimator.utils import get_logger

from .functions import HostFunction, host_call_function
from .gather import GatheredSteps
from .loop import steps_feeds
from .metrics import HostMetrics
from .plan import HostPlan
from .transfer import drop_padding

_log = get_logger(__name__)


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
    plan = runner.record(HostPlan.from_spec("eval", spec, replicas=2, padded=True))   # at build
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
        self._plans: dict[str, HostPlan] = {}
        self._host_calls: dict[str, HostFunction] = {}
        self.metrics: HostMetrics | None = None
        self._worker: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: concurrent.futures.Future | None = None
        self._calls: list[str] = []  # modes of the calls in progress (validation inside fit)
        self._warned_uneven = False
        self._gathered = GatheredSteps()  # one-step EVAL executions not yet handed over
        self.tf1_summaries = TF1Summaries()  # model_fn's tf.compat.v1.summary.* in TRAIN

    def record(self, plan: HostPlan) -> HostPlan:
        """Keeps a mode's plan, made at build (`HostPlan.from_spec`), and builds its host functions.

        Returns the plan (its `specs` are the loop's `host_spec`).
        """
        if plan.summaries:
            self.tf1_summaries.schedule  # noqa: B018  (made before the step is traced)
        self._plans[plan.mode] = plan
        if plan.host_call is not None and plan.mode not in self._host_calls:
            self._host_calls[plan.mode] = host_call_function(plan.host_call, plan.padded)
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
