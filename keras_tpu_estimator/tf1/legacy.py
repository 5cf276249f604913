"""TF1 model code inside `model_fn`, on Keras 3.

`model_fn_scope()` is entered around every `model_fn` call. Inside it:

- `tf.compat.v1.layers.*` (`dense`, `conv2d`, `batch_normalization`, ...,
  and the classes `Dense`, `Conv2D`, ...) are TF1's own layers, which moved
  to the `tf_keras` package; under Keras 3 TensorFlow otherwise raises
  "`dense` is not available with Keras 3". Nothing global changes: `keras`
  and `tf.keras` stay Keras 3, and the routing ends with the scope.
- TF1 layers' updates (batch norm's moving averages) go to `UPDATE_OPS`, and
  run when the `train_op` depends on them, as in TF1.
- Constructs that cannot run in a traced `model_fn` (a `Session`, queue
  runners, `tf.contrib`) raise an error that names the replacement.
- Tensors and variables are hashable and compare by identity, and a
  variable's `.op.name` is its TF1 name, as in a TF1 graph
  (`_compat.tf1_identity`).
- `tf.compat.v1.train.Saver` records which checkpoint name restores which
  variable, for a Scaffold or a hook to restore (`tf1_saver.TracedSaver`).

`per_replica_collections()` keeps TF1 collections (`LOSSES`,
`REGULARIZATION_LOSSES`, `UPDATE_OPS`, `SUMMARIES`) separate per replica
while `MirroredStrategy` traces the replicas into one graph.
"""

from __future__ import annotations

import contextlib
import threading
import types
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator._compat.tf1_identity import tf1_identity
from keras_tpu_estimator.versions import tf_keras_requirement

from .saver import saver_stand_in

_state = threading.local()

PER_REPLICA_COLLECTIONS = [
    tf.compat.v1.GraphKeys.LOSSES,
    tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES,
    tf.compat.v1.GraphKeys.UPDATE_OPS,
    tf.compat.v1.GraphKeys.SUMMARIES,
]

_TF_KERAS_MISSING = (
    "`tf.compat.v1.layers.{name}` needs the `tf_keras` package, where TensorFlow "
    "moved TF1's layers. Install the release matching your TensorFlow without letting pip "
    "install another TensorFlow: `pip install --no-deps \"{requirement}\"`."
)


class _LegacyLayers(types.ModuleType):
    """Stands in for `tf.compat.v1.layers`; loads `tf_keras`' TF1 layers on first use."""

    def __init__(self, keras_3_layers: Any):
        super().__init__("tf.compat.v1.layers")
        self._keras_3_layers = keras_3_layers

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            layers = _compat.legacy_tf_layers()
        except ImportError:
            message = _TF_KERAS_MISSING.format(name=name, requirement=tf_keras_requirement())
            raise AttributeError(message) from None
        _collect_updates_in_model_fn()
        if hasattr(layers, name):
            return getattr(layers, name)
        return getattr(self._keras_3_layers, name)


@contextlib.contextmanager
def legacy_layers() -> Iterator[None]:
    """Routes `tf.compat.v1.layers` to TF1's layers (from `tf_keras`) while active.

    The model does this around every `model_fn` call. Use it yourself to run
    the same TF1 layer code outside a model, for example in a TF1 graph.

    Example:

    ```python
    with tf.Graph().as_default(), kte.legacy_layers():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4])
        y = tf.compat.v1.layers.dense(x, 2)            # variables dense/kernel, dense/bias
    ```
    """

    def patches() -> list:
        return [
            (module, "layers", _LegacyLayers(module.layers))
            for module in _compat.compat_v1_modules()
        ]

    with _compat.patched_attributes("legacy_layers", patches):
        yield


def inside_model_fn() -> bool:
    """True in a thread that is running `model_fn` under `model_fn_scope()`.

    Example:

    ```python
    with model_fn_scope():
        assert inside_model_fn()
    ```
    """
    return getattr(_state, "depth", 0) > 0


