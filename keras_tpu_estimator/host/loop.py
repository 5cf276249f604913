"""One host call per execution: a host function run once per stacked step inside one graph.

An execution's host values arrive stacked over its steps (`[steps, ...]`).
Running the user's function once per step is one `Session.run` per step,
which costs more than a small training step. `build_steps_loop` instead puts
a `tf.while_loop` in the host graph that calls the function on each chosen
step in turn, so an execution is one `Session.run`. The loop runs one
iteration at a time and each iteration waits for everything the function
returned, so steps run in order, exactly as a call per step would. Before
each step the host graph's global step is set to that step's, so a function
reading `tf.compat.v1.train.get_global_step()` sees it.

Example:

```python
with tf.Graph().as_default():
    global_step = tf.compat.v1.train.get_or_create_global_step()
    total, last = tf.Variable(0.0), tf.Variable(0, dtype=tf.int64)   # what the host function leaves
    fn = lambda x: [total.assign_add(tf.reduce_sum(x)), last.assign(global_step.read_value())]
    part = HostPart("host_call", fn, None, (tf.TensorSpec([2], tf.float32),), (False,), (False,))
    feeds, done = build_steps_loop(part, False, lambda values: part.call(values), global_step)
    with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        stacked = [np.arange(6, dtype=np.float32).reshape([3, 2])]   # 3 steps of [2] values
        session.run(done, dict(zip(feeds, steps_feeds([0, 2], [7, 8, 9], stacked, None))))
        assert session.run([total, last]) == [1.0 + 9.0, 9]   # steps 0 and 2; global step 9 last
```
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from keras_tpu_estimator import _compat

from .plan import HostPart
from .transfer import RaggedSteps, drop_padding_in_graph, ragged_placeholders


def build_steps_loop(
    part: HostPart, padded: bool, call_step: Callable[[list], Sequence[Any]], global_step: tf.Variable
) -> tuple[list, tf.Tensor]:
    """Adds to the default graph a loop calling `call_step` once per chosen step; returns `(feeds, done)`.

    Args:
        part: Whose tensors the steps carry (`part.specs`, one step's shapes;
            `part.ragged` ones arrive as `RaggedSteps.feeds()`).
        padded: Each step comes with a padding mask: padded rows are dropped
            before `call_step` sees them, by `transfer.py`'s one rule.
        call_step: Called once, inside the loop's body, with one step's
            values; returns what must run for that step (tensors or ops).
        global_step: The graph's global step: set to each step's own before
            `call_step`'s ops of that step run.

    Returns:
        `feeds`: placeholders for `steps_feeds`' values (the indices of the
        steps to run, each stacked step's global step, the stacked values, the
        mask); `done`: run it to run the loop.
    """
    with tf.name_scope("execution"):
        indices = tf.compat.v1.placeholder(tf.int32, [None], name="steps")
        global_steps = tf.compat.v1.placeholder(tf.int64, [None], name="global_steps")
        stacked: list = []
        step_value: list[Callable[[tf.Tensor], tf.Tensor]] = []
        for spec, is_ragged in zip(part.specs, part.ragged, strict=True):
            if is_ragged:
                placeholders, step = ragged_placeholders(spec)
                stacked += placeholders
                step_value.append(step)
            else:
                stacked.append(tf.compat.v1.placeholder(spec.dtype, [None, *spec.shape]))
                step_value.append(lambda index, v=stacked[-1]: tf.gather(v, index))
        mask = tf.compat.v1.placeholder(tf.float32, [None, None], name="mask") if padded else None

        def one_step(position: tf.Tensor) -> tf.Tensor:
            index = tf.gather(indices, position)
            values = [value(index) for value in step_value]
            if mask is not None:
                keep = tf.gather(mask, index) > 0.5
                values = [drop_padding_in_graph(v, keep, row) for v, row in zip(values, part.per_row, strict=True)]
            with tf.control_dependencies([global_step.assign(tf.gather(global_steps, index), read_value=False)]):
                step_ops = tf.nest.flatten(call_step(values))
            with tf.control_dependencies(step_ops):
                return position + 1

        # One iteration at a time: a step's work finishes before the next step's starts.
        done = _compat.while_loop_v2(
            lambda position: position < tf.size(indices), one_step, [tf.constant(0)], parallel_iterations=1
        )
    return [indices, global_steps, *stacked] + ([mask] if mask is not None else []), done


def steps_feeds(
    indices: Sequence[int], global_steps: Sequence[int], values: Sequence[np.ndarray], mask: np.ndarray | None
) -> list:
    """The values for `build_steps_loop`'s feeds: run steps `indices` of the stacked `values`.

    `global_steps[i]` is the global step of stacked step `i`.
    """
    flat: list = []
    for value in values:
        flat += value.feeds() if isinstance(value, RaggedSteps) else [value]
    feeds = [np.asarray(indices, np.int32), np.asarray(global_steps, np.int64), *flat]
    return feeds + ([mask] if mask is not None else [])
