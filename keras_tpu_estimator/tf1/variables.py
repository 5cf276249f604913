"""The variable store: TF1-named variables created once and owned by a Keras model.

`model_fn` runs inside traced functions, once per trace and, under a
`MirroredStrategy`, once per replica. Every variable it asks for
(`tf.compat.v1.get_variable`, Keras layers built inline, TF1 optimizer slots,
the global step) must map to one variable that the Keras model owns, keyed by
its TF1 name (`dense/kernel`, `global_step`, `dense/kernel/Adam`).

This module owns that mapping: `VariableStore.scope()` is entered around every
`model_fn` call; variables are created only while `creating()` is active (the
build), and a variable requested later is an error that names it. It knows
nothing of modes, specs or loops.
"""

from __future__ import annotations

import contextlib
import re
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import keras
import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.utils import PerThreadList

GLOBAL_STEP_NAME = "global_step"
_REPLICA_PREFIX = re.compile(r"^(replica_\d+/)+")

_AGGREGATION = {
    tf.VariableAggregation.NONE: "none",
    tf.VariableAggregation.SUM: "sum",
    tf.VariableAggregation.MEAN: "mean",
    tf.VariableAggregation.ONLY_FIRST_REPLICA: "only_first_replica",
}
_SYNCHRONIZATION = {
    tf.VariableSynchronization.AUTO: "auto",
    tf.VariableSynchronization.NONE: "none",
    tf.VariableSynchronization.ON_WRITE: "on_write",
    tf.VariableSynchronization.ON_READ: "on_read",
}


class NewVariableAfterBuildError(ValueError):
    """Raised when `model_fn` asks for a variable that its build did not create."""


