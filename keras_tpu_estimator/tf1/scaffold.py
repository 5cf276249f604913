"""The Scaffold of a traced `model_fn`: its initialisers, and the session its `init_fn` gets.

A Scaffold's initialisers run as TF1's SessionManager ran them
(`run_scaffold_initialisers`, `run_local_init_op`, called by
`ModelFnRunner.start_session` after each call's restore). Their ops live in
the build graph, a `FuncGraph` that nothing runs; `ScaffoldSession.run`
prunes the part a fetch needs into a function (as
`tf.compat.v1.wrap_function(...).prune` does) and calls it eagerly, on the
model's variables, which the build graph captured. So `init_op`, and
`init_fn(scaffold, session)` doing `session.run(assign)` or
`saver.restore(session, ckpt)`, act on the model as in TF1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import tensorflow as tf

from keras_tpu_estimator._compat.graph_prune import pruned_graph_function
from keras_tpu_estimator._compat.tf1_identity import tf1_identity

from .saver import in_traced_graph, restore_by_names


class ScaffoldSession:
    """The session a Scaffold's `init_fn(scaffold, session)` gets: runs ops built in `model_fn`, restores Savers.

    `run(fetches, feed_dict=None)` runs tensors and operations of the build
    graph (assign ops, `init_op`) eagerly on the model's variables: the part
    of the graph they need is pruned into a function
    (`_compat.graph_prune.pruned_graph_function`, what
    `tf.compat.v1.wrap_function(...).prune` does); operations give None,
    tensors NumPy values, variables their values, as `Session.run` did.
    `restore_variables(save_path, names)` is what a `TracedSaver.restore` calls.
    On a `MirroredStrategy` the build graph reaches each variable's first
    component, so after every `run` the other components are set equal to it.

    Example:

    ```python
    w, built = tf.Variable(1.0, name="w"), {}

    @tf.function
    def traced_model_fn():   # as the build traces it: the assign stays in the build graph, never run
        built["assign"] = w.assign(5.0)

    traced_model_fn.get_concrete_function()
    session = ScaffoldSession({"w": w})   # what a Scaffold's init_fn(scaffold, session) gets
    assert session.run(built["assign"]) == 5.0 and w.numpy() == 5.0   # run eagerly, on the variable
    ```
    """

    def __init__(self, variables_by_name: Mapping[str, Any], strategy: tf.distribute.Strategy | None = None):
        self._variables = dict(variables_by_name)
        self._strategy = strategy
        self.graph = None  # set to the build graph of the first op run

    def restore_variables(self, save_path: str, names: Mapping[str, str]) -> None:
        """Assigns each model variable named by a key of `names` from the checkpoint value under its value."""
        restore_by_names(self._variables, save_path, names)

    def run(self, fetches: Any, feed_dict: Mapping[Any, Any] | None = None, options: Any = None,
            run_metadata: Any = None) -> Any:
        """Runs `fetches` (a nested structure of ops, tensors and variables of the build graph)."""
        with tf1_identity():  # tensors as feed_dict keys, as in TF1
            return self._run(fetches, feed_dict)

    def _run(self, fetches: Any, feed_dict: Mapping[Any, Any] | None) -> Any:
        flat = tf.nest.flatten(fetches, expand_composites=False)
        feeds = dict(feed_dict or {})
        # `assign` of a resource variable in the graph gives a variable whose value follows the assign.
        targets = {id(f): _graph_targets(f) for f in flat}
        targets = {key: found for key, found in targets.items() if found}
        graphed = [t for found in targets.values() for t in found] + [k for k in feeds if in_traced_graph(k)]
        graphs = {id(item.graph): item.graph for item in graphed}
        if len(graphs) > 1:
            raise ValueError("Session.run in a Scaffold init_fn fetches ops of more than one model_fn graph.")
        values: dict[int, Any] = {}
        if targets:
            graph = next(iter(graphs.values()))
            self.graph = graph
            try:
                function = pruned_graph_function(graph, list(feeds), [t for found in targets.values() for t in found])
                results = function(*[tf.convert_to_tensor(v) for v in feeds.values()])
            except (ValueError, TypeError, tf.errors.OpError) as error:
                raise ValueError(
                    f"A Scaffold's session.run({fetches!r}) cannot run: {error}. Run ops that need no "
                    "input of model_fn (assigns, variable reads), or feed them with feed_dict."
                ) from error
            results = iter(tf.nest.flatten(results))
            for key, found in targets.items():
                first = [next(results) for _ in found][0]
                values[key] = None if isinstance(found[0], tf.Operation) else _numpy(first)
            self._mirror()
        out = []
        for item in flat:
            if id(item) in values:
                out.append(values[id(item)])
            elif isinstance(item, tf.Variable) or isinstance(item, keras.Variable):
                out.append(_numpy(item))
            elif item is None:
                out.append(None)
            else:
                raise TypeError(f"Cannot run {item!r}: fetch ops, tensors or variables of model_fn's graph.")
        return tf.nest.pack_sequence_as(fetches, out)

    def _mirror(self) -> None:
        """Every component of a distributed variable gets its first component's value."""
        if self._strategy is None or self._strategy.num_replicas_in_sync == 1:
            return
        for variable in self._variables.values():
            value = getattr(variable, "value", variable)
            components = self._strategy.experimental_local_results(value)
            for component in components[1:]:
                component.assign(components[0].read_value())


