"""Private TensorFlow symbols for TF1 fetch semantics: scratch graphs, copying the needed ops, merge groups.

Part of `_compat` (see its docstring): `tensorflow.python.distribute.distribute_lib`
and `tensorflow.python.framework.func_graph` are wrapped here.
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf
from tensorflow.python.distribute import distribute_lib as _distribute_lib
from tensorflow.python.framework import func_graph as _func_graph
from tensorflow.python.ops import handle_data_util as _handle_data_util

from keras_tpu_estimator._compat.patching import swapped_attribute


@contextlib.contextmanager
def merge_calls_under_creator(creator: Any) -> Iterator[None]:
    """Runs every `merge_call` function with `creator` on top of the creator stack.

    TF1 optimizers create slots and `beta1_power` inside
    `ReplicaContext.merge_call`, which runs in the strategy's thread with the
    strategy's own creator above any replica scope. It also records the ops
    each merge creates (see `copy_needed_ops`). Patches
    `tensorflow.python.distribute.distribute_lib.ReplicaContext.merge_call`
    while active and restores it on exit.
    """
    original = _distribute_lib.ReplicaContext.merge_call

    def merge_call(self: Any, merge_fn: Any, args: Any = (), kwargs: Any = None) -> Any:
        def under_creator(*fn_args: Any, **fn_kwargs: Any) -> Any:
            graph = tf.compat.v1.get_default_graph()
            first = len(graph.get_operations())
            with tf.variable_creator_scope(creator):
                result = merge_fn(*fn_args, **fn_kwargs)
            # Every replica is paused here: what was created is this merge's.
            _MERGE_GROUPS.setdefault(graph, []).append(graph.get_operations()[first:])
            return result

        return original(self, under_creator, args, kwargs)

    with swapped_attribute(_distribute_lib.ReplicaContext, "merge_call", merge_call):
        yield


@contextlib.contextmanager
def scratch_graph(name: str) -> Iterator[tf.Graph]:
    """A child `FuncGraph` of the current graph that adds no automatic control dependencies.

    Ops traced in it run only if `copy_needed_ops` copies them into the real
    graph: TF1's `session.run` semantics. It captures outer tensors as
    placeholders and shares the outer graph's allow-listed collections, as
    any nested `FuncGraph` does (`tensorflow.python.framework.func_graph.FuncGraph`).
    """
    graph = _func_graph.FuncGraph(name)
    # Like a cond or while body: collective ops put their call-time instance
    # keys (`capture_call_time_value`) in the enclosing function, not here.
    graph.is_control_flow_graph = True
    with graph.as_default():
        yield graph


_MERGE_GROUPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _needed_ops(graph: tf.Graph, values: list) -> set:
    """The ops of `graph` that `values` (tensors and operations) depend on, by data or control.

    The ops of one `merge_call` (recorded by `merge_calls_under_creator`) are
    one unit: a cross-replica update or all-reduce runs on every device or on
    none, though each replica's result may depend on its own device's part only.
    """
    group_of = {}
    for group in _MERGE_GROUPS.get(graph, []):
        # A placeholder made during a merge is a capture that later ops share.
        group = [op for op in group if op.type != "Placeholder"]
        for op in group:
            group_of[op] = group
    stack = [v if isinstance(v, tf.Operation) else v.op for v in values]
    needed: set = set()
    while stack:
        op = stack.pop()
        if op in needed or op.graph is not graph:
            continue
        needed.add(op)
        stack.extend(tensor.op for tensor in op.inputs)
        stack.extend(op.control_inputs)
        stack.extend(group_of.get(op, ()))
    return needed


def _creation_order_topologically(graph: tf.Graph, needed: set) -> list:
    """`needed` in creation order, except that an op follows all its inputs.

    Creation order is topological until a gradient rewrites a forward op: a
    while loop's gradient adds later-made accumulators to the forward `While`'s
    inputs. Program order is kept wherever the dependencies allow.
    """
    created = [op for op in graph.get_operations() if op in needed]
    order = {op: index for index, op in enumerate(created)}

    def sources(op: tf.Operation) -> set:
        return {t.op for t in op.inputs if t.op in order} | {c for c in op.control_inputs if c in order}

    waiting = {op: len(sources(op)) for op in created}
    users: dict = collections.defaultdict(list)
    for op in created:
        for source in sources(op):
            users[source].append(op)
    ready = [order[op] for op in created if waiting[op] == 0]  # already a heap: ascending
    result = []
    while ready:
        op = created[heapq.heappop(ready)]
        result.append(op)
        for user in users[op]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, order[user])
    if len(result) != len(order):
        raise ValueError("model_fn's step graph has a cycle; it cannot be run.")
    return result


def _recreate(graph: tf.Graph, op: tf.Operation, inputs: list, control: list) -> tf.Operation:
    """`op` made again in `graph` on `inputs` (same name, attributes but colocation, device, shapes, handle data)."""
    attrs = {key: value for key, value in op.node_def.attr.items() if key != "_class"}
    copy = graph._create_op_internal(
        op.type, inputs, dtypes=[t.dtype for t in op.outputs], name=op.name,
        attrs=attrs, op_def=op.op_def, compute_device=False,
    )
    if op.device:
        copy._set_device(op.device)
    if control:
        copy._add_control_inputs(control)
    for old, new in zip(op.outputs, copy.outputs, strict=True):
        new.set_shape(old.shape)
        if old.dtype in (tf.resource, tf.variant):
            _handle_data_util.copy_handle_data(old, new)
    return copy


def trace_needed(fn: Callable[[], Any], name: str) -> tuple[Any, list[tf.Operation]]:
    """Traces `fn()` in a `scratch_graph` and copies what its result needs into the current graph.

    Returns `fn()`'s result with each tensor and operation replaced by its copy,
    and the ops of the trace that were copied, in creation order (they keep
    their creation tracebacks; the copies' point at this module).
    """
    with scratch_graph(name) as graph:
        result = fn()
    flat = tf.nest.flatten(result, expand_composites=True)
    copied, copies = _copy_needed(graph, flat)
    kept = [op for op in graph.get_operations() if op in copies]
    return tf.nest.pack_sequence_as(result, copied, expand_composites=True), kept


def copy_needed_ops(graph: tf.Graph, values: list) -> list:
    """Copies the ops of `graph` that `values` need into the current graph; returns the copies.

    `graph` is a `scratch_graph`. Ops are copied in creation order as far as
    their dependencies allow, with their device, attributes but colocation, static
    shapes and resource handle data; captured placeholders become the outer
    tensors they stand for (`FuncGraph.captures`), and the functions that
    control flow ops call are added to the current graph
    (`Graph._functions`, `Graph._add_function_recursive`,
    `Graph._create_op_internal`, `handle_data_util.copy_handle_data`).
    Values that are not of `graph` are returned as they are.
    """
    return _copy_needed(graph, values)[0]


def _copy_needed(graph: tf.Graph, values: list) -> tuple[list, dict]:
    """`copy_needed_ops`, also returning `{original op: its copy}`."""
    if graph.deferred_external_captures:
        raise NotImplementedError(
            "model_fn captured a value that is only known when the step runs "
            "(a deferred capture); this is not supported."
        )
    values_of_graph = [
        v for v in values if isinstance(v, (tf.Tensor, tf.Operation)) and v.graph is graph
    ]
    needed = _needed_ops(graph, values_of_graph)
    target = tf.compat.v1.get_default_graph()
    for function in graph._functions.values():
        if not target._is_function(function.name):
            target._add_function_recursive(function)
    tensors = {internal.ref(): external for external, internal in graph.captures}
    copies: dict = {}
    for op in _creation_order_topologically(graph, needed):
        if op.outputs and op.outputs[0].ref() in tensors:
            continue
        missing = [t for t in op.inputs if t.ref() not in tensors]
        if missing:
            raise ValueError(
                f"Cannot run '{op.name}': its input '{missing[0].name}' is a placeholder of "
                "the step, not a value model_fn received."
            )
        control = [copies[c] for c in op.control_inputs if c in copies]
        copy = _recreate(target, op, [tensors[t.ref()] for t in op.inputs], control)
        for old, new in zip(op.outputs, copy.outputs, strict=True):
            tensors[old.ref()] = new
        copies[op] = copy
    result = []
    for value in values:
        if isinstance(value, tf.Operation) and value.graph is graph:
            result.append(copies[value])
        elif isinstance(value, tf.Tensor) and value.graph is graph:
            result.append(tensors[value.ref()])
        else:
            result.append(value)
    return result, copies


def _variable_key(handle: tf.Tensor) -> int:
    """The tensor a resource handle stands for: a captured placeholder's outer tensor (`FuncGraph.captures`)."""
    graph = handle.graph
    while True:
        outer = {internal.ref(): external for external, internal in getattr(graph, "captures", ())}.get(handle.ref())
        if outer is None:
            return id(handle)
        if not hasattr(outer, "op"):  # an eager handle
            return id(outer)
        handle, graph = outer, outer.graph


def replace_reads(values: list, read: tf.Tensor, replacement: tf.Tensor) -> list:
    """`values` recomputed with every read of `read`'s variable replaced by `replacement`.

    `read` is a tensor of a `ReadVariableOp` (or an `Identity` of one, as
    `read_value()` makes) in the current graph. Each `ReadVariableOp` of the
    same variable (the same handle, or a capture of the same outer handle)
    that a value depends on by data becomes `replacement` (an `Identity` of
    it when the read had control inputs); the ops between are re-created in
    the graph (`Graph._create_op_internal`, with `handle_data_util.copy_handle_data`).
    A path through a stateful op is left as it is (re-creating it would run
    it twice). Values that do not read the variable are returned as they are.
    Example: `replace_reads([tf.reshape(step, [1])], before, before)`.
    """
    graph = read.graph
    read_op = read.op
    while read_op.type == "Identity" and read_op.inputs:
        read_op = read_op.inputs[0].op
    if read_op.type != "ReadVariableOp":
        raise ValueError(f"{read.name} is not a read of a variable.")
    key = _variable_key(read_op.inputs[0])
    replaced: dict = {}  # op -> its outputs' replacements, or None: left as it is

    def is_read(op: tf.Operation) -> bool:
        return op.type == "ReadVariableOp" and _variable_key(op.inputs[0]) == key

    order: list = []
    seen: set = set()
    def of_graph(value: Any) -> bool:  # an eager tensor has no graph
        return isinstance(value, tf.Tensor) and getattr(value, "graph", None) is graph

    stack = [(v.op, False) for v in values if of_graph(v)]
    while stack:  # post-order over data inputs: inputs first
        op, expanded = stack.pop()
        if expanded:
            order.append(op)
            continue
        if op in seen:
            continue
        seen.add(op)
        stack.append((op, True))
        if not is_read(op):
            stack.extend((t.op, False) for t in op.inputs if t.graph is graph and t.op not in seen)
    with graph.as_default():
        for op in order:
            if is_read(op):
                if op.control_inputs:
                    with graph.control_dependencies(op.control_inputs):
                        replaced[op] = [tf.identity(replacement)]
                else:
                    replaced[op] = [replacement]
                continue
            changed = [t for t in op.inputs if replaced.get(t.op) is not None]
            if not changed or op.op_def.is_stateful:
                replaced[op] = None
                continue
            inputs = [replaced[t.op][t.value_index] if replaced.get(t.op) is not None else t for t in op.inputs]
            replaced[op] = _recreate(graph, op, inputs, op.control_inputs).outputs
    return [
        replaced[v.op][v.value_index]
        if of_graph(v) and replaced.get(v.op) is not None
        else v
        for v in values
    ]
