"""The hook graph: a small TF1 graph standing for the step's graph, and the session hooks see.

A TF1 hook built its ops in the Estimator's graph and ran them in its
session. Here `hook_session(model, mode)` makes a graph that holds:

- one TF1 resource variable per model variable, under its TF1 name
  (`global_step`, `dense/kernel`; trainable as the model's; the global step in
  `GLOBAL_STEP`), so `tf.compat.v1.global_variables()`, `get_global_step()`,
  `ExponentialMovingAverage.variables_to_restore()` and a TF1 `Saver` in a
  hook's `begin()` see the model's variables;
- a placeholder for the step's loss, under the name `model_fn` gave it;
- on demand, a placeholder per tensor computed inside the step that a hook
  fetches (`StepTensors`: the value of the run's last step).

`HookSession.run` loads the model's current values into the variables a
fetch reads, runs it, and writes back to the model any variable the fetch
assigned (`tf.compat.v1.assign`, a `Saver`'s restore), so an assignment in
a hook changes the model, as in TF1. Fetching `"w:0"` (a resource handle
in TF1) gives the variable's value; a None fetch raises TF1's `TypeError`.
The hooks of one call share one hook graph (`shared_hook_session`); a call
that ended in an error leaves its graph to no later call.

Example:

```python
model.fit(input_fn, callbacks=[kte.StopAtStep(steps=1)])
session = hook_session(model, kte.ModeKeys.TRAIN)
with session.graph.as_default():
    step = tf.compat.v1.train.get_global_step()
assert session.run(step) == 1   # the model's global step
```
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.utils import get_logger

_log = get_logger(__name__)
_REPLICA_SUFFIX = re.compile(r"(/replica_\d+)+$")
_WRITES = ("Assign", "ResourceApply", "ResourceScatter", "ResourceSparseApply", "ResourceStridedSliceAssign")
FETCHABLE = (
    "Hooks can fetch the global step, the model's variables (by TF1 name, e.g. 'dense/kernel:0', or as "
    "the variable objects model_fn made), the step's loss and tensors model_fn computed in the step "
    "(as of the run's last step)."
)


class HookVariable:
    """A model variable's TF1 stand-in in the hook graph: how to read and write the model's."""

    def __init__(self, tf1: tf.Variable, read: Callable[[], Any], write: Callable[[Any], None]):
        self.tf1, self._read, self._write = tf1, read, write
        self.feed = tf1.initializer.inputs[1]  # loading = running the initializer on a fed value

    def read(self) -> np.ndarray:
        """The model variable's value (eagerly, also while the hook graph is the default)."""
        with _compat.eager_mode():
            return np.asarray(self._read())

    def write(self, value: Any) -> None:
        """Assigns the model variable."""
        with _compat.eager_mode():
            self._write(value)


