"""Every private TensorFlow and Keras symbol this package touches, in one place.

Each shim names the upstream symbol it wraps; all were checked on the releases
in `versions.SUPPORTED` (TensorFlow 2.20 and 2.21 in CI). If an upgrade moves a symbol, the error
raised here names it. Nothing else in the package imports
`tensorflow.python.*` or reaches into underscore attributes of TF or Keras.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import keras
import tensorflow as tf
from keras.src.backend.common import global_state as _keras_global_state
from keras.src.backend.common import name_scope as _keras_name_scope
from tensorflow.python.framework import func_graph as _func_graph
from tensorflow.python.ops import summary_ops_v2 as _summary_ops_v2
from tensorflow.python.ops import variable_scope as _variable_scope
from tensorflow.python.training import moving_averages as _moving_averages

from keras_tpu_estimator._compat.graph_copy import (  # noqa: F401  (part of this module's API)
    copy_needed_ops,
    merge_calls_under_creator,
    replace_reads,
    scratch_graph,
    trace_needed,
)
from keras_tpu_estimator._compat.patching import swapped_attribute  # noqa: F401  (part of this module's API)
from keras_tpu_estimator._compat.strategy_scope import default_strategy, only_strategy_scope  # noqa: F401  (part of this module's API)
from keras_tpu_estimator._compat.tpu_export import (  # noqa: F401  (part of this module's API)
    inside_tpu_rewrite,
    prune_unconnected_ops_from_xla,
    tpu_partitioned_call,
)
from keras_tpu_estimator.utils import PerThreadCounts, PerThreadList
from keras_tpu_estimator.versions import SUPPORTED, supported_range


def _major_minor(version: str) -> tuple[int, int]:
    parts = version.split(".")
    return int(parts[0]), int(parts[1])


def check_versions() -> None:
    """Warns when TensorFlow or Keras is outside the supported range (`versions.SUPPORTED`)."""
    found = {"tensorflow": tf.__version__, "keras": keras.__version__}
    for name in SUPPORTED:
        if not SUPPORTED[name][0] <= _major_minor(found[name]) <= SUPPORTED[name][1]:
            warnings.warn(
                f"keras_tpu_estimator supports {name} {supported_range(name)}; found "
                f"{found[name]}. It relies on private APIs listed in keras_tpu_estimator/_compat.py.",
                stacklevel=2,
            )


def new_variable_store() -> Any:
    """A TF1 variable store (`tensorflow.python.ops.variable_scope._VariableStore`)."""
    return _variable_scope._VariableStore()


def replace_cached_variables(store: Any, replacements: dict[int, Any]) -> None:
    """In a TF1 variable store's cache (`_VariableStore._vars`), swaps values by `id` for others."""
    cache = store._vars
    for name, variable in list(cache.items()):
        if id(variable) in replacements:
            cache[name] = replacements[id(variable)]


def with_variable_store(store: Any) -> contextlib.AbstractContextManager:
    """Makes `store` the store `tf.compat.v1.get_variable` uses (`variable_scope.with_variable_store`)."""
    return _variable_scope.with_variable_store(store)


@contextlib.contextmanager
def default_replica_graph(name: str) -> Iterator[tf.Graph]:
    """A throw-away `FuncGraph` in which no `tf.distribute` strategy is active.

    Used to trace `model_fn` once at build time in the default replica context
    while variables are created eagerly under the model's strategy
    (`FuncGraph`, `Graph._distribution_strategy_stack`).
    """
    graph = _func_graph.FuncGraph(name)
    with graph.as_default():
        graph._distribution_strategy_stack = []
        yield graph


