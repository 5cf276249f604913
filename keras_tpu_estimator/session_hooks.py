"""`tf.compat.v1.train.SessionRunHook`s as Keras callbacks, run once per execution as TPUEstimator ran them.

A TPUEstimator hook saw one `session.run` per loop of `iterations_per_loop`
steps. `SessionRunHookCallback` gives it the same life here:

- `begin()` once the model is built, in a small TF1 *hook graph* (the default
  graph while `begin()` builds its ops; a TF1 graph was finalized after it) that holds `global_step`, one placeholder per
  model variable under its TF1 name (`dense/kernel:0`) and one for the step's
  loss under the name `model_fn` gave it;
- `after_create_session(session, coord)` once, then `before_run` /
  `after_run` around every execution, and `end(session)`;
- `session.run(...)` evaluates hook-graph fetches, feeding only the
  placeholders they need with the model's current values; `run_values.results`
  hold the model state as the execution began (as a TF1 run read it before its
  updates: the global step 0, 4, 8 with K=4) and the loss of its last step;
- `run_context.request_stop()` stops after the current execution.

What the original could not fetch on a TPU (tensors computed inside the step)
is not fetchable here either: the error says what is. On the CPU path
(`use_tpu=False`) the original ran hooks at every step, so executions there
are one step long while a session hook is present. `StopAtStepHook` sizes the
last execution to stop exactly, as `StopAtStep` does.

Example:

```python
hook = tf.compat.v1.train.LoggingTensorHook({"step": "global_step:0"}, every_n_iter=1)
model.fit(input_fn, callbacks=[SessionRunHookCallback(hook), StopAtStep(steps=8)])
```
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.logs import get_logger
from keras_tpu_estimator.spec import ModeKeys

_log = get_logger(__name__)
_MODES = {"train": ModeKeys.TRAIN, "test": ModeKeys.EVAL, "predict": ModeKeys.PREDICT}
_FETCHABLE = (
    "Hooks can fetch the global step ('global_step:0'), the model's variables (by TF1 name, e.g. "
    "'dense/kernel:0') and the step's loss (by the name model_fn gave it), as the original's "
    "hooks could on a TPU. Pass other step values through host_call."
)


class HookSession:
    """The `session` a hook sees: runs fetches of the hook graph on the model's current values.

    Example:

    ```python
    session.run("global_step:0")  # the model's global step after the last execution
    ```
    """

    def __init__(self, graph: tf.Graph, providers: dict[str, Any], step_values: set[str]):
        self.graph = graph
        self._providers = providers  # placeholder op name -> () -> value
        self._step_values = step_values  # placeholders of values the step computes (the loss)
        self._session: tf.compat.v1.Session | None = None

    def _element(self, fetch: Any) -> Any:
        try:
            return self.graph.as_graph_element(fetch, allow_tensor=True, allow_operation=True)
        except (KeyError, ValueError, TypeError) as error:
            raise ValueError(f"A session hook fetched {fetch!r}, which is not fetchable here: {error} {_FETCHABLE}") from None

    def _needed(self, elements: list) -> set[str]:
        """Names of the placeholders the fetched elements depend on."""
        seen, stack, needed = set(), [e.op if isinstance(e, tf.Tensor) else e for e in elements], set()
        while stack:
            op = stack.pop()
            if op.name in seen:
                continue
            seen.add(op.name)
            if op.name in self._providers:
                needed.add(op.name)
            stack.extend(t.op for t in op.inputs)
            stack.extend(op.control_inputs)
        return needed

    def snapshot(self, fetches: Any) -> dict:
        """The current values of the model state `fetches` read: what TF1 read at the start of a run.

        In a TF1 `session.run`, fetched variables and the global step read
        their values before the step's updates (measured on TPUEstimator 2.15:
        a hook fetching the global step saw 0, 1, ... on its CPU path).
        """
        if fetches is None:
            return {}
        elements = [self._element(f) for f in tf.nest.flatten(fetches)]
        names = self._needed(elements) - self._step_values
        return {f"{name}:0": self._providers[name]() for name in names}

    def run(
        self,
        fetches: Any,
        feed_dict: dict | None = None,
        options: Any = None,
        run_metadata: Any = None,
        snapshot: dict | None = None,
    ) -> Any:
        """Like `tf.compat.v1.Session.run`, with the model's values (or a `snapshot` of them) fed in."""
        if fetches is None:
            return None
        elements = [self._element(f) for f in tf.nest.flatten(fetches)]
        feed = dict(snapshot or {})  # values read as the run began; read the rest now
        for name in self._needed(elements):
            if f"{name}:0" not in feed:
                feed[f"{name}:0"] = self._providers[name]()
        feed.update(feed_dict or {})
        if self._session is None:
            self._session = tf.compat.v1.Session(graph=self.graph)
        return self._session.run(fetches, feed_dict=feed, options=options, run_metadata=run_metadata)

    def close(self) -> None:
        """Closes the TF1 session behind it."""
        if self._session is not None:
            self._session.close()
            self._session = None


