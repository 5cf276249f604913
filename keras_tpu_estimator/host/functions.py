"""`HostFunction`: one user function (`host_call`'s or `metric_fn`'s) built once in a TF1 graph, run by a Session.

The function is traced **once** in its own `tf.Graph`, where TF1 code works
unchanged (`tf.compat.v1.metrics`, graph-mode TF2 summaries), either for one
step's tensors or inside a loop over an execution's steps (`loop.py`). Each
host graph has a global step, set to the step's before the function runs on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.utils import get_logger

from .loop import build_steps_loop
from .plan import HostPart

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
    plan = kte.host.HostPlan.from_spec("train", spec, replicas=1, padded=False)
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


def host_call_function(part: HostPart, padded: bool) -> HostFunction:
    """`host_call`'s function: one Session call per execution when `fn` runs in a loop, else one per step."""
    try:
        return HostFunction(part, over_steps=True, padded=padded)
    except Exception as error:  # e.g. a variable from a tensor initializer: a call per step
        _log.debug("host_call runs once per step: no loop over steps (%s)", error)
        return HostFunction(part)
