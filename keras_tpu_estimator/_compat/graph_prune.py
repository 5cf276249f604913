"""Running part of a traced graph later, eagerly (`tensorflow.python.eager.wrap_function`).

A Scaffold's `init_op`, or the ops an `init_fn` runs through its session,
are built in `model_fn`'s build graph (a `FuncGraph` whose captures are the
model's eager variables). `pruned_graph_function` lifts just what they need
into a function, as `tf.compat.v1.wrap_function(...).prune` does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tensorflow.python.eager import wrap_function as _wrap_function
from tensorflow.python.ops import op_selector as _op_selector


def pruned_graph_function(graph: Any, feeds: Sequence[Any], fetches: Sequence[Any]) -> Callable[..., Any]:
    """A callable `f(*feed_values)` that runs `fetches` of `graph` (`WrappedFunction(graph).prune`).

    Operations among `fetches` give None; tensors their values. Raises
    ValueError when a fetch needs a placeholder that is not fed
    (`op_selector.UnliftableError`).
    """
    wrapped = _wrap_function.WrappedFunction(graph, variable_holder=None)
    try:
        return wrapped.prune(feeds=list(feeds), fetches=list(fetches))
    except _op_selector.UnliftableError as error:
        raise ValueError(str(error)) from error
