"""Private TensorFlow symbols of TPU serving graphs: the partitioned call around `tpu.rewrite`.

Part of `_compat` (see its docstring).
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf


def tpu_partitioned_call(body: Callable[[], list], name: str = "tpu_subgraph") -> list:
    """Runs `body` as one TF1 function through a `TPUPartitionedCall` on a round-robin TPU core.

    `body` takes no arguments and returns a list of tensors; outer tensors and
    resource variables it uses become the function's captured inputs
    (variables by handle, not by value). The function is named `name` plus a
    hash of its body. The core is picked per call by a
    `TPUOrdinalSelector`. Wraps `tensorflow.python.framework.function.Defun`
    (`capture_resource_var_by_value=False`), whose graph creates
    `tf.compat.v1.get_variable`s in the outer graph, and
    `tensorflow.python.tpu.ops.tpu_ops.tpu_partitioned_call` /
    `tpu_ordinal_selector` (public as `tf.raw_ops.TPUPartitionedCall` and
    `tf.raw_ops.TPUOrdinalSelector`, which do not take a Defun). The Defun's
    graph uses the variable creators of the outermost graph. Checked
    on TensorFlow 2.20 and 2.21; TPUEstimator 2.15 built the same ops.
    """
    from tensorflow.python.framework import function as tf1_function
    from tensorflow.python.tpu.ops import tpu_ops

    with tf.init_scope():  # the graph being exported, outside any function being built
        outer = tf.compat.v1.get_default_graph()

    def tpu_subgraph() -> list:
        # A Defun graph starts with no variable creators; use the exported graph's
        # (`Graph._variable_creator_stack`), so creator scopes entered around
        # model_fn (Keras path names) apply inside. Not those of an enclosing
        # tf.function (the batching op's): they expect a tf.function graph.
        graph = tf.compat.v1.get_default_graph()
        saved = graph._variable_creator_stack
        graph._variable_creator_stack = outer._variable_creator_stack
        # `get_or_create_global_step()` in model_fn finds the exported graph's step instead of
        # creating a second `global_step` (which TPUEstimator's export failed on).
        step_key = tf.compat.v1.GraphKeys.GLOBAL_STEP
        if not graph.get_collection(step_key):
            for step in outer.get_collection(step_key):
                graph.add_to_collection(step_key, step)
        try:
            return body()
        finally:
            graph._variable_creator_stack = saved

    tpu_subgraph.__name__ = name
    tpu_subgraph = tf1_function.Defun(capture_resource_var_by_value=False)(tpu_subgraph)
    output_types = [arg.type for arg in tpu_subgraph.definition.signature.output_arg]
    return tpu_ops.tpu_partitioned_call(
        args=tpu_subgraph.captured_inputs,
        device_ordinal=tpu_ops.tpu_ordinal_selector(),
        Tout=output_types,
        f=tpu_subgraph,
    )


def prune_unconnected_ops_from_xla(graph: tf.Graph) -> None:
    """Keeps unconsumed placeholder-like ops of `graph` out of XLA compilation.

    Wraps `tensorflow.python.tpu.tpu.prune_unconnected_ops_from_xla` (checked
    on TensorFlow 2.20 and 2.21); there is no public alternative.
    """
    from tensorflow.python.tpu import tpu

    tpu.prune_unconnected_ops_from_xla(graph)


def inside_tpu_rewrite() -> bool:
    """Whether a TPU computation (`tf.compat.v1.tpu.rewrite`, `tpu.shard`) is being built.

    Reads `tensorflow.python.tpu.tpu_function.get_tpu_context().number_of_shards`
    (set while a rewrite traces its computation; checked on TensorFlow 2.20
    and 2.21), the state behind "tpu_shard_context cannot be nested".
    """
    from tensorflow.python.tpu import tpu_function

    return tpu_function.get_tpu_context().number_of_shards is not None
