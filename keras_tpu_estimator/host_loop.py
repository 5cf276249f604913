"""One host call per execution: a host function run once per stacked step inside one graph.

An execution's host values arrive stacked over its steps (`[steps, ...]`).
Running the user's function once per step is one `Session.run` per step,
which costs more than a small training step. `build_steps_loop` instead puts
a `tf.while_loop` in the host graph that calls the function on each chosen
step in turn, so an execution is one `Session.run`. The loop runs one
iteration at a time and each iteration waits for everything the function
returned, so steps run in order, exactly as a call per step would.

Example:

```python
with graph.as_default():
    feeds, done = build_steps_loop(part, padded=False, call_step=lambda values: [part.call(values)])
session.run(done, dict(zip(feeds, steps_feeds([0, 1, 2], stacked, None))))
```
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from keras_tpu_estimator.host_plan import HostPart


def _without_padding(value: tf.Tensor, keep: tf.Tensor) -> tf.Tensor:
    """`host_plan.drop_padding`'s rule in the graph: a value with one row per mask entry loses padded rows."""
    per_row = tf.equal(tf.shape(value)[0], tf.size(keep))
    return tf.cond(per_row, lambda: tf.boolean_mask(value, keep), lambda: value)


def build_steps_loop(
    part: HostPart, padded: bool, call_step: Callable[[list], Sequence[Any]]
) -> tuple[list, tf.Tensor]:
    """Adds to the default graph a loop calling `call_step` once per chosen step; returns `(feeds, done)`.

    Args:
        part: Whose tensors the steps carry (`part.specs`, one step's shapes).
        padded: Each step comes with a padding mask: padded rows are dropped
            before `call_step` sees them, as `drop_padding` drops them.
        call_step: Called once, inside the loop's body, with one step's
            values; returns what must run for that step (tensors or ops).

    Returns:
        `feeds`: placeholders for `steps_feeds`' values (the indices of the
        steps to run, the stacked values, the mask); `done`: run it to run
        the loop.
    """
    with tf.name_scope("execution"):
        indices = tf.compat.v1.placeholder(tf.int32, [None], name="steps")
        stacked = [tf.compat.v1.placeholder(s.dtype, [None, *s.shape]) for s in part.specs]
        mask = tf.compat.v1.placeholder(tf.float32, [None, None], name="mask") if padded else None

        def one_step(position: tf.Tensor) -> tf.Tensor:
            index = tf.gather(indices, position)
            values = [tf.gather(v, index) for v in stacked]
            if mask is not None:
                keep = tf.gather(mask, index) > 0.5
                values = [_without_padding(v, keep) for v in values]
            with tf.control_dependencies(tf.nest.flatten(call_step(values))):
                return position + 1

        # One iteration at a time: a step's work finishes before the next step's starts.
        done = tf.while_loop(
            lambda position: position < tf.size(indices), one_step, [tf.constant(0)], parallel_iterations=1
        )
    return [indices, *stacked] + ([mask] if mask is not None else []), done


def steps_feeds(indices: Sequence[int], values: Sequence[np.ndarray], mask: np.ndarray | None) -> list:
    """The values for `build_steps_loop`'s feeds: run steps `indices` of the stacked `values`."""
    feeds = [np.asarray(indices, np.int32), *values]
    return feeds + ([mask] if mask is not None else [])
