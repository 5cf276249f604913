"""XLA shims: which ops XLA compiles on a device, and explicit XLA clusters on ops already traced.

`mark_for_xla` sets on each op the attributes `tf.xla.experimental.jit_scope`
sets on the ops made inside it (`_XlaCompile`, `_XlaScope`,
`_XlaSeparateCompiledGradients`, through `Operation._set_attr`): when the
function runs, TensorFlow's clustering pass (`MarkForCompilationPass`) groups
the marked ops of one scope and device into XLA programs and leaves out the
ops XLA cannot compile. `missing_xla_kernel` reads the kernel registry
(`tensorflow.python.framework.kernels.get_registered_kernels_for_op`), which
lists the `XLA_*_JIT` kernels once XLA has compiled something in the process
(`register_xla_kernels`, which `has_xla_kernel` calls first).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2 as _attr_value_pb2
from tensorflow.python.framework import kernels as _kernels

# Graph plumbing the XLA bridge handles itself rather than through a kernel.
_PLUMBING = frozenset({"Placeholder", "NoOp", "PartitionedCall", "StatefulPartitionedCall", "_Arg", "_Retval"})
# The attributes naming the functions an op calls (cond branches, loop bodies, calls).
_FUNCTION_ATTRS = ("then_branch", "else_branch", "branches", "body", "cond", "f")
# Cross-device ops: they stay between the replicas' clusters.
_CROSS_DEVICE_PREFIXES = ("Collective", "Nccl", "_Send", "_Recv", "_HostSend", "_HostRecv")


@functools.cache
def register_xla_kernels() -> None:
    """Compiles one tiny XLA program, which registers XLA's kernels in the registry (once per process)."""
    with tf.init_scope():
        tf.function(lambda x: x + 1, jit_compile=True, autograph=False)(tf.constant(0))


def _gpu_present() -> bool:
    return bool(tf.config.list_logical_devices("GPU"))


def xla_device_type(op: tf.Operation) -> str:
    """`XLA_GPU_JIT` for an op placed (or, unplaced, likely placed) on a GPU, else `XLA_CPU_JIT`."""
    device = op.device.upper()
    on_gpu = "GPU" in device or (not device and _gpu_present())
    return "XLA_GPU_JIT" if on_gpu else "XLA_CPU_JIT"


@functools.cache
def has_xla_kernel(op_type: str, device_type: str = "XLA_CPU_JIT") -> bool:
    """Whether XLA registers a kernel for `op_type` on `device_type` (XLA's CPU JIT by default)."""
    register_xla_kernels()
    found = _kernels.get_registered_kernels_for_op(op_type).kernel
    return any(kernel.device_type == device_type for kernel in found)


def missing_xla_kernel(op: tf.Operation, device_type: str | None = None) -> bool:
    """True when XLA has no kernel for `op` on `device_type` (default: its device's)."""
    if op.type in _PLUMBING:
        return False
    return not has_xla_kernel(op.type, device_type or xla_device_type(op))


def ops_without_xla_kernel(ops: Iterable[tf.Operation], device_type: str | None = None) -> list[tf.Operation]:
    """The ops of `ops` and of the functions they call (`ops_with_bodies`) that XLA cannot compile."""
    ops = list(ops)
    graph = ops[0].graph if ops else None
    return [op for op in ops_with_bodies(ops, graph) if missing_xla_kernel(op, device_type)]


def _function_graph(name: str, graph: Any) -> Any:
    while graph is not None:
        function = getattr(graph, "_functions", {}).get(name)
        if function is not None:
            return getattr(function, "graph", None)
        graph = getattr(graph, "outer_graph", None)
    return None


def _called_functions(op: tf.Operation) -> Iterator[str]:
    for key in _FUNCTION_ATTRS:
        if key not in op.node_def.attr:
            continue
        value = op.node_def.attr[key]
        if value.HasField("func"):
            yield value.func.name
        yield from (function.name for function in value.list.func)


def ops_with_bodies(ops: Iterable[tf.Operation], graph: Any) -> list[tf.Operation]:
    """`ops`, then the ops of every function they call (recursively), each once."""
    result, seen_graphs, pending = [], set(), list(ops)
    while pending:
        op = pending.pop(0)
        result.append(op)
        for name in _called_functions(op):
            body = _function_graph(name, op.graph) or _function_graph(name, graph)
            if body is not None and id(body) not in seen_graphs:
                seen_graphs.add(id(body))
                pending.extend(o for o in body.get_operations() if o.type != "Placeholder")
    return result


def crosses_devices(op: tf.Operation) -> bool:
    """True for a collective or send/receive op: it must stay outside any one device's cluster."""
    return op.type.startswith(_CROSS_DEVICE_PREFIXES)


def mark_for_xla(ops: Iterable[tf.Operation], scope: str) -> int:
    """Marks `ops` for XLA clusters named `scope` (as `jit_scope` would have); returns how many."""
    marked = 0
    for op in ops:
        if op.type in _PLUMBING or crosses_devices(op):
            continue
        op._set_attr("_XlaCompile", _attr_value_pb2.AttrValue(b=True))
        op._set_attr("_XlaSeparateCompiledGradients", _attr_value_pb2.AttrValue(b=False))
        op._set_attr("_XlaScope", _attr_value_pb2.AttrValue(s=scope.encode()))
        marked += 1
    return marked
