"""TF1 summaries made inside `model_fn` (`tf.compat.v1.summary.*`), written as the Estimator wrote them.

The original Estimator (and TPUEstimator's CPU path) merged the graph's
`SUMMARIES` collection and wrote it with a `SummarySaverHook` every
`save_summary_steps`: at the first step of each `train()` call and every
`save_summary_steps` steps after it, labelled with the global step after that
step's update (steps 1, 3, 5, 7 for `save_summary_steps=2`, whatever
`iterations_per_loop`; 4, 6 for a second call starting at 3), with replica 0's
values on a strategy. It wrote none in evaluation or prediction; its TPU path
dropped them.

Here the same: each training step of replica 0 returns its merged summary
(`step_summary`) as a host tensor (`host/plan.py`) -- built inside a
`tf.cond` on the step, so only the steps that are written merge anything and
the summary ops themselves run only there -- and the host writes the step's
serialized `Summary` into `model_dir`'s event file (`TF1Summaries.write`).
The schedule lives in a small variable set when `StepSummaries` starts a
`fit`; without it (no summary writer) no step computes a summary.

Example:

```python
summaries, writer = TF1Summaries(), tf.summary.create_file_writer(model_dir)
summaries.start(writer, first_step=0, every_n_steps=2)

@tf.function
def replica_step(step_before):   # model_fn's summary, then the step's merged one for the host
    tf.compat.v1.summary.scalar("loss", tf.cast(step_before, tf.float32))
    return summaries.step_summary(step_before)

serialized = [replica_step(tf.constant(step, tf.int64)).numpy() for step in range(3)]   # [steps, replicas]
summaries.write(serialized, steps_after=[1, 2, 3])   # on the host: steps 1 and 3
summaries.stop()
writer.flush()
events = tf.compat.v1.train.summary_iterator(os.path.join(model_dir, os.listdir(model_dir)[0]))
assert [e.step for e in events if e.summary.value] == [1, 3]
```
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from keras_tpu_estimator._compat.op_copy import copy_op_here

SPEC = tf.TensorSpec([1], tf.string)
"""What each replica's step sends: its merged summary (empty when not written)."""


def step_summary_ops() -> list[tf.Tensor]:
    """This replica's TF1 summaries of the step being traced (the current graph's `SUMMARIES`)."""
    graph = tf.compat.v1.get_default_graph()
    return [
        t for t in tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SUMMARIES)
        if isinstance(t, tf.Tensor) and t.graph is graph
    ]


def _is_first_replica() -> bool:
    context = tf.distribute.get_replica_context()
    if context is None:
        return True
    replica = tf.get_static_value(context.replica_id_in_sync_group)
    return replica is None or int(replica) == 0


class TF1Summaries:
    """The TF1 summaries of `model_fn` in TRAIN: when to compute them, and where to write them.

    Example:

    ```python
    summaries, writer = TF1Summaries(), tf.summary.create_file_writer(model_dir)
    summaries.start(writer, first_step=5, every_n_steps=100)   # StepSummaries, as a fit starts at step 5
    assert summaries.schedule.numpy().tolist() == [5, 100]     # what the device step reads
    summaries.stop()                                           # the fit ended: no step merges any more
    assert summaries.schedule.numpy().tolist() == [-1, 0] and summaries.writer is None
    ```
    """

    def __init__(self) -> None:
        self._schedule: tf.Variable | None = None
        self.writer: Any = None

    @property
    def schedule(self) -> tf.Variable:
        """`[first step of the call, every n steps]` (`[-1, 0]`: off), read by the device step."""
        if self._schedule is None:
            with tf.init_scope():
                self._schedule = tf.Variable(
                    np.array([-1, 0], np.int64), trainable=False, name="tf1_summary_schedule"
                )
        return self._schedule

    def start(self, writer: Any, first_step: int, every_n_steps: int) -> None:
        """From now on, the step after each `every_n_steps`-th step from `first_step` writes to `writer`."""
        self.writer = writer
        self.schedule.assign(np.array([first_step, every_n_steps], np.int64))

    def stop(self) -> None:
        """No step computes summaries any more (the call ended)."""
        self.writer = None
        if self._schedule is not None:
            self._schedule.assign(np.array([-1, 0], np.int64))

    def step_summary(self, step_before: tf.Tensor) -> tf.Tensor:
        """A replica's merged summary of this step (`[1]` string), empty unless the step is written.

        Call it in the replica step after `model_fn`; `step_before` is the
        global step before the step's update. The summary ops are copied into
        the branch that runs only on written steps (the originals stay unfetched).
        """
        ops = step_summary_ops()
        if not ops or not _is_first_replica():
            return tf.constant([""])
        schedule = self.schedule.read_value()
        first, every_n = schedule[0], schedule[1]
        due = tf.logical_and(
            tf.logical_and(every_n > 0, first >= 0),
            tf.equal(tf.math.floormod(tf.cast(step_before, tf.int64) - first, tf.maximum(every_n, 1)), 0),
        )

        def merged() -> tf.Tensor:
            copies = [copy_op_here(t.op).outputs[0] for t in ops]
            return tf.reshape(tf.compat.v1.summary.merge(copies, collections=[]), [1])

        return tf.cond(due, merged, lambda: tf.constant([""]))

    def write(self, serialized: Any, steps_after: Sequence[int]) -> None:
        """Writes each step's non-empty summary at the global step after it (the host side).

        `serialized`: `[steps, replicas]` strings; replica 0's are written.
        """
        writer = self.writer
        if writer is None:
            return
        for index, step in enumerate(steps_after):
            value = serialized[index][0]
            if value:
                with writer.as_default():
                    tf.summary.experimental.write_raw_pb(tf.constant(value), step=int(step))
