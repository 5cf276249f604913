"""Entering one strategy's scope from a clean slate, whatever the caller had entered.

`tf.distribute.Strategy.scope()` decides whether to install its variable
creator by looking at the current graph's strategy stack
(`Graph._distribution_strategy_stack`), but variables are made through the
graph's creator stack (`Graph._variable_creator_stack`). A `FuncGraph`
inherits both from the graph it was entered in; a graph that drops the
strategy stack (the build's `default_replica_graph`) keeps the creators. Inside
a user's `with strategy.scope():` the two then disagree: no strategy on the
stack, its creator still in the chain, and entering the scope again puts a
second creator above the first (MirroredStrategy then mirrors its own
per-device variables: an `AssertionError` in `_real_mirrored_creator`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import tensorflow as tf


@contextlib.contextmanager
def only_strategy_scope(strategy: tf.distribute.Strategy) -> Iterator[tf.distribute.Strategy]:
    """`strategy.scope()` entered on empty creator and strategy stacks of the current graph.

    Inside, a variable is made by `strategy`'s creator alone, in its
    cross-replica context, as at a program's top level: no creator or strategy
    of the caller (a user's `strategy.scope()`, a replica thread's, Keras') sees
    it. Both stacks are thread-local and put back on exit.

    Example:

    ```python
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():                      # the user's scope, entered again below
        with tf.init_scope(), only_strategy_scope(strategy):
            variable = tf.Variable(0.0, name="w")   # one MirroredVariable
    assert type(variable).__name__ == "MirroredVariable"
    ```
    """
    graph = tf.compat.v1.get_default_graph()
    creators, strategies = graph._variable_creator_stack, graph._distribution_strategy_stack
    graph._variable_creator_stack = []
    graph._distribution_strategy_stack = []
    try:
        with strategy.scope():
            yield strategy
    finally:
        graph._variable_creator_stack = creators
        graph._distribution_strategy_stack = strategies


def default_strategy() -> tf.distribute.Strategy:
    """The default (no-op) strategy, also inside another strategy's scope (`distribute_lib._get_default_strategy`).

    Example:

    ```python
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0"])
    with mirrored.scope():
        assert tf.distribute.get_strategy() is mirrored
        assert default_strategy() is not mirrored   # the no-op one
    ```
    """
    from tensorflow.python.distribute import distribute_lib

    return distribute_lib._get_default_strategy()