def hook_session(model: keras.Model, mode: str) -> HookSession:
    """A TF1 hook graph with the step's fetchable values as placeholders, and its session.

    Example:

    ```python
    session = hook_session(model, ModeKeys.TRAIN)
    session.run("global_step:0")
    ```
    """
    graph = tf.Graph()
    providers: dict[str, Any] = {}
    step_values: set[str] = set()
    with graph.as_default():
        step = tf.compat.v1.placeholder(tf.int64, [], name="global_step")
        graph.add_to_collection(tf.compat.v1.GraphKeys.GLOBAL_STEP, step)
        providers[step.op.name] = lambda: np.int64(model.global_step)
        for name, variable in model.checkpoint_variables.items():
            if name == "global_step":
                continue
            placeholder = tf.compat.v1.placeholder(variable.dtype, variable.shape, name=name)
            providers[placeholder.op.name] = lambda v=variable: np.asarray(v.numpy())
        loss_name = model.loss_op_name(mode)
        if loss_name and loss_name not in providers:
            loss = tf.compat.v1.placeholder(tf.float32, [], name=loss_name)
            providers[loss.op.name] = lambda: _last_loss(model)
            step_values.add(loss.op.name)
    return HookSession(graph, providers, step_values)


def _last_loss(model: keras.Model) -> np.float32:
    if model.last_step_loss is None:
        raise ValueError("A session hook fetched the loss before any step ran.")
    return np.float32(model.last_step_loss)


def _rebind(value: Any, graph: tf.Graph, seen: set[int]) -> Any:
    """`value` with tensors of another graph (`model_fn`'s) replaced by the hook graph's of the same name."""
    if id(value) in seen:
        return value
    if isinstance(value, tf.Tensor | tf.Operation | tf.Variable) and getattr(value, "graph", graph) is not graph:
        try:
            return graph.as_graph_element(value.name)
        except (KeyError, ValueError):
            raise ValueError(
                f"A session hook returned by model_fn holds {value.name!r}, a value computed inside "
                f"the step (the original could not fetch it on a TPU either). {_FETCHABLE}"
            ) from None
    if isinstance(value, dict):
        seen.add(id(value))
        return type(value)({k: _rebind(v, graph, seen) for k, v in value.items()})
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        seen.add(id(value))
        return type(value)(_rebind(v, graph, seen) for v in value)
    return value