def _graph_targets(item: Any) -> list:
    """What to fetch from the build graph for `item`, the first giving its value; [] for an eager item.

    A distributed value (a `MirroredVariable`'s assign in the build graph) gives
    every component: all of them run.
    """
    if isinstance(item, tf.distribute.DistributedValues):
        components = [_graph_target(c) for c in item.values]
        return [] if any(c is None for c in components) else components
    target = _graph_target(item)
    return [] if target is None else [target]


def _graph_target(item: Any) -> Any:
    """What to fetch from the build graph for `item`: itself, the value after an assign, or None (eager)."""
    if in_traced_graph(item):
        return item
    if isinstance(item, tf.Variable):
        try:
            op = item.op  # an `assign`'s result: the assign op (an eager variable has none here)
        except AttributeError:
            return None
        if in_traced_graph(op):
            with op.graph.as_default():
                return item.read_value()
    return None


def _numpy(value: Any) -> Any:
    value = value.read_value() if hasattr(value, "read_value") else value
    return value.numpy() if hasattr(value, "numpy") else value


def run_scaffold_initialisers(scaffold: Any, session: ScaffoldSession) -> None:
    """Runs `scaffold.init_op` (fed `init_feed_dict`), then `init_fn(scaffold, session)`, as TF1's SessionManager.

    For a model just initialised (nothing restored). TF1 ran `init_op`
    instead of initialising the variables itself; here they already hold
    their initial values, and `tf.compat.v1.global_variables_initializer()`
    inside `model_fn` groups nothing (`saver_stand_in`).

    Example:

    ```python
    w, b, scaffolds = tf.Variable(1.0, name="w"), tf.Variable(0.0, name="b"), []

    @tf.function
    def traced_scaffold_fn():   # as the build calls scaffold_fn: its ops stay in the build graph
        assign_b = b.assign(7.0)
        scaffolds.append(tf.compat.v1.train.Scaffold(
            init_op=w.assign(3.0).op, init_fn=lambda scaffold, session: session.run(assign_b)))

    traced_scaffold_fn.get_concrete_function()
    run_scaffold_initialisers(scaffolds[0], ScaffoldSession({"w": w, "b": b}))   # a model just initialised
    assert (w.numpy(), b.numpy()) == (3.0, 7.0)   # init_op, then init_fn
    ```
    """
    if scaffold is None:
        return
    if scaffold.init_op is not None:
        session.run(scaffold.init_op, feed_dict=scaffold.init_feed_dict)
    if scaffold.init_fn is not None:
        with tf1_identity():  # what model_fn built stays hashable, as in TF1
            scaffold.init_fn(session)  # the Scaffold passes itself: init_fn(scaffold, session)


def run_local_init_op(scaffold: Any, session: ScaffoldSession) -> None:
    """Runs `scaffold.local_init_op`, as TF1 ran it in every session (after restoring or initialising).

    Example:

    ```python
    count, scaffolds = tf.Variable(5.0, name="count"), []   # e.g. a metric's local variable

    @tf.function
    def traced_scaffold_fn():   # as the build calls scaffold_fn
        scaffolds.append(tf.compat.v1.train.Scaffold(local_init_op=count.assign(0.0).op))

    traced_scaffold_fn.get_concrete_function()
    run_local_init_op(scaffolds[0], ScaffoldSession({"count": count}))   # every session, after the restore
    assert count.numpy() == 0.0
    ```
    """
    if scaffold is not None and scaffold.local_init_op is not None:
        session.run(scaffold.local_init_op)


__all__ = ["ScaffoldSession", "run_local_init_op", "run_scaffold_initialisers"]
