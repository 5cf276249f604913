"""`tf.compat.v1.train.SessionRunHook`s as Keras callbacks, run once per execution as TPUEstimator ran them.

A TPUEstimator hook saw one `session.run` per loop of `iterations_per_loop`
steps. `SessionRunHookCallback` gives it the same life here:

- `begin()` once the model is built, in a small TF1 *hook graph*
  (`callbacks/hook_graph.py`: the default graph while the hook runs; the hooks of one
  call share it and its session, as TF1's hooks did) that holds the
  model's variables as TF1 variables under their TF1 names (`global_step`,
  `dense/kernel`), a placeholder for the step's loss and one for each tensor
  computed inside the step that the hook fetches (`tf1/step_tensors.py`); the
  tensors and variables a hook built in `model_fn` holds are rebound to them;
- `after_create_session(session, coord)` once, then `before_run` /
  `after_run` around every execution, and `end(session)`;
- `session.run(...)` runs hook-graph fetches on the model's current values
  (an assignment writes the model's variable); `run_values.results` hold the
  model state as the execution began (as a TF1 run read it before its
  updates: the global step 0, 4, 8 with K=4), and the loss and in-step
  tensors of its last step (on the strategy path, replica 0's);
- `run_context.request_stop()` stops after the current execution; a run that
  asks for a full trace (`ProfilerHook`) is profiled (`callbacks/profiler.py`).

On the CPU path (`use_tpu=False`) the original ran hooks at every step, so
executions there are one step long while a session hook is present.
`StopAtStepHook` sizes the last execution to stop exactly, as `StopAtStep` does.

Example:

```python
hook = tf.compat.v1.train.LoggingTensorHook({"step": "global_step:0"}, every_n_iter=1)
model.fit(input_fn, callbacks=[SessionRunHookCallback(hook), kte.StopAtStep(steps=2)])
```
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.contract import ModeKeys
from keras_tpu_estimator.tf1 import TracedWithoutError
from keras_tpu_estimator.utils import get_logger

from .hook_graph import (
    FETCHABLE,
    HookSession,
    rebind,
    release_hook_session,
    shared_hook_session,
    string_names,
    variable_names,
)
from .profiler import ExecutionProfile

_log = get_logger(__name__)
_MODES = {"train": ModeKeys.TRAIN, "test": ModeKeys.EVAL, "predict": ModeKeys.PREDICT}


class SessionRunHookCallback(keras.callbacks.Callback):
    """Runs a `tf.compat.v1.train.SessionRunHook` around each execution (see the module docstring).

    Applied automatically to hooks passed where TPUEstimator took them
    (`hooks=`, `training_hooks`, ...) and to hooks in `callbacks=` of
    `EstimatorModel.fit/evaluate/predict`.

    Args:
        hook: The session hook.

    Example:

    ```python
    loss_name = "mean_squared_error/value:0"   # the model_fn's loss tensor
    estimator.train(input_fn, max_steps=2,
                    hooks=[tf.compat.v1.train.LoggingTensorHook({"loss": loss_name}, every_n_iter=1)])
    ```
    """

    def __init__(self, hook: tf.compat.v1.train.SessionRunHook):
        super().__init__()
        self.hook = hook
        self._session: HookSession | None = None
        self._args: Any = None
        self._context: Any = None
        self._snapshot: dict = {}
        self._profile = ExecutionProfile(hook)
        self._mode: str | None = None
        self.stop_step: int | None = None  # bounds the driver reads: a StopAtStepHook's step,
        self.max_steps_per_execution: int | None = None  # and one step per run on the CPU path

    # ---------------------------------------------------------------- life
    def _begin(self, kind: str) -> None:
        mode = self._mode = _MODES[kind]
        self._session = shared_hook_session(self.model, mode, self.params)  # the call's hooks' one graph
        if not self.model.runs_on_strategy_path:
            self.max_steps_per_execution = 1  # the original's CPU path: a hook run per step
        if kind == "train":
            self.stop_step = _compat.stop_at_step_hook_target(self.hook, self.model.global_step)
        session = self._session
        with session.graph.as_default():  # TF1 ran every hook method in graph mode
            for name in string_names(vars(self.hook)):  # tensors named by strings: placeholders first
                try:
                    session.element(name)
                except TracedWithoutError:
                    raise
                except ValueError:
                    pass  # begin() says what it could not find
            try:
                self.hook.__dict__.update(rebind(dict(vars(self.hook)), session, variable_names(self.model), set()))
                self.hook.begin()
            except (KeyError, ValueError) as error:
                self._release()
                raise ValueError(f"{type(self.hook).__name__}.begin() failed: {error} {FETCHABLE}") from error
            except BaseException:
                self._release()
                raise
            self.hook.after_create_session(session, tf.train.Coordinator())

    def _before(self) -> None:
        with self._session.graph.as_default():
            self._context = tf.compat.v1.train.SessionRunContext(
                original_args=tf.compat.v1.train.SessionRunArgs(None), session=self._session
            )
            self._args = self.hook.before_run(self._context)
            self._snapshot = self._session.snapshot(getattr(self._args, "fetches", None))
        self._profile.before(getattr(self._args, "options", None))

    def _after(self, kind: str) -> None:
        self._profile.after(self.model.global_step)
        args = self._args
        results = None
        with self._session.graph.as_default():
            if args is not None and args.fetches is not None:  # SessionRunArgs(None): results None, as TF1
                results = self._session.run(args.fetches, feed_dict=args.feed_dict, snapshot=self._snapshot)
            values = tf.compat.v1.train.SessionRunValues(
                results=results, options=getattr(args, "options", None), run_metadata=tf.compat.v1.RunMetadata()
            )
            self.hook.after_run(self._context, values)
        if self._context.stop_requested:
            setattr(self.model, {"train": "stop_training", "test": "stop_evaluating", "predict": "stop_predicting"}[kind], True)

    def _end(self) -> None:
        if self._session is None:
            return
        self._profile.after(self.model.global_step)
        try:
            with self._session.graph.as_default():
                self.hook.end(self._session)
        finally:
            self._release()
            self.stop_step = self.max_steps_per_execution = None

    def _release(self) -> None:
        if self._session is not None:
            release_hook_session(self.model, self._mode, self._session)
            self._session = None

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
    hooks = [tf.compat.v1.train.StopAtStepHook(last_step=2), kte.StepLogger(1)]
    callbacks = [as_callback(c) for c in hooks]   # hooks wrapped; Keras callbacks as they are
    ```
    """
    if isinstance(callback, keras.callbacks.Callback):
        return callback
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
