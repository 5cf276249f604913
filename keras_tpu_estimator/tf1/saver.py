"""TF1 `Saver`s made inside a traced `model_fn`: which checkpoint name restores which variable.

TPU programs build `tf.compat.v1.train.Saver(ema.variables_to_restore())` in
`model_fn` or `scaffold_fn` and return it in a `Scaffold`, so evaluation
restores each model variable from its moving average
(`w <- w/ExponentialMovingAverage`); others build one for a
`Scaffold(init_fn=lambda scaffold, sess: saver.restore(sess, ckpt))` or a
hook's `after_create_session`. Inside a traced graph there is no session to
run a real Saver's ops, so while `model_fn` runs (`saver_stand_in()`, entered
by `legacy.model_fn_scope()`) `tf.compat.v1.train.Saver` is `TracedSaver`:
it records `{model variable TF1 name: checkpoint name}` (`names`) and its
`restore(sess, save_path)` calls `sess.restore_variables(save_path, names)`,
which every session object this library hands to user code provides (with
`restore_by_names`). Outside a traced graph (an export's TF1 graph) the same
call makes TensorFlow's own Saver.
A Scaffold's initialisers and its `init_fn` session are `scaffold.py`'s.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

import keras
import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.model_dir import restore_checkpoint

_REAL_SAVER = tf.compat.v1.train.Saver
_REPLICA_SUFFIX = re.compile(r"/replica_\d+$")


def variable_name(variable: Any) -> str:
    """The TF1 name of a variable `model_fn` holds (`dense/kernel`), as `variable.op.name` gave it.

    Example:

    ```python
    variable_name(tf.compat.v1.get_variable("w", [1]))   # 'w'
    ```
    """
    if isinstance(variable, keras.Variable):  # a Keras layer's variable: its path is the TF1 name
        return variable.path
    name = getattr(variable, "name", None)
    if not isinstance(name, str):
        raise TypeError(
            f"A Saver's var_list holds {variable!r}, which is not a variable. Pass variables, or "
            "a dict {checkpoint name: variable} such as ema.variables_to_restore()."
        )
    return _REPLICA_SUFFIX.sub("", name.split(":")[0])


def saver_names(var_list: Any, allow_empty: bool = False) -> dict[str, str]:
    """`{model variable TF1 name: checkpoint name}` for a Saver's `var_list`, as TF1's Saver read it.

    A dict maps checkpoint names to variables; a list (or None: the graph's
    global variables) saves each variable under its own name.

    Example:

    ```python
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", [1])
        assert saver_names({"w/ExponentialMovingAverage": w}) == {"w": "w/ExponentialMovingAverage"}
    ```
    """
    if var_list is None:
        var_list = tf.compat.v1.global_variables() + tf.compat.v1.get_collection(
            tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS
        )
    if isinstance(var_list, Mapping):
        pairs = list(var_list.items())
    elif isinstance(var_list, (list, tuple, set)):
        pairs = [(variable_name(v), v) for v in var_list]
    else:
        raise TypeError(
            f"A Saver's var_list must be a dict {{checkpoint name: variable}} or a list of variables. "
            f"Received: {type(var_list).__name__}"
        )
    names: dict[str, str] = {}
    for key, variable in pairs:
        if isinstance(variable, (list, tuple)):
            raise NotImplementedError(
                f"The Saver's var_list maps {key!r} to a list of variables (slices of a partitioned "
                "variable), which keras_tpu_estimator does not restore. Map one name to one variable."
            )
        name = variable_name(variable)
        if names.get(name, key) != key:
            raise ValueError(
                f"The Saver's var_list restores the variable {name!r} from two checkpoint names: "
                f"{names[name]!r} and {key!r}. Map each variable once."
            )
        names[name] = str(key)
    if not names and not allow_empty:
        raise ValueError("No variables to save")  # TF1's text
    return names


def restore_by_names(variables_by_name: Mapping[str, Any], save_path: str, names: Mapping[str, str]) -> list[str]:
    """Assigns each model variable named by a key of `names` the checkpoint value stored under its value.

    What a session's `restore_variables(save_path, names)` does: `save_path`
    is a checkpoint prefix (or a directory: its latest checkpoint); every
    value is read before any variable changes.

    Returns:
        The model variable names restored.

    Raises:
        ValueError: a key names no variable of the model, or the checkpoint
            lacks a value (the message lists what it holds).

    Example:

    ```python
    from keras_tpu_estimator.model_dir import write_checkpoint

    ckpt = os.path.join(model_dir, "model.ckpt-10")
    write_checkpoint(ckpt, {"w/ExponentialMovingAverage": tf.constant([2.5])})   # an EMA's value
    w = tf.Variable([0.0])   # the model's variable "w"
    assert restore_by_names({"w": w}, ckpt, {"w": "w/ExponentialMovingAverage"}) == ["w"]
    assert w.numpy().tolist() == [2.5]
    ```
    """
    unknown = sorted(name for name in names if name not in variables_by_name)
    if unknown:
        raise ValueError(
            f"The Saver restores {unknown}, which are not variables of the model (it has "
            f"{sorted(variables_by_name)}). Build the Saver from variables model_fn creates."
        )
    restore_checkpoint(save_path, {name: variables_by_name[name] for name in names}, name_map=dict(names))
    return list(names)


class TracedSaver:
    """Stands in for `tf.compat.v1.train.Saver` while `model_fn` is traced; a real Saver elsewhere.

    Takes the Saver's arguments (only `var_list` and `allow_empty` matter) and
    keeps `names`, `{model variable TF1 name: checkpoint name}`.

    Example:

    ```python
    from keras_tpu_estimator.model_dir import write_checkpoint
    from keras_tpu_estimator.tf1.scaffold import ScaffoldSession

    w, savers = tf.Variable([0.0], name="w"), []
    ckpt = os.path.join(model_dir, "model.ckpt-10")
    write_checkpoint(ckpt, {"w/ExponentialMovingAverage": tf.constant([2.5])})   # an EMA's value

    @tf.function
    def traced_model_fn():   # as the build traces model_fn (its model_fn_scope enters saver_stand_in)
        with saver_stand_in():
            # the Saver of ema.variables_to_restore()
            savers.append(tf.compat.v1.train.Saver({"w/ExponentialMovingAverage": w}))

    traced_model_fn.get_concrete_function()
    assert savers[0].names == {"w": "w/ExponentialMovingAverage"}
    savers[0].restore(ScaffoldSession({"w": w}), ckpt)    # session.restore_variables(ckpt, saver.names)
    assert w.numpy().tolist() == [2.5]
    ```
    """

    def __new__(cls, var_list: Any = None, *args: Any, **kwargs: Any) -> Any:
        if not tf.inside_function():  # a TF1 graph (export) or eager code: TensorFlow's own Saver
            return _REAL_SAVER(var_list, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, var_list: Any = None, *args: Any, allow_empty: bool = False, **kwargs: Any):
        self.names = saver_names(var_list, allow_empty)
        self.saver_def = None

    def restore(self, sess: Any, save_path: str | None) -> None:
        """Restores `names` from `save_path` through `sess.restore_variables`."""
        if save_path is None:
            raise ValueError("Can't load save_path when it is None.")  # TF1's text
        restore = getattr(sess, "restore_variables", None)
        if restore is None:
            raise TypeError(
                f"A Saver built inside model_fn restores through the session keras_tpu_estimator "
                f"passes (Scaffold init_fn, a hook's after_create_session); received {sess!r}."
            )
        restore(save_path, dict(self.names))

    def save(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "A Saver built inside model_fn cannot save: keras_tpu_estimator writes checkpoints "
            "itself (RunConfig.save_checkpoints_steps / keep_checkpoint_max)."
        )

    def build(self) -> None:
        """Nothing to build (TF1's deferred build)."""

    def __repr__(self) -> str:
        return f"<TracedSaver {self.names}>"


def _initializer(original: Any) -> Any:
    """`original` (a `*variables_initializer`), grouping only the initializers a traced graph has.

    The model's variables were created and initialised outside the graph, so
    they have no initializer op there (TF raised "'inputs' should be zero or
    more (nested) Tensors"); a Scaffold `init_op` runs only when the model was
    just initialised, so leaving them out changes nothing.
    """

    def initializer(*args: Any, **kwargs: Any) -> Any:
        if not tf.inside_function():
            return original(*args, **kwargs)
        if original.__name__ == "variables_initializer":
            var_list, name = (list(args) + [kwargs.get("var_list"), kwargs.get("name", "init")])[:2]
        else:
            local = "local" in original.__name__
            var_list = tf.compat.v1.local_variables() if local else tf.compat.v1.global_variables()
            name = "init"
        ops = [op for op in map(_graph_initializer, var_list or []) if op is not None]
        return tf.group(*ops, name=name)

    initializer.__name__ = original.__name__
    return initializer


def in_traced_graph(item: Any) -> bool:
    """True for a tensor or op of a graph being traced (the build's `FuncGraph`), which nothing runs."""
    return isinstance(item, (tf.Tensor, tf.Operation)) and getattr(item.graph, "building_function", False)


def _graph_initializer(variable: Any) -> Any:
    """The variable's initializer op in the graph, or None (created eagerly: a distributed one raises)."""
    try:
        op = variable.initializer
    except (TypeError, AttributeError):  # MirroredVariable groups its components' None initializers
        return None
    return op if in_traced_graph(op) else None


_INITIALIZERS = ["variables_initializer", "global_variables_initializer", "local_variables_initializer",
                 "initialize_all_variables", "initialize_variables", "initialize_local_variables"]


def _patches() -> list:
    patches, seen = [], set()
    for module in _compat.compat_v1_modules():
        if id(module.train) not in seen:
            seen.add(id(module.train))
            patches.append((module.train, "Saver", TracedSaver))
        if id(module) not in seen:
            seen.add(id(module))
            for attribute in _INITIALIZERS:
                if hasattr(module, attribute):
                    patches.append((module, attribute, _initializer(getattr(module, attribute))))
        aliases = getattr(module, "initializers", None)  # tf.compat.v1.initializers.global_variables()
        if aliases is not None and id(aliases) not in seen:
            seen.add(id(aliases))
            for attribute in ("variables", "global_variables", "local_variables"):
                if hasattr(aliases, attribute):
                    patches.append((aliases, attribute, _initializer(getattr(aliases, attribute))))
    return patches


@contextlib.contextmanager
def saver_stand_in() -> Iterator[None]:
    """While active (any thread), `tf.compat.v1.train.Saver` is `TracedSaver`.

    And in a traced graph `tf.compat.v1.global_variables_initializer()` (and
    its kin) group only initializer ops that graph has: none for the model's
    variables, which are created initialised (`_initializer`).

    Example:

    ```python
    w = tf.Variable(1.0, name="w")

    @tf.function
    def traced_model_fn():   # as the build traces model_fn
        with saver_stand_in():
            saver = tf.compat.v1.train.Saver([w])
        assert isinstance(saver, TracedSaver) and saver.names == {"w": "w"}
        return w.read_value()

    traced_model_fn()
    ```
    """
    with _compat.patched_attributes("tf1_saver", _patches):
        yield


def traced_saver_of(scaffold: Any) -> TracedSaver | None:
    """The `TracedSaver` a Scaffold holds, or None (no saver, or a real one).

    Example:

    ```python
    w = tf.Variable(1.0, name="w")

    @tf.function
    def traced_scaffold_fn():   # as the build calls scaffold_fn
        with saver_stand_in():
            scaffold = tf.compat.v1.train.Scaffold(saver=tf.compat.v1.train.Saver({"w": w}))
        assert traced_saver_of(scaffold) is scaffold.saver   # a TracedSaver
        return w.read_value()

    traced_scaffold_fn()
    ```
    """
    saver = getattr(scaffold, "saver", None)
    return saver if isinstance(saver, TracedSaver) else None


__all__ = [
    "TracedSaver",
    "in_traced_graph",
    "restore_by_names",
    "saver_names",
    "saver_stand_in",
    "traced_saver_of",
    "variable_name",
]