class HookSession:
    """The `session` a hook sees: runs fetches of the hook graph on the model's current values.

    Example:

    ```python
    model.fit(input_fn, callbacks=[kte.StopAtStep(steps=1)])
    session = hook_session(model, kte.ModeKeys.TRAIN)
    session.run("global_step:0")  # the model's global step after the last execution
    ```
    """

    def __init__(self, graph: tf.Graph, variables: dict[str, HookVariable],
                 step_values: dict[str, Callable[[], Any]], find_step_tensor: Callable[[str], Any]):
        self.graph = graph
        self._variables = variables  # VarHandleOp name -> HookVariable
        self._step_values = step_values  # placeholder op name -> () -> the value of the run's last step
        self._find_step_tensor = find_step_tensor  # name -> a new placeholder of the hook graph, or None
        self._session: tf.compat.v1.Session | None = None
        self._initialized: set[str] = set()  # the hooks' own variables the session initialised
        self.users = 0  # the hooks sharing it (`shared_hook_session`)

    # ------------------------------------------------------------ elements
    def element(self, fetch: Any) -> Any:
        """The hook-graph element `fetch` names (a variable's handle stands for its value).

        Raises:
            TypeError: `fetch` is None (TensorFlow's own error, as a TF1 `session.run` raised it).
        """
        if fetch is None:
            self._tf_session().run(None)  # raises TF1's TypeError, in this TensorFlow's words
            raise TypeError("Argument `fetch` = None has invalid type \"NoneType\". Cannot be None")
        if isinstance(fetch, tf.Variable):
            return fetch
        try:
            element = self.graph.as_graph_element(fetch, allow_tensor=True, allow_operation=True)
        except (KeyError, ValueError, TypeError) as error:
            element = self._find_step_tensor(fetch) if isinstance(fetch, str) else None
            if element is None:
                raise ValueError(f"A session hook fetched {fetch!r}, which is not fetchable here: {error} {FETCHABLE}") from None
        if isinstance(element, tf.Tensor) and element.op.name in self._variables and element.dtype == tf.resource:
            return self._variables[element.op.name].tf1  # TF1's "w:0" was the variable's value
        return element

    def _ops(self, elements: list) -> list:
        seen, stack, found = set(), [getattr(e, "op", e) for e in elements], []
        while stack:
            op = stack.pop()
            if op.name in seen:
                continue
            seen.add(op.name)
            found.append(op)
            stack.extend(t.op for t in op.inputs)
            stack.extend(op.control_inputs)
        return found

    def _needs(self, elements: list) -> tuple[set[str], set[str], bool]:
        """`(variables read or written, step values, whether anything is written)` of `elements`."""
        ops = self._ops(elements)
        names = {op.name for op in ops}
        writes = any(op.type.startswith(_WRITES) for op in ops)
        return names & set(self._variables), names & set(self._step_values), writes

    def snapshot(self, fetches: Any) -> dict:
        """The model state `fetches` read, now: what TF1 read at the start of a run.

        In a TF1 `session.run`, fetched variables and the global step read
        their values before the step's updates (measured on TPUEstimator 2.15:
        a hook fetching the global step saw 0, 1, ... on its CPU path).
        """
        if fetches is None:
            return {}
        elements = [self.element(f) for f in tf.nest.flatten(fetches)]
        variables = self._needs(elements)[0]
        return {name: np.asarray(self._variables[name].read()) for name in variables}

    # ---------------------------------------------------------------- runs
    def _tf_session(self) -> tf.compat.v1.Session:
        if self._session is None:
            self._session = tf.compat.v1.Session(graph=self.graph)
        with self.graph.as_default():
            own = [v for v in tf.compat.v1.global_variables() + tf.compat.v1.local_variables()
                   if v.op.name not in self._variables and v.op.name not in self._initialized]
        if own:  # variables hooks made in begin(): initialised, as a TF1 Scaffold did
            self._session.run([v.initializer for v in own])
            self._initialized.update(v.op.name for v in own)
        return self._session

    def run(
        self,
        fetches: Any,
        feed_dict: dict | None = None,
        options: Any = None,
        run_metadata: Any = None,
        snapshot: dict | None = None,
    ) -> Any:
        """Like `tf.compat.v1.Session.run`, on the model's values (or a `snapshot` of them).

        A None fetch, alone or inside `fetches`, raises TF1's `TypeError`.
        """
        flat = tf.nest.flatten(fetches)
        elements = [self.element(f) for f in flat]
        variables, step_values, writes = self._needs(elements)
        session = self._tf_session()
        loaded = {name: (snapshot or {}).get(name) for name in variables}
        loaded = {name: np.asarray(self._variables[name].read()) if value is None else value
                  for name, value in loaded.items()}
        if loaded:
            session.run([self._variables[n].tf1.initializer for n in loaded],
                        {self._variables[n].feed: value for n, value in loaded.items()})
        with _compat.eager_mode():
            feed = {f"{name}:0": self._step_values[name]() for name in step_values}
        feed.update(feed_dict or {})
        results = session.run(tf.nest.pack_sequence_as(fetches, elements), feed_dict=feed,
                              options=options, run_metadata=run_metadata)
        results = tf.nest.map_structure(_as_tf1_result, results)
        if writes and loaded:
            names = sorted(loaded)
            after = session.run([self._variables[n].tf1.read_value() for n in names])
            for name, value in zip(names, after, strict=True):
                if not np.array_equal(value, loaded[name]):
                    self._variables[name].write(value)
        return results

    def restore_variables(self, save_path: str, names: dict[str, str]) -> None:
        """Assigns model variables from a checkpoint: `names` is `{model TF1 name: checkpoint name}`.

        What a TF1 `Saver(var_list).restore(session, save_path)` did to the
        session's variables (a `LoadEMAHook` restoring the moving averages
        into the model: the evaluation then runs on them).

        Example:

        ```python
        model.fit(input_fn, callbacks=[kte.StopAtStep(steps=1), kte.CheckpointSaver(model_dir)])
        session = hook_session(model, kte.ModeKeys.TRAIN)
        # graph name -> checkpoint name: here each variable from itself
        session.restore_variables(tf.train.latest_checkpoint(model_dir), {"out/bias": "out/bias"})
        ```
        """
        reader = tf.train.load_checkpoint(save_path)
        stored = reader.get_variable_to_shape_map()
        values = {}
        for name, key in names.items():  # all read first: a missing one changes nothing
            if name not in self._variables:
                raise ValueError(f"restore_variables: the model has no variable {name!r}. Model variables: "
                                 f"{sorted(self._variables)}.")
            if key not in stored:
                raise tf.errors.NotFoundError(None, None, f"Key {key} not found in checkpoint {save_path}.")
            values[name] = reader.get_tensor(key)
        for name, value in values.items():
            self._variables[name].write(value)

    def close(self) -> None:
        """Closes the TF1 session behind it."""
        if self._session is not None:
            self._session.close()
            self._session = None