@contextlib.contextmanager
def moving_averages_on_first_component(strategy: tf.distribute.Strategy) -> Iterator[None]:
    """While active, `assign_moving_average` updates a distributed variable's first component.

    For the build graph, which traces in no replica context: there TF's
    cross-replica update indexes a distributed variable by itself
    (`ExponentialMovingAverage.apply` raised "tuple indices must be integers
    ..., not MirroredVariable"). Nothing in the build graph runs, so the first
    component (of the average and of the averaged variable) serves. Patches
    `tensorflow.python.training.moving_averages.assign_moving_average`.
    """
    original = _moving_averages.assign_moving_average

    def first(value: Any) -> Any:
        return strategy.experimental_local_results(value)[0] if isinstance(value, tf.Variable) else value

    def on_first_component(variable: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        return original(first(variable), first(value), *args, **kwargs)

    with swapped_attribute(_moving_averages, "assign_moving_average", on_first_component):
        yield


@contextlib.contextmanager
def fresh_keras_auto_names() -> Iterator[None]:
    """Keras auto-names (`dense`, `dense_1`, ...) restart from zero inside this scope.

    So unnamed Keras layers built inline in `model_fn` get the same names on
    every trace (Keras `global_state` attribute `object_name_uids`).
    """
    key = "object_name_uids"
    saved = _keras_global_state.get_global_attribute(key)
    _keras_global_state.set_global_attribute(key, collections.defaultdict(int))
    try:
        yield
    finally:
        _keras_global_state.set_global_attribute(key, saved)


@contextlib.contextmanager
def fresh_tf_keras_names() -> Iterator[None]:
    """tf_keras auto-names (`sequential`, `dense_1`, ...) restart in this thread inside this scope.

    As in each TF1 graph, so a tf_keras model built in `model_fn` gets the same
    names on every call and in every replica thread (tf_keras counts names per
    graph in `tf_keras.src.backend.PER_GRAPH_OBJECT_NAME_UIDS`). Nothing to do
    before tf_keras is imported.
    """
    backend = sys.modules.get("tf_keras.src.backend")
    if backend is None:
        yield
        return
    graph = tf.compat.v1.get_default_graph()
    counts = backend.PER_GRAPH_OBJECT_NAME_UIDS.get(graph)
    if not isinstance(counts, PerThreadCounts):
        counts = PerThreadCounts()
        backend.PER_GRAPH_OBJECT_NAME_UIDS[graph] = counts
    thread = threading.get_ident()
    saved = counts.by_thread.get(thread)
    counts.by_thread[thread] = collections.defaultdict(int)
    try:
        yield
    finally:
        if saved is None:
            counts.by_thread.pop(thread, None)
        else:
            counts.by_thread[thread] = saved


def keras_name_path() -> str:
    """The Keras layer path being built (`dense_1`), or "" outside Keras layers.

    Keras' own path (`keras.src.backend.common.name_scope.current_path`) is not
    uniquified by the graph, unlike TF name scopes (`dense_1_1`).
    """
    return _keras_name_scope.current_path()


def track_variable(layer: keras.layers.Layer, variable: keras.Variable) -> None:
    """Makes `layer` own `variable` (Keras `Layer._track_variable`)."""
    layer._track_variable(variable)


def is_tpu_strategy(strategy: tf.distribute.Strategy) -> bool:
    """True for `TPUStrategy` and its experimental variants."""
    return any(cls.__name__.startswith("TPUStrategy") for cls in type(strategy).__mro__)


@contextlib.contextmanager
def unpacked_tpu_variables(strategy: tf.distribute.Strategy) -> Iterator[None]:
    """TPU variables created inside are not packed (`TPUStrategy._enable_packed_variable_in_eager_mode`).

    Outside a TPU replica context, each read of a packed `TPUDistributedVariable`
    makes a new handle, so `tf.gradients` finds no path from the loss to the
    variable in the build graph ("No gradients provided"); TF1 optimizers need it.
    """
    flag = "_enable_packed_variable_in_eager_mode"
    if not is_tpu_strategy(strategy) or not getattr(strategy, flag, False):
        yield
        return
    with swapped_attribute(strategy, flag, False):
        yield


class _AdoptedVariable(keras.Variable):
    """A `keras.Variable` that wraps an existing `tf.Variable` instead of making one.

    Overrides the TensorFlow backend's `Variable._initialize` (Keras 3.15) and,
    given a `path`, sets Keras' private `Variable._path` (Keras forbids "/" in
    `name` but `path` is what `weights`, summaries and optimizers show).
    """

    def __init__(self, tf_variable: tf.Variable, name: str, path: str | None = None, **kwargs: Any):
        self._adopted = tf_variable
        super().__init__(
            initializer=lambda shape, dtype: None,
            shape=tf_variable.shape,
            dtype=tf_variable.dtype.name,
            trainable=tf_variable.trainable,
            name=name,
            **kwargs,
        )
        if path is not None:
            self._path = path

    def _initialize(self, value: Any) -> None:
        self._value = self._adopted
        del self._adopted


def adopt_variable(
    tf_variable: tf.Variable, name: str, path: str | None = None, **kwargs: Any
) -> keras.Variable:
    """Wraps `tf_variable` (plain, mirrored or TPU) in a `keras.Variable` named `name`.

    `path` (default: Keras' own, the enclosing layer path and `name`) may hold
    "/" (`mlp/hidden/kernel`), which `name` may not.
    """
    return _AdoptedVariable(tf_variable, name, path, **kwargs)


@contextlib.contextmanager
def recording_init_from_checkpoint(calls: list) -> Iterator[None]:
    """Records `tf.compat.v1.train.init_from_checkpoint(ckpt, map)` calls instead of running them.

    Inside a build graph, TF1's version would set graph initializers on eager
    variables (no effect); the model replays the calls eagerly after the build.
    Patches the `tf.compat.v1.train` module attribute while active.
    """
    module = tf.compat.v1.train

    def record(ckpt_dir_or_file: str, assignment_map: Any) -> None:
        calls.append((ckpt_dir_or_file, dict(assignment_map)))

    with swapped_attribute(module, "init_from_checkpoint", record):
        yield


@contextlib.contextmanager
def keras_layer_variables_named_by_path() -> Iterator[None]:
    """In a TF1 graph, names Keras-layer variables by Keras' path (`dense_1/kernel`).

    Graph name scopes are uniquified (`dense_1_1`), Keras paths are not; a
    trailing "/" makes the name absolute for `tf.Variable` in graph mode.
    """

    def creator(next_creator: Any, **kwargs: Any) -> Any:
        path = keras_name_path()
        if path:
            kwargs["name"] = f"{path}/{kwargs.get('name') or 'Variable'}/"
        return next_creator(**kwargs)

    with tf.variable_creator_scope(creator):
        yield


def mark_variables_saved(builder: Any) -> None:
    """Lets `tf.compat.v1.saved_model.Builder.add_meta_graph` follow variables saved by hand.

    Sets `SavedModelBuilder._has_saved_variables` (TF 2.21): a TPU-only export
    saves variables from a CPU graph, since no session can run in a graph of
    `tpu.rewrite` ops on a CPU.
    """
    builder._has_saved_variables = True


_PATCH_LOCK = threading.Lock()
_PATCH_DEPTH: collections.Counter = collections.Counter()
_PATCH_SAVED: dict[str, list] = {}
_MISSING = object()


@contextlib.contextmanager
def patched_attributes(key: str, patches: Callable[[], list]) -> Iterator[None]:
    """Sets attributes while any holder of `key` is active; restores them after the last.

    `patches()` returns `[(owner, attribute, value), ...]`; it is called when the
    first holder enters. Reference counted and thread-safe, so it can be
    entered by the thread that calls `strategy.run` and again by every replica
    thread while the first is still inside.
    """
    with _PATCH_LOCK:
        if _PATCH_DEPTH[key] == 0:
            planned = patches()
            _PATCH_SAVED[key] = [
                (owner, name, getattr(owner, name, _MISSING)) for owner, name, _ in planned
            ]
            for owner, name, value in planned:
                setattr(owner, name, value)
        _PATCH_DEPTH[key] += 1
    try:
        yield
    finally:
        with _PATCH_LOCK:
            _PATCH_DEPTH[key] -= 1
            if _PATCH_DEPTH[key] == 0:
                for owner, name, value in reversed(_PATCH_SAVED.pop(key)):
                    if value is _MISSING:
                        delattr(owner, name)
                    else:
                        setattr(owner, name, value)


def set_collections(graph: tf.Graph, values: dict[str, list]) -> None:
    """Gives `graph` new per-thread lists for the collections `values` names (`Graph._collections`).

    A `FuncGraph` shares its variable collections with the graph it was traced
    in; new lists keep what this graph gathers its own, and each replica thread
    of a `MirroredStrategy` (one graph) its own, as each TPU program's trace.
    """
    for key, members in values.items():
        graph._collections[key] = PerThreadList(members)


@contextlib.contextmanager
def per_thread_collections(graph: tf.Graph, keys: list[str]) -> Iterator[None]:
    """Makes the graph collections `keys` private to each thread while active.

    `MirroredStrategy` traces every replica into the same graph, one thread
    per replica, so TF1 collections (`LOSSES`, `UPDATE_OPS`, ...) would mix
    the replicas' tensors. Replaces entries of the private `Graph._collections`.
    """
    collections_by_key = graph._collections
    saved = {key: collections_by_key.get(key) for key in keys}
    for key in keys:
        if not isinstance(saved[key], PerThreadList):
            collections_by_key[key] = PerThreadList(saved[key] or [])
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                collections_by_key.pop(key, None)
            else:
                collections_by_key[key] = value


def compat_v1_modules() -> list[Any]:
    """Every module object that user code may hold as `tf.compat.v1`.

    `tf.compat.v1` starts as `tensorflow._api.v2.compat.v1` and becomes the
    module `tensorflow.compat.v1` once that is imported (tf_keras does it);
    code may hold either, so attributes are patched on both.
    """
    modules = [importlib.import_module("tensorflow.compat.v1"), tf.compat.v1]
    modules.append(importlib.import_module("tensorflow._api.v2.compat.v1"))
    unique: list[Any] = []
    for module in modules:
        if all(module is not seen for seen in unique):
            unique.append(module)
    return unique


def legacy_tf_layers() -> Any:
    """TF1's `tf.compat.v1.layers`, which moved to `tf_keras` (private API path).

    Raises ImportError when `tf_keras` is not installed.
    """
    return importlib.import_module("tf_keras.api._v1.keras.__internal__.legacy.layers")


def loaded_tf_keras_layer() -> Any:
    """tf_keras' base `Layer` class (`tf_keras.src.engine.base_layer.Layer`) if tf_keras is loaded, else None."""
    module = sys.modules.get("tf_keras.src.engine.base_layer")
    return None if module is None else module.Layer


def cross_shard_parts(optimizer: Any) -> tuple[Any, str, Any]:
    """`(wrapped optimizer, reduction, group_assignment)` of a `CrossShardOptimizer`."""
    return optimizer._opt, optimizer._reduction, optimizer._group_assignment


def stop_at_step_hook_target(hook: Any, global_step: int) -> int | None:
    """The global step a `tf.compat.v1.train.StopAtStepHook` stops at (None for other hooks).

    Reads its private `_last_step` / `_num_steps` (the constructor's
    `last_step` / `num_steps`), stable since TF 1.x.
    """
    if not isinstance(hook, tf.compat.v1.train.StopAtStepHook):
        return None
    if hook._last_step is not None:
        return hook._last_step
    return global_step + hook._num_steps


def checkpoint_saver_hook_parts(hook: Any) -> tuple[str, int | None, float | None, list]:
    """`(checkpoint_dir, save_steps, save_secs, listeners)` of a `CheckpointSaverHook`.

    Reads its private `_checkpoint_dir`, `_timer` (a `SecondOrStepTimer`) and
    `_listeners`, stable since TF 1.x.
    """
    timer = hook._timer
    return hook._checkpoint_dir, timer._every_steps, timer._every_secs, list(hook._listeners)


def summary_writer_init_ops() -> list:
    """The init ops of the TF2 summary writers made in the default graph.

    TF keeps them in the collection `summary_ops_v2._SUMMARY_WRITER_INIT_COLLECTION_NAME`.
    """
    return tf.compat.v1.get_collection(_summary_ops_v2._SUMMARY_WRITER_INIT_COLLECTION_NAME)


def set_distribute_strategy(model: keras.Model, strategy: tf.distribute.Strategy) -> None:
    """Makes `model.distribute_strategy` return `strategy` (Keras' `Model._distribute_strategy`)."""
    model._distribute_strategy = strategy


class _CheckpointForManager:
    """What `tf.train.CheckpointManager.save` calls on its checkpoint: `save_counter` and `_write`."""

    def __init__(self, write: Callable[[str], Any]):
        self._write_prefix = write
        with tf.init_scope():
            self.save_counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="save_counter")

    def _write(self, prefix: str, options: Any = None) -> str:
        self._write_prefix(prefix)
        for callback in getattr(options, "experimental_write_callbacks", None) or ():
            callback(prefix)
        return prefix


