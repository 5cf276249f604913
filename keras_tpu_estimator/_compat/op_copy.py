"""Private TensorFlow symbols to re-create one op in the current graph (`Graph._create_op_internal`).

Part of `_compat` (see its docstring). Used for TF1 summaries, whose ops are
made again inside the branch that runs only on the steps that write them.
"""

from __future__ import annotations

import tensorflow as tf


def copy_op_here(op: tf.Operation) -> tf.Operation:
    """A copy of `op` (same type, inputs and attributes but colocation) in the current graph.

    Inside a `tf.cond` branch or any `FuncGraph`, inputs from outer graphs are
    captured, as for any op created there.

    Example:

    ```python
    with tf.Graph().as_default():
        write = tf.compat.v1.placeholder(tf.bool, [])
        summary = tf.compat.v1.summary.scalar("loss", tf.constant(0.5))
        copy = tf.cond(write, lambda: copy_op_here(summary.op).outputs[0], lambda: tf.constant(""))
        with tf.compat.v1.Session() as session:
            assert session.run(copy, {write: False}) == b""   # the copy runs only when written
            assert session.run(copy, {write: True}) != b""
    ```
    """
    graph = tf.compat.v1.get_default_graph()
    attrs = {key: value for key, value in op.node_def.attr.items() if key != "_class"}
    return graph._create_op_internal(
        op.type,
        list(op.inputs),
        dtypes=[t.dtype for t in op.outputs],
        attrs=attrs,
        op_def=op.op_def,
    )