class UnsupportedInModelFnError(RuntimeError):
    """A TF1 construct that cannot run inside a traced `model_fn`.

    Example:

    ```python
    def model_fn(features, labels, mode, params):
        tf.compat.v1.Session()   # raises UnsupportedInModelFnError naming host_call
    ```
    """


_NO_SESSION = (
    "`{name}` cannot be created inside model_fn: model_fn is traced into a "
    "tf.function that Keras runs, so there is no session to run. Return "
    "tensors in the spec instead; compute Python values in a `host_call` or "
    "in a Keras callback."
)
_NO_QUEUES = (
    "`{name}` builds a TF1 queue-runner input pipeline, which cannot run inside "
    "model_fn (no session starts queue runners). Read the data in input_fn with "
    "tf.data, for example `tf.data.TFRecordDataset(files).map(parse).batch(...)`."
)
_QUEUE_FUNCTIONS = [
    "start_queue_runners", "add_queue_runner", "input_producer", "string_input_producer",
    "range_input_producer", "slice_input_producer", "limit_epochs", "batch", "batch_join",
    "maybe_batch", "shuffle_batch", "shuffle_batch_join", "maybe_shuffle_batch",
]
_CONTRIB_REPLACEMENTS = {
    "tpu": "`tf.compat.v1.tpu` (for example `tf.compat.v1.tpu.CrossShardOptimizer`)",
    "summary": "`tf.summary` inside host_call (for example `tf.summary.scalar`)",
    "layers": "`tf.compat.v1.layers` or `keras.layers`",
    "training": "a plain dict for HParams, and `tf.data` for input",
    "data": "`tf.data`",
    "framework": "`tf.compat.v1` (for example `tf.compat.v1.train.get_or_create_global_step`)",
    "opt": "`tf.compat.v1.train` optimizers or Keras optimizers",
    "metrics": "`tf.compat.v1.metrics` in eval_metrics",
}


class _ContribRemovedError(AttributeError):
    """`tf.contrib` was removed in TensorFlow 2 (an AttributeError, so `hasattr` stays False)."""


class _RemovedContrib:
    def __getattr__(self, name: str) -> Any:
        replacement = _CONTRIB_REPLACEMENTS.get(name, "its TensorFlow 2 equivalent")
        raise _ContribRemovedError(
            f"`tf.contrib.{name}` does not exist: TensorFlow 2 removed tf.contrib. "
            f"Use {replacement}."
        )


def _refusing(original: Any, name: str, message: str) -> Any:
    """`original` unchanged, except that it raises inside model_fn."""
    if isinstance(original, type):

        class Refusing(original):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any):
                if inside_model_fn():
                    raise UnsupportedInModelFnError(message.format(name=name))
                super().__init__(*args, **kwargs)

        Refusing.__name__ = Refusing.__qualname__ = original.__name__
        return Refusing

    def refusing(*args: Any, **kwargs: Any) -> Any:
        if inside_model_fn():
            raise UnsupportedInModelFnError(message.format(name=name))
        return original(*args, **kwargs)

    return refusing


def _collect_updates_in_model_fn() -> None:
    """From now on, TF1 layers' `add_update` inside `model_fn` also fills `UPDATE_OPS`.

    tf_keras runs a layer's updates (batch norm's moving averages) as soon as
    they are added, as TF2 does; in a TF1 graph they went to `UPDATE_OPS`, and
    ran when `train_op` depended on them. Here, too: only what is fetched runs.
    Installed once on tf_keras' base `Layer` (it must already be imported);
    outside `model_fn` the method behaves as tf_keras' own.
    """
    layer = _compat.loaded_tf_keras_layer()
    if layer is None or getattr(layer.add_update, "_collects_update_ops", False):
        return
    original = layer.add_update

    def add_update(self: Any, updates: Any) -> None:
        if not inside_model_fn():
            return original(self, updates)
        recorded: list = []

        def recording(update: Any) -> Any:
            def run() -> Any:
                result = update()
                recorded.append(result)
                return result

            return run

        flat = tf.nest.flatten(updates)
        original(self, [recording(u) if callable(u) else u for u in flat])
        recorded += [u for u in flat if not callable(u)]
        for update in recorded:
            if update is not None:
                tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.UPDATE_OPS, update)

    add_update._collects_update_ops = True
    layer.add_update = add_update