def checkpoint_for_manager(write: Callable[[str], Any]) -> Any:
    """A checkpoint object for `tf.train.CheckpointManager` whose saves call `write(prefix)`.

    The manager numbers, records and deletes checkpoints; it writes through
    the private `Checkpoint._write(prefix, options)` protocol (the signature
    checked on TF 2.20 and 2.21).
    """
    return _CheckpointForManager(write)


def bound_call(concrete: Any, args: tuple, varying: int) -> Callable[[Any], Any]:
    """`call(value) == concrete(*args)` with `args[varying]` replaced by `value`, the rest bound once.

    A concrete function's call canonicalises and flattens its arguments every
    time (a fifth of a small execution's host time). An execution loop calls it
    with the same iterator and only a new step count, so the other arguments'
    flat tensors (the iterator's resource handles, constant for its life) are
    computed once and the call goes straight to `ConcreteFunction._call_flat`
    (the private step of its public `__call__`, with the same gradient-tape
    handling). `args[varying]` must be the last tensor argument (later ones
    are Python values). Falls back to the public call where that method is missing.
    """
    def public(value: Any) -> Any:
        return concrete(*args[:varying], value, *args[varying + 1 :])

    if not hasattr(concrete, "_call_flat") or not hasattr(concrete, "function_type"):
        return public
    from tensorflow.python.eager.polymorphic_function import function_type_utils

    bound = function_type_utils.canonicalize_function_inputs(args, {}, concrete.function_type)
    flat = list(concrete.function_type.unpack_inputs(bound))
    head = flat[:-1]  # `args[varying]` is a single tensor: the last flat input

    def call(value: Any) -> Any:
        return concrete._call_flat([*head, value], captured_inputs=concrete.captured_inputs)

    return call


def tensorflow_python() -> Any:
    """The package `tensorflow.python` (private; `install()` hangs `tensorflow.python.estimator` on it)."""
    return importlib.import_module("tensorflow.python")


def eager_mode() -> contextlib.AbstractContextManager:
    """Runs the block eagerly in a program that disabled eager execution (`context.eager_mode`)."""
    from tensorflow.python.eager import context

    return context.eager_mode()


def while_loop_v2(cond: Callable, body: Callable, loop_vars: list, parallel_iterations: int = 10) -> Any:
    """A `tf.while_loop` with control flow v2 (`while_v2.while_loop`) in any graph.

    `tf.while_loop` in a plain `tf.Graph` follows the process-wide switch, which
    `disable_v2_behavior()` turns to v1 control flow: its body then opens a
    `while/` name scope that would reach summary tags.
    """
    from tensorflow.python.ops import while_v2

    return while_v2.while_loop(cond, body, loop_vars, parallel_iterations=parallel_iterations,
                               return_same_structure=True)