def _model_variables(model: keras.Model) -> dict[str, keras.Variable]:
    variables = dict(model.checkpoint_variables)
    variables.setdefault("global_step", model.global_step_variable)
    return variables


def variable_names(model: keras.Model) -> dict[int, str]:
    """`{id: TF1 name}` of the model's variables, as Keras and as the objects `model_fn` held."""
    names = {}
    for name, variable in _model_variables(model).items():
        names[id(variable)] = name
        names[id(getattr(variable, "value", variable))] = name
    return names


def hook_session(model: keras.Model, mode: str) -> HookSession:
    """The hook graph of `model` in `mode` (see the module docstring), and its session.

    Example:

    ```python
    model.fit(input_fn, callbacks=[kte.StopAtStep(steps=1)])
    session = hook_session(model, kte.ModeKeys.TRAIN)
    session.run("global_step:0")
    ```
    """
    graph = tf.Graph()
    variables: dict[str, HookVariable] = {}
    step_values: dict[str, Callable[[], Any]] = {}
    step_tensors = model._runner.hook_tensors
    build_graph = model._runner.modes[mode].graph if mode in model._runner.modes else None

    def write_step(value: Any) -> None:
        model.global_step_variable.assign(np.int64(value))

    with graph.as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        variables[step.op.name] = HookVariable(step, lambda: np.int64(model.global_step), write_step)
        for name, variable in _model_variables(model).items():
            if name == "global_step":
                continue
            tf1 = tf.compat.v1.Variable(
                tf.zeros(variable.shape, variable.dtype), name=name, trainable=bool(variable.trainable),
                use_resource=True,
            )
            variables[tf1.op.name] = HookVariable(
                tf1, lambda v=variable: np.asarray(v.numpy()), lambda value, v=variable: v.assign(value)
            )
        if mode == "eval":  # ModeKeys.EVAL; the Estimator's local `eval_step`: the evaluation's steps so far
            eval_step = tf.compat.v1.Variable(
                np.int64(0), name="eval_step", trainable=False, use_resource=True,
                collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES, tf.compat.v1.GraphKeys.EVAL_STEP],
            )
            variables[eval_step.op.name] = HookVariable(
                eval_step, lambda: np.int64(getattr(model, "evaluation_steps_done", 0)),
                lambda value: setattr(model, "evaluation_steps_done", int(value)),
            )
        loss_name = model.loss_op_name(mode)
        if loss_name and loss_name not in variables:
            loss = tf.compat.v1.placeholder(tf.float32, [], name=loss_name)
            step_values[loss.op.name] = lambda: _last_loss(model)

    def find_step_tensor(name: str) -> Any:
        """A placeholder for tensor `name` of the step (kept by `StepTensors`), or None."""
        if build_graph is None or not re.fullmatch(r"[^:]+:0", name):
            return None
        try:
            tensor = build_graph.get_tensor_by_name(name)
        except (KeyError, ValueError):
            return None
        if tensor.op.name == loss_name:
            return None
        step_tensors.want(mode, name, tensor.dtype, tensor.shape)
        with graph.as_default():
            placeholder = tf.compat.v1.placeholder(tensor.dtype, tensor.shape, name=tensor.op.name)
        if placeholder.name != name:
            raise ValueError(f"A session hook fetched {name!r}, which the hook graph cannot stand for. {FETCHABLE}")
        step_values[placeholder.op.name] = lambda: step_tensors.value(mode, name)
        return placeholder

    return HookSession(graph, variables, step_values, find_step_tensor)