def _guard_patches() -> list:
    patches = [(tf, "contrib", _RemovedContrib())]
    for v1 in _compat.compat_v1_modules():
        patches.append((v1, "contrib", _RemovedContrib()))
        for owner, attribute, name in [
            (v1, "Session", "tf.compat.v1.Session"),
            (v1, "InteractiveSession", "tf.compat.v1.InteractiveSession"),
            (v1.train, "MonitoredSession", "tf.compat.v1.train.MonitoredSession"),
            (v1.train, "MonitoredTrainingSession", "tf.compat.v1.train.MonitoredTrainingSession"),
            (v1.train, "QueueRunner", "tf.compat.v1.train.QueueRunner"),
        ]:
            message = _NO_QUEUES if attribute == "QueueRunner" else _NO_SESSION
            patches.append((owner, attribute, _refusing(getattr(owner, attribute), name, message)))
        for attribute in _QUEUE_FUNCTIONS:
            original = getattr(v1.train, attribute, None)
            if original is not None:
                name = f"tf.compat.v1.train.{attribute}"
                patches.append((v1.train, attribute, _refusing(original, name, _NO_QUEUES)))
    return _unique_targets(patches)


def _unique_targets(patches: list) -> list:
    """Drops repeated `(owner, attribute)` pairs (two module objects may share `train`)."""
    seen: set = set()
    unique = []
    for owner, attribute, value in patches:
        if (id(owner), attribute) not in seen:
            seen.add((id(owner), attribute))
            unique.append((owner, attribute, value))
    return unique


@contextlib.contextmanager
def model_fn_scope() -> Iterator[None]:
    """Wraps one `model_fn` call: TF1 layers routed, unsupported constructs refused.

    Example:

    ```python
    with tf.Graph().as_default(), model_fn_scope():   # tf.compat.v1.layers work inside
        spec = model_fn({"x": tf.zeros([4, 4])}, tf.zeros([4, 1]), kte.ModeKeys.TRAIN, {})
    assert spec.train_op is not None
    ```
    """
    _collect_updates_in_model_fn()
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        with (
            legacy_layers(),
            _compat.patched_attributes("model_fn_guards", _guard_patches),
            tf1_identity(),
            saver_stand_in(),
        ):
            yield
    finally:
        _state.depth -= 1


@contextlib.contextmanager
def per_replica_collections(graph: tf.Graph | None = None) -> Iterator[None]:
    """Keeps `PER_REPLICA_COLLECTIONS` of `graph` separate per replica thread.

    Enter it in the thread that calls `strategy.run`.

    Example:

    ```python
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])

    def step(batch):
        tf.compat.v1.losses.add_loss(tf.reduce_sum(batch))
        return tf.compat.v1.losses.get_total_loss()

    with tf.Graph().as_default(), per_replica_collections():
        total = strategy.run(step, args=(tf.ones([2]),))   # each replica's get_total_loss() is its own
    ```
    """
    graph = graph or tf.compat.v1.get_default_graph()
    with _compat.per_thread_collections(graph, PER_REPLICA_COLLECTIONS):
        yield


def summary_names(graph: tf.Graph) -> list[str]:
    """Names of the TF1 summary ops (`tf.compat.v1.summary.*`) created in `graph`.

    Example:

    ```python
    with tf.Graph().as_default() as build_graph:
        tf.compat.v1.summary.scalar("my_loss", tf.constant(0.5))
    assert summary_names(build_graph) == ["my_loss:0"]   # the summaries' tensor names
    ```
    """
    return [op.name for op in graph.get_collection(tf.compat.v1.GraphKeys.SUMMARIES)]