class SessionRunHookCallback(keras.callbacks.Callback):
    """Runs a `tf.compat.v1.train.SessionRunHook` around each execution (see the module docstring).

    Applied automatically to hooks passed where TPUEstimator took them
    (`hooks=`, `training_hooks`, ...) and to hooks in `callbacks=` of
    `EstimatorModel.fit/evaluate/predict`.

    Args:
        hook: The session hook.

    Example:

    ```python
    estimator.train(input_fn, max_steps=100,
                    hooks=[tf.compat.v1.train.LoggingTensorHook({"loss": "loss:0"}, every_n_iter=10)])
    ```
    """

    def __init__(self, hook: tf.compat.v1.train.SessionRunHook):
        super().__init__()
        self.hook = hook
        self._session: HookSession | None = None
        self._args: Any = None
        self._context: Any = None
        self._snapshot: dict = {}
        self.stop_step: int | None = None  # bounds the driver reads: a StopAtStepHook's step,
        self.max_steps_per_execution: int | None = None  # and one step per run on the CPU path

    # ---------------------------------------------------------------- life
    def _begin(self, kind: str) -> None:
        mode = _MODES[kind]
        self._session = hook_session(self.model, mode)
        if not self.model.runs_on_strategy_path:
            self.max_steps_per_execution = 1  # the original's CPU path: a hook run per step
        if kind == "train":
            self.stop_step = _compat.stop_at_step_hook_target(self.hook, self.model.global_step)
        with self._session.graph.as_default():
            self.hook.__dict__.update(_rebind(dict(self.hook.__dict__), self._session.graph, set()))
            try:
                self.hook.begin()
            except (KeyError, ValueError) as error:
                raise ValueError(
                    f"{type(self.hook).__name__}.begin() failed: {error} {_FETCHABLE}"
                ) from error
        self.hook.after_create_session(self._session, tf.train.Coordinator())

    def _before(self) -> None:
        self._context = tf.compat.v1.train.SessionRunContext(
            original_args=tf.compat.v1.train.SessionRunArgs(None), session=self._session
        )
        self._args = self.hook.before_run(self._context)
        self._snapshot = self._session.snapshot(getattr(self._args, "fetches", None))

    def _after(self, kind: str) -> None:
        args = self._args
        results = None
        if args is not None:
            results = self._session.run(
                args.fetches, feed_dict=args.feed_dict, options=args.options, snapshot=self._snapshot
            )
        values = tf.compat.v1.train.SessionRunValues(
            results=results, options=getattr(args, "options", None), run_metadata=tf.compat.v1.RunMetadata()
        )
        self.hook.after_run(self._context, values)
        if self._context.stop_requested:
            setattr(self.model, {"train": "stop_training", "test": "stop_evaluating", "predict": "stop_predicting"}[kind], True)

    def _end(self) -> None:
        if self._session is None:
            return
        self.hook.end(self._session)
        self._session.close()
        self.stop_step = self.max_steps_per_execution = None

    # ---------------------------------------------------------------- Keras
    def on_train_begin(self, logs: dict | None = None) -> None:
        self._begin("train")

    def on_test_begin(self, logs: dict | None = None) -> None:
        self._begin("test")

    def on_predict_begin(self, logs: dict | None = None) -> None:
        self._begin("predict")

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._before()

    def on_test_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._before()

    def on_predict_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._before()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._after("train")

    def on_test_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._after("test")

    def on_predict_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._after("predict")

    def on_train_end(self, logs: dict | None = None) -> None:
        self._end()

    def on_test_end(self, logs: dict | None = None) -> None:
        self._end()

    def on_predict_end(self, logs: dict | None = None) -> None:
        self._end()


def as_callback(callback: Any) -> keras.callbacks.Callback:
    """`callback` itself, or a `SessionRunHookCallback` for a session hook; else the original's TypeError.

    Example:

    ```python
    callbacks = [as_callback(c) for c in hooks]
    ```
    """
    if isinstance(callback, keras.callbacks.Callback):
        return callback
    if isinstance(callback, tf.compat.v1.train.ProfilerHook):
        raise NotImplementedError(
            "ProfilerHook records TF1 session step stats, which a tf.function loop does not "
            "produce. Profile with keras.callbacks.TensorBoard(log_dir, profile_batch=(start, end)), "
            "which writes a trace TensorBoard's profile plugin opens (one batch is one execution)."
        )
    if isinstance(callback, tf.compat.v1.train.SummarySaverHook):
        raise NotImplementedError(
            "SummarySaverHook evaluates summary ops of the step's graph, which a session hook cannot "
            "fetch here (nor on the original's TPU path). Write summaries in host_call "
            "(tf.summary.scalar in its fn); the facade already writes loss and global_step/sec "
            "every RunConfig.save_summary_steps."
        )
    if isinstance(callback, tf.compat.v1.train.CheckpointSaverHook):
        raise NotImplementedError(
            "CheckpointSaverHook saves through a TF1 Saver of the session's graph. Pass it in "
            "TPUEstimator.train(hooks=...) (its listeners then run around the facade's saves), pass "
            "CheckpointSaverListeners as train(saving_listeners=...), or use "
            "keras_tpu_estimator.CheckpointSaver in fit's callbacks."
        )
    if isinstance(callback, tf.compat.v1.train.SessionRunHook):
        return SessionRunHookCallback(callback)
    raise TypeError(f"Hooks must be a SessionRunHook, given: {callback}. Keras callbacks are accepted too.")