def _as_tf1_result(value: Any) -> Any:
    """A scalar string as TF1 sessions returned it (`bytes`; a fed one comes back as a 0-d array)."""
    if isinstance(value, np.ndarray) and value.dtype == object and value.ndim == 0:
        return value.item()
    return value


_SHARED: dict[tuple[int, str], tuple[weakref.ref, HookSession, Any]] = {}


def shared_hook_session(model: keras.Model, mode: str, call: Any = None) -> HookSession:
    """The hook graph and session the hooks of `model`'s current `mode` call share, as TF1's hooks
    shared one graph and session; `release_hook_session` when a hook is done with it.

    `call` names the call (the callbacks' Keras `params`, one object per call): a session left
    by an earlier call that ended in an error (its hooks' `end` never ran) is closed and replaced,
    as each TF1 `train()` built a new graph.

    Example:

    ```python
    model.evaluate(input_fn, steps=1)
    session = shared_hook_session(model, kte.ModeKeys.EVAL, {"steps": 1})   # a callback's params
    release_hook_session(model, kte.ModeKeys.EVAL, session)   # the last user closes it
    ```
    """
    key = (id(model), mode)
    owner, session, owner_call = _SHARED.get(key, (None, None, None))
    stale = owner is not None and owner() is model and call is not None and owner_call is not call
    if stale:
        session.close()
    if owner is None or owner() is not model or stale:  # (a dead model's id may come again)
        session = hook_session(model, mode)
        _SHARED[key] = (weakref.ref(model, lambda _: _SHARED.pop(key, None)), session, call)
    session.users += 1
    return session


def release_hook_session(model: keras.Model, mode: str, session: HookSession | None = None) -> None:
    """One hook is done with `model`'s shared `mode` session (`session`, when given: not a newer
    call's); the last one closes it."""
    owner, shared, _ = _SHARED.get((id(model), mode), (None, None, None))
    if owner is None or owner() is not model or (session is not None and shared is not session):
        return
    shared.users -= 1
    if shared.users <= 0:
        shared.close()
        del _SHARED[(id(model), mode)]


def _last_loss(model: keras.Model) -> np.float32:
    if model.last_step_loss is None:
        raise ValueError("A session hook fetched the loss before any step ran.")
    return np.float32(model.last_step_loss)


def rebind(value: Any, session: HookSession, names: dict[int, str], seen: set[int]) -> Any:
    """`value` with `model_fn`'s tensors and variables replaced by the hook graph's of the same name.

    Tensors computed inside the step get placeholders of the hook graph (their
    values then come from the step, `StepTensors`).
    """
    graph = session.graph
    if id(value) in seen:
        return value
    if isinstance(value, keras.Variable):  # the model's own (`model.variables_by_name[...]`)
        return session.element(f"{names.get(id(value)) or value.path}:0")
    if isinstance(value, tf.Variable) and getattr(value, "graph", None) is not graph:
        name = names.get(id(value)) or _REPLICA_SUFFIX.sub("", value.name.split(":")[0])
        return session.element(f"{name}:0")
    if isinstance(value, tf.Tensor | tf.Operation) and getattr(value, "graph", graph) is not graph:
        return session.element(value.name)
    if isinstance(value, dict):
        seen.add(id(value))
        return type(value)({k: rebind(v, session, names, seen) for k, v in value.items()})
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        seen.add(id(value))
        return type(value)(rebind(v, session, names, seen) for v in value)
    return value


def string_names(value: Any, seen: set[int] | None = None) -> list[str]:
    """The strings shaped like tensor names (`"lr:0"`) in `value` (a hook's attributes)."""
    seen = set() if seen is None else seen
    if isinstance(value, str):
        return [value] if re.fullmatch(r"[^:\s]+:\d+", value) else []
    if id(value) in seen or not isinstance(value, dict | list | tuple):
        return []
    seen.add(id(value))
    items = value.values() if isinstance(value, dict) else value
    return [name for item in items for name in string_names(item, seen)]
