"""What the facade's methods run, shared by `Estimator` and `TPUEstimator`: one fresh model per call.

`EstimatorCalls` holds the bodies of `train`, `evaluate` and `predict`:
the original's argument checks, restoring the newest checkpoint (or warm
starting), the callbacks that stop, save, summarise and log, and the results
in the original's types. A class using it provides `_model(mode)` (the
`EstimatorModel` of one call) and `_library_input_fn(input_fn)`, and may
change the checks through `_train_steps`, `_eval_steps`, `_check_evaluate`,
`_check_predict` and `_check_export`.

It also holds how the plain Estimator called the user's functions
(`plain_model_fn`, `plain_input_fn`): only the arguments they declare, with the
Estimator's own `params`, and an `EstimatorSpec` required back.

Example:

```python
class MyFacade(EstimatorCalls):
    def _model(self, mode): return EstimatorModel(model_fn, config=self._config, use_tpu=False)
    def _library_input_fn(self, input_fn): return input_fn
```
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.callbacks import (
    CheckpointSaver,
    RestoreOrWarmStart,
    StepLogger,
    StepSummaries,
    StopAtStep,
)
from keras_tpu_estimator.contract import (
    EstimatorSpec,
    InputFn,
    ModeKeys,
    ModelFn,
    RunConfig,
    check_hooks,
    function_args,
    index_count,
    whole_count,
)
from keras_tpu_estimator.distribute import is_chief, sharing_worker_errors
from keras_tpu_estimator.engine import invoke_model_fn
from keras_tpu_estimator.host import batch_length, select_keys
from keras_tpu_estimator.model_dir import (
    DamagedCheckpointError,
    check_model_dir,
    checkpoint_step,
    checkpoints_newest_first,
    resolve_checkpoint_path,
)
from keras_tpu_estimator.utils import get_logger

_log = get_logger(__name__)


def mode_strategy(config: RunConfig, mode: str) -> tf.distribute.Strategy:
    """The strategy a CPU-path call runs on: `train_distribute` / `eval_distribute`, else the default.

    The Estimator never predicted on a strategy.

    Example:

    >>> mode_strategy(RunConfig(), ModeKeys.TRAIN) is tf.distribute.get_strategy()
    True
    """
    chosen = {ModeKeys.TRAIN: config.train_distribute, ModeKeys.EVAL: config.eval_distribute}.get(mode)
    # Not a strategy in the caller's scope: the Estimator ran each call in a graph of its own.
    return chosen or _compat.default_strategy()


def own_strategy_scope(model: Any) -> Any:
    """The model's strategy alone in scope, as if the call ran at top level (the caller's scope set aside).

    The original ran each call in a graph of its own, where a strategy the caller
    had entered was not in scope: here the model's strategy (the caller's on the
    strategy path, where a strategy in scope wins) is entered on clean stacks.

    Example:

    ```python
    with own_strategy_scope(model):
        model.fit(input_fn, callbacks=[kte.StopAtStep(steps=1)])
    ```
    """
    return _compat.only_strategy_scope(model.distribute_strategy)


def check_steps(steps: float | None, max_steps: float | None) -> None:
    """The Estimator's `train` argument checks, with its messages.

    Example:

    >>> check_steps(10, None)
    """
    if steps is not None and max_steps is not None:
        raise ValueError("Can not provide both steps and max_steps.")
    if steps is not None and steps <= 0:
        raise ValueError(f"Must specify steps > 0, given: {steps}")
    if max_steps is not None and max_steps <= 0:
        raise ValueError(f"Must specify max_steps > 0, given: {max_steps}")


def whole_steps(steps: float | None) -> int | None:
    """A step count of the Estimator (and TPUEstimator's CPU path): its stop hooks ran to the first step >= `steps`.

    Example:

    >>> whole_steps(12.3)
    13
    """
    return None if steps is None else whole_count(steps)


def newest_step(checkpoints: list[str]) -> int:
    """The global step of the newest checkpoint that can be read (0 when none).

    Example:

    >>> newest_step([])
    0
    """
    for path in checkpoints:
        try:
            return checkpoint_step(path)
        except DamagedCheckpointError:
            continue
    return 0


def plain_model_fn(model_fn: ModelFn, params: dict) -> ModelFn:
    """`model_fn` in the library's contract, called as the plain Estimator called it.

    The user's function gets only what it declares among `labels`, `mode`,
    `params` (a deep copy of the Estimator's: no `batch_size`, `use_tpu` or
    `context`) and `config`, and must return an `EstimatorSpec`. On the chief,
    `training_chief_hooks` run with the `training_hooks`.

    Example:

    ```python
    def my_model_fn(features, labels, mode, params):   # a plain Estimator's: an EstimatorSpec
        return model_fn(features, labels, mode, params).as_estimator_spec()

    model = kte.EstimatorModel(plain_model_fn(my_model_fn, {"lr": 0.1}), use_tpu=False, train_batch_size=4)
    model.fit(input_fn, callbacks=[kte.StopAtStep(steps=1)])
    ```
    """
    args, own_params = function_args(model_fn), params

    def library_model_fn(features: Any, labels: Any, mode: str, params: dict, config: Any) -> Any:
        del params  # the library's (batch size, use_tpu): the plain Estimator passed its own
        if labels is not None and "labels" not in args:
            raise ValueError(
                "model_fn does not take labels, but input_fn returns labels. Add a `labels` "
                "argument to model_fn, or return only features from input_fn."
            )
        kwargs = {name: value for name, value in (("labels", labels), ("mode", mode), ("config", config))
                  if name in args}
        if "params" in args:
            kwargs["params"] = copy.deepcopy(own_params)
        spec = model_fn(features=features, **kwargs) if "features" in args else model_fn(features, **kwargs)
        if not isinstance(spec, EstimatorSpec):
            raise ValueError(
                "model_fn should return an EstimatorSpec. Received: "
                f"{type(spec).__name__}" + (
                    ". A TPUEstimatorSpec is for TPUEstimator: run it with tf.estimator.tpu.TPUEstimator, "
                    "or return spec.as_estimator_spec()" if type(spec).__name__ == "TPUEstimatorSpec" else ""
                ) + "."
            )
        if spec.training_chief_hooks and getattr(config, "is_chief", True):
            spec = spec._replace(training_hooks=spec.training_hooks + spec.training_chief_hooks)
        return spec._replace(training_chief_hooks=()) if spec.training_chief_hooks else spec

    return library_model_fn


def plain_input_fn(input_fn: InputFn, params: dict, config: RunConfig) -> InputFn:
    """`input_fn` in the library's contract, called as the plain Estimator called it.

    It gets only what it declares among `mode`, `params` (a deep copy of the
    Estimator's), `config` and, under a strategy, `input_context`.

    Example:

    ```python
    dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat().batch(4, drop_remainder=True)
    model.fit(plain_input_fn(lambda: dataset, {}, RunConfig()),   # input_fn() takes nothing
              callbacks=[kte.StopAtStep(steps=1)])
    ```
    """
    args, own_params, own_config = function_args(input_fn), params, config

    def library_input_fn(params: dict, mode: str, config: Any, input_context: Any = None) -> Any:
        del params, config  # the library's: the plain Estimator passed its own
        kwargs: dict[str, Any] = {}
        if "mode" in args:
            kwargs["mode"] = mode
        if "params" in args:
            kwargs["params"] = copy.deepcopy(own_params)
        if "config" in args:
            kwargs["config"] = own_config
        if input_context is not None and "input_context" in args:
            _log.info("The `input_fn` accepts an `input_context` which will be given by DistributionStrategy")
            kwargs["input_context"] = input_context
        return input_fn(**kwargs)

    return library_input_fn


class EstimatorCalls:
    """The bodies of the facade's `train`, `evaluate` and `predict` (see the module docstring)."""

    _model_fn: ModelFn
    _params: dict
    _config: RunConfig
    _warm_start: Any
    _log_every_n_steps: int | None

    model_dir: str

    # ------------------------------------------------------------ checkpoints
    def _checkpoint(self, checkpoint_path: str | None) -> str | None:
        """`checkpoint_path` resolved, else the latest checkpoint in `model_dir`, else None."""
        if checkpoint_path:
            return resolve_checkpoint_path(checkpoint_path)
        found = checkpoints_newest_first(self.model_dir)
        return found[0] if found else None

    def _require_checkpoint(self, checkpoint_path: str | None = None) -> str:
        path = self._checkpoint(checkpoint_path)
        if path is None:
            raise ValueError(
                f"Could not find trained model in model_dir: {self.model_dir}. "
                "Call train() first, or pass checkpoint_path."
            )
        return path

    def _checkpoint_or_initialization(self, checkpoint_path: str | None, action: str) -> str | list[str]:
        """`checkpoint_path` resolved, else `model_dir`'s checkpoints newest first (see `RestoreOrWarmStart`).

        With none, logs the original's line: the call runs on initial values.
        """
        if checkpoint_path:
            return resolve_checkpoint_path(checkpoint_path)
        found = checkpoints_newest_first(self.model_dir)
        if not found:
            _log.warning(
                "Could not find trained model in model_dir: %s, running initialization to %s.",
                self.model_dir,
                action,
            )
        return found

    def _checkpoint_saver(self, hooks: list, listeners: list) -> CheckpointSaver:
        """The saver of a `train` call; as the Estimator's, a `CheckpointSaverHook` in `hooks` replaces it.

        The hook's directory, schedule and listeners are used (it is removed
        from `hooks`); `saving_listeners` are called around every save.
        """
        config = self._config
        directory, steps, secs = self.model_dir, config.save_checkpoints_steps, config.save_checkpoints_secs
        for hook in [h for h in hooks if isinstance(h, tf.compat.v1.train.CheckpointSaverHook)]:
            hooks.remove(hook)
            directory, steps, secs, own = _compat.checkpoint_saver_hook_parts(hook)
            listeners = own + listeners
        return CheckpointSaver(
            directory,
            save_steps=whole_count(steps) or None,
            save_secs=secs or None,
            max_to_keep=index_count(config.keep_checkpoint_max),
            keep_checkpoint_every_n_hours=config.keep_checkpoint_every_n_hours,
            listeners=listeners,
            save_graph_def=config.checkpoint_save_graph_def,
        )

    # ------------------------------------------------ checks a subclass changes
    def _train_steps(self, steps: float | None, max_steps: float | None) -> tuple[int | None, int | None]:
        return whole_steps(steps), whole_steps(max_steps)

    def _eval_steps(self, steps: float | None) -> int | None:
        if steps is not None and steps <= 0:
            raise ValueError(f"Must specify steps > 0, given: {steps}")
        return whole_steps(steps)  # the Estimator ran until at least `steps` evaluations

    def _eval_loop_steps(self, steps: int | None) -> int | None:
        return None  # the Estimator's evaluations: one step per session.run (the CPU path's executions)

    def _check_evaluate(self) -> None:
        """Checks before an evaluation (none for the Estimator)."""

    def _check_predict(self) -> None:
        """Checks before a prediction (none for the Estimator)."""

    def _check_export(self) -> None:
        """Checks before an export (none for the Estimator)."""

    # ------------------------------------------------------------------ calls
    def _call_model_fn(self, features: Any, labels: Any, mode: str, config: Any) -> Any:
        """The public `model_fn`'s call: the engine's `model_fn` with this facade's params."""
        return invoke_model_fn(self._library_model_fn(), features, labels, mode, self._library_params(), config)

    def _train(
        self, input_fn: InputFn, hooks: Sequence[Any] | None, steps: float | None, max_steps: float | None,
        saving_listeners: Sequence[Any] | None,
    ) -> Any:
        if self._config.task_type in ("evaluator", "ps"):
            raise ValueError(
                "Train has been called wrong configuration. Please use tf.estimator.train_and_evaluate "
                f"which calls proper API according to given configuration. Current configuration: {self._config}."
            )
        check_steps(steps, max_steps)
        check_model_dir(self.model_dir)
        found = checkpoints_newest_first(self.model_dir)
        if max_steps is not None and newest_step(found) >= max_steps:
            _log.info("Skipping training since max_steps has already saved.")
            return self
        hooks = list(check_hooks("hooks", hooks))
        steps, max_steps = self._train_steps(steps, max_steps)
        listeners = list(saving_listeners or [])
        for listener in listeners:
            if not isinstance(listener, tf.compat.v1.train.CheckpointSaverListener):
                raise TypeError(
                    f"saving_listeners must be a list of CheckpointSaverListener, given: {listener}"
                )
        config = self._config
        saver_hook = any(isinstance(h, tf.compat.v1.train.CheckpointSaverHook) for h in hooks)
        if listeners and not (saver_hook or config.save_checkpoints_steps or config.save_checkpoints_secs):
            raise ValueError(
                "There should be a CheckpointSaverHook to use saving_listeners. Please set one of the "
                "RunConfig.save_checkpoints_steps or RunConfig.save_checkpoints_secs."
            )
        model = self._model(ModeKeys.TRAIN)
        callbacks: list[keras.callbacks.Callback] = [RestoreOrWarmStart(found, self._warm_start)]
        if steps is not None or max_steps is not None:
            callbacks.append(StopAtStep(steps=steps, max_steps=max_steps))
        callbacks.append(self._checkpoint_saver(hooks, listeners))
        if config.save_summary_steps:
            callbacks.append(StepSummaries(self.model_dir, whole_count(config.save_summary_steps)))
        if self._log_every_n_steps:
            callbacks.append(StepLogger(whole_count(self._log_every_n_steps)))
        with own_strategy_scope(model), sharing_worker_errors(self.model_dir, model.distribute_strategy):
            try:
                model.fit(self._library_input_fn(input_fn), callbacks=callbacks + hooks, verbose=0)
            finally:
                model.release_host()
        _log.info("Loss for final step: %s.", model.last_step_loss)
        return self

    def _evaluate(
        self, input_fn: InputFn, steps: float | None, hooks: Sequence[Any] | None,
        checkpoint_path: str | None, name: str | None,
    ) -> dict:
        hooks = check_hooks("hooks", hooks)
        steps = self._eval_steps(steps)
        if name is not None and not isinstance(name, str):
            raise TypeError(f"`name` must be a string (it names model_dir/eval_<name>). Received: {name!r}")
        self._check_evaluate()
        check_model_dir(self.model_dir)
        restore = RestoreOrWarmStart(
            self._checkpoint_or_initialization(checkpoint_path, "evaluate"), self._warm_start
        )
        model = self._model(ModeKeys.EVAL)
        try:
            with own_strategy_scope(model), model.one_loop_evaluation(self._eval_loop_steps(steps)):
                logs = model.evaluate(
                    self._library_input_fn(input_fn), steps=steps, callbacks=[restore, *hooks], verbose=0,
                    return_dict=True,
                )
        finally:
            model.release_host()
        step, path = model.global_step, restore.restored
        if is_chief(model.distribute_strategy):
            with tf.summary.create_file_writer(self.eval_dir(name)).as_default(step=step):
                for key, value in logs.items():
                    tf.summary.scalar(key, value)
                if path:
                    tf.summary.text("checkpoint_path", path)
        results = {key: np.float32(value) for key, value in logs.items()}
        results["global_step"] = np.int64(step)
        _log.info(
            "Saving dict for global step %d: %s", step,
            ", ".join(f"{key} = {value}" for key, value in sorted(results.items())),
        )
        return results

    def _predict(
        self, input_fn: InputFn, predict_keys: Sequence[str] | str | None, hooks: Sequence[Any] | None,
        checkpoint_path: str | None, yield_single_examples: bool,
    ) -> Iterator[Any]:
        hooks = check_hooks("hooks", hooks)
        self._check_predict()
        checkpoints = self._checkpoint_or_initialization(checkpoint_path, "predict")
        model = self._model(ModeKeys.PREDICT)
        if not model.runs_on_strategy_path:  # TF1 fetched only these (the original's TPU path computed all)
            model.select_predictions(predict_keys)
        callbacks = [RestoreOrWarmStart(checkpoints, self._warm_start), *hooks]
        try:  # a generator closed early (or collected) releases the host too
            batches = model.predict_batches(self._library_input_fn(input_fn), callbacks=callbacks, verbose=0)
            for batch in _each_in_own_scope(model, batches):
                batch = select_keys(batch, predict_keys)
                if not yield_single_examples:
                    yield batch
                elif not isinstance(batch, dict):
                    yield from batch
                else:
                    for i in range(batch_length(batch)):
                        yield {key: value[i] for key, value in batch.items()}
        finally:
            model.release_host()


def _each_in_own_scope(model: Any, batches: Iterator[Any]) -> Iterator[Any]:
    """`batches`, each computed in the model's own strategy scope; the caller's code between them runs in its own."""
    while True:
        with own_strategy_scope(model):
            batch = next(batches, _DONE)
        if batch is _DONE:
            return
        yield batch


_DONE = object()


__all__ = ["EstimatorCalls", "check_steps", "mode_strategy", "newest_step", "own_strategy_scope", "plain_input_fn", "plain_model_fn",
           "whole_steps"]