class VariableStore:
    """Maps TF1 variable names to Keras variables owned by one Keras layer or model.

    Args:
        owner: `keras.layers.Layer`. The model that tracks every variable.
        strategy: `tf.distribute.Strategy` under which variables are created.

    Example:

    ```python
    store = VariableStore(model, tf.distribute.get_strategy())
    with store.creating(), store.scope():
        w = tf.compat.v1.get_variable("w", [3], initializer=tf.zeros_initializer())
    store.variables_by_name["w"]  # a keras.Variable named "w" in TF1 terms
    ```

    Each variable's Keras `path` is its TF1 name (`mlp/hidden/kernel`), so
    `model.weights`, TensorBoard and Keras optimizers show it; its `name`
    (`mlp__hidden__kernel`) has no "/", which Keras forbids in names.
    """

    def __init__(self, owner: keras.layers.Layer, strategy: tf.distribute.Strategy):
        self._owner = owner
        self._strategy = strategy
        self._tf1_store = _compat.new_variable_store()
        self._by_name: dict[str, keras.Variable] = {}
        # TF1 local variables (metric accumulators): {name: initial value}.
        self._local_initial: dict[str, Any] = {}
        self._stand_ins: dict[int, Any] = {}
        self._keys_by_value: dict[int, str] = {}  # {id(variable.value): name}
        self._collections: dict[str, list[str]] = {}  # {name: the TF1 collections it was created in}
        self._fresh_graphs: weakref.WeakSet = weakref.WeakSet()  # traced graphs whose collections started fresh
        self._creation_allowed = False
        self._local = threading.local()
        self.global_step = self._create(
            GLOBAL_STEP_NAME,
            initial_value=tf.zeros([], tf.int64),
            trainable=False,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )

    @property
    def variables_by_name(self) -> dict[str, keras.Variable]:
        """A copy of the `{TF1 name: keras.Variable}` mapping."""
        return dict(self._by_name)

    @property
    def local_names(self) -> list[str]:
        """Names of TF1 local variables (`LOCAL_VARIABLES`, such as metric accumulators).

        A TF1 `Saver` did not save them and every session started them from
        their initial value.
        """
        return list(self._local_initial)

    def reset_local_variables(self) -> None:
        """Sets every local variable back to its initial value, as a new TF1 session did."""
        for name, value in self._local_initial.items():
            self._by_name[name].assign(value)

    @contextlib.contextmanager
    def creating(self) -> Iterator[None]:
        """Allows new variables while active (the build of one mode)."""
        self._creation_allowed = True
        self._stand_ins = {}
        try:
            yield
        finally:
            self._creation_allowed = False
            # The TF1 store caches what the build got; later traces get the real variable.
            _compat.replace_cached_variables(self._tf1_store, self._stand_ins)

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Routes every variable request inside to this store.

        Enter it in the thread that calls `strategy.run` (so that
        `merge_call` code, which runs there, sees it) and again around each
        `model_fn` call. It installs the TF1 store with `AUTO_REUSE`, fills
        the TF1 collections `TRAINABLE_VARIABLES`, `GLOBAL_VARIABLES` and
        `GLOBAL_STEP` with the model's variables, and restarts Keras' and
        tf_keras' auto-naming so inline layers get the same names on every
        trace and replica, as in each TF1 graph.
        """
        graph = tf.compat.v1.get_default_graph()
        saved_entry = getattr(self._local, "entry", None)
        self._local.entry = graph.get_name_scope()
        with contextlib.ExitStack() as stack:
            stack.enter_context(_compat.with_variable_store(self._tf1_store))
            stack.enter_context(
                tf.compat.v1.variable_scope(
                    tf.compat.v1.get_variable_scope(),
                    reuse=tf.compat.v1.AUTO_REUSE,
                    auxiliary_name_scope=False,
                    custom_getter=self._joining_getter,
                )
            )
            stack.enter_context(tf.variable_creator_scope(self._creator))
            stack.enter_context(_compat.merge_calls_under_creator(self._creator))
            stack.enter_context(_compat.fresh_keras_auto_names())
            stack.enter_context(_compat.fresh_tf_keras_names())
            stack.enter_context(self._collections_filled(graph))
            try:
                yield
            finally:
                self._local.entry = saved_entry

    @contextlib.contextmanager
    def _collections_filled(self, graph: tf.Graph) -> Iterator[None]:
        """The TF1 variable collections of `graph` as a fresh TF1 graph held them when `model_fn` began.

        A traced graph (a build, a step, a loop body) starts with only `global_step`
        (the Estimator created it before calling `model_fn`); each variable joins its
        collections when `model_fn` first asks for it in that graph, in that order, as
        TF1 created them. What a graph gathered stays for the rest of its trace
        (`scaffold_fn`, metrics). Other graphs see every variable while the scope is active.
        """
        if getattr(graph, "building_function", False):
            if graph not in self._fresh_graphs:
                self._fresh_graphs.add(graph)
                _compat.set_collections(graph, {
                    tf.compat.v1.GraphKeys.GLOBAL_VARIABLES: [self.global_step.value],
                    tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES: [],
                    tf.compat.v1.GraphKeys.LOCAL_VARIABLES: [],
                    tf.compat.v1.GraphKeys.GLOBAL_STEP: [self.global_step.value],
                })
            yield
            return
        keys = {
            tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES: [
                v.value for v in self._by_name.values() if v.trainable
            ],
            tf.compat.v1.GraphKeys.GLOBAL_VARIABLES: [
                v.value for n, v in self._by_name.items() if n not in self._local_initial
            ],
            tf.compat.v1.GraphKeys.LOCAL_VARIABLES: [
                self._by_name[n].value for n in self._local_initial
            ],
            tf.compat.v1.GraphKeys.GLOBAL_STEP: [self.global_step.value],
        }
        saved = {}
        for key, values in keys.items():
            ref = graph.get_collection_ref(key)
            saved[key] = list(ref)
            ref[:] = values
        try:
            yield
        finally:
            for key, values in saved.items():
                graph.get_collection_ref(key)[:] = values

    def _joining_getter(self, getter: Any, *args: Any, **kwargs: Any) -> Any:
        """`get_variable` as TF1's store gives it, then joins the graph's collections (the store caches reuses)."""
        value = getter(*args, **kwargs)
        key = self._keys_by_value.get(id(value))
        if key is not None:
            self._join_collections(key, self._by_name[key])
        return value

    def _join_collections(self, key: str, variable: keras.Variable) -> None:
        """Adds a reused variable to its TF1 collections of the current graph, once (as TF1 created it there)."""
        graph = tf.compat.v1.get_default_graph()
        if not getattr(graph, "building_function", False):
            return
        value = variable.value
        keys = list(self._collections.get(key) or [tf.compat.v1.GraphKeys.GLOBAL_VARIABLES])
        if variable.trainable:
            keys.append(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
        # A variable asked for in cross-replica code (a TF1 optimizer's slots, made in
        # merge_call) joins every replica's collections, as in the one TPU trace.
        everywhere = tf.distribute.in_cross_replica_context()
        for collection in keys:
            ref = graph.get_collection_ref(collection)
            if not any(member is value for member in ref):
                if everywhere and isinstance(ref, PerThreadList):
                    ref.append_everywhere(value)
                else:
                    ref.append(value)

    def _key(self, name: str | None) -> str:
        if name and name.endswith("/"):  # TF treats a trailing "/" as an absolute name
            return _REPLICA_PREFIX.sub("", name[:-1])
        keras_path = _compat.keras_name_path()
        if keras_path:
            return f"{keras_path}/{name}"
        scope = tf.compat.v1.get_default_graph().get_name_scope()
        entry = getattr(self._local, "entry", None) or ""
        if entry and (scope == entry or scope.startswith(entry + "/")):
            scope = scope[len(entry) :].lstrip("/")
        full = f"{scope}/{name or 'Variable'}" if scope else (name or "Variable")
        full = _REPLICA_PREFIX.sub("", full)
        return full.split(":")[0]

    def _creator(self, next_creator: Any, **kwargs: Any) -> Any:
        key = self._key(kwargs.get("name"))
        variable = self._by_name.get(key)
        if variable is not None:
            self._join_collections(key, variable)
        else:
            if not self._creation_allowed:
                raise NewVariableAfterBuildError(
                    f"`model_fn` created the variable '{key}' after the model was built. "
                    "Every variable must be created when the model is built, on the first "
                    "call of each mode; later traces may only reuse variables by name. "
                    "Give layers fixed names and create variables unconditionally (not "
                    "inside a branch that depends on the step or the batch)."
                )
            variable = self._create(
                key,
                initial_value=kwargs.get("initial_value"),
                dtype=kwargs.get("dtype"),
                trainable=kwargs.get("trainable"),
                aggregation=kwargs.get("aggregation"),
                synchronization=kwargs.get("synchronization"),
            )
            keys = kwargs.get("collections") or [tf.compat.v1.GraphKeys.GLOBAL_VARIABLES]
            self._collections[key] = [k for k in keys if k != tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES]
            if tf.compat.v1.GraphKeys.LOCAL_VARIABLES in keys:
                with tf.init_scope():
                    first = self._strategy.experimental_local_results(variable.value)[0]
                    self._local_initial[key] = first.numpy()
            graph = tf.compat.v1.get_default_graph()
            for collection in keys:
                graph.add_to_collection(collection, variable.value)
            if variable.trainable:
                graph.add_to_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES, variable.value)
        value = variable.value
        if self._creation_allowed and value.synchronization == tf.VariableSynchronization.ON_READ:
            # The build traces in no replica context, where a sync-on-read
            # variable refuses updates (`tf.compat.v1.metrics`' assign_add);
            # nothing runs there, so one component stands in for it.
            stand_in = self._strategy.experimental_local_results(value)[0]
            self._stand_ins[id(stand_in)] = value
            self._keys_by_value[id(stand_in)] = key
            return stand_in
        return value

    def _create(
        self,
        key: str,
        initial_value: Any,
        dtype: Any = None,
        trainable: bool | None = None,
        aggregation: Any = None,
        synchronization: Any = None,
    ) -> keras.Variable:
        synchronization = synchronization or tf.VariableSynchronization.AUTO
        if trainable is None:
            trainable = synchronization != tf.VariableSynchronization.ON_READ
        with tf.init_scope():
            value = initial_value() if callable(initial_value) else initial_value
            if isinstance(value, tf.Tensor) and not hasattr(value, "numpy"):
                static = tf.get_static_value(value)
                if static is None:
                    raise ValueError(
                        f"The initial value of variable '{key}' depends on tensors computed "
                        "inside `model_fn`. Pass an initializer (for example "
                        "`tf.compat.v1.get_variable(name, shape, initializer=...)`) instead."
                    )
                value = static
            value = tf.convert_to_tensor(value, dtype=dtype)
            # The store's strategy alone makes the variable: not a creator the caller
            # entered (a user's `with strategy.scope():` reaches the build graph as a
            # creator, with no strategy on its stack), nor this store's own.
            with (
                _compat.only_strategy_scope(self._strategy),
                tf.compat.v1.name_scope(None),
                _compat.unpacked_tpu_variables(self._strategy),
            ):
                tf_variable = tf.Variable(
                    value,
                    name=key,
                    trainable=trainable,
                    aggregation=aggregation or tf.VariableAggregation.NONE,
                    synchronization=synchronization,
                )
            variable = _compat.adopt_variable(
                tf_variable,
                key.replace("/", "__"),
                path=key,
                aggregation=_AGGREGATION[aggregation or tf.VariableAggregation.NONE],
                synchronization=_SYNCHRONIZATION[synchronization],
            )
        _compat.track_variable(self._owner, variable)
        self._by_name[key] = variable
        self._keys_by_value[id(variable.value)] = key
        return variable
