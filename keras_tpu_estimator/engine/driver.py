"""`ExecutionDriver`: the one loop of executions behind `fit`, `evaluate`, `predict` and the facade.

Everything done around an execution happens here, in this order:

1. **size** it: `iterations_per_loop` as a count, or as a duration turned
   into a count from the last execution's time per step; cut to the steps
   left in the call and to the *bounds* the callbacks declare (a callback
   with a `stop_step` attribute, as `StopAtStep` and a `StopAtStepHook` have,
   stops training at that global step; one with `max_steps_per_execution`,
   as a session hook on the CPU path has, caps every execution);
2. `on_*_batch_begin`, then **run** it through the loop function's concrete
   function and fetch its scalars at once (steps, losses, the global step,
   whether the weights are finite);
3. **check** training for NaN/Inf before any callback sees the step;
4. hand its host tensors to the model's host thread;
5. `on_*_batch_end` (for an execution that ran a step) and decide whether to
   go on: the steps asked for, the end of the input, a stop flag, a bound, a
   signal (agreed across workers).

The driver also keeps what the last execution left (its loss, time per step,
the global step read with it), so the model needs no device read between
executions.

Example:

```python
import types

driver = ExecutionDriver(model, host=None)   # host: the model's `HostRunner`
driver.iterations_per_loop = IterationsPerLoop(100, "count")
driver.cached_global_step = 0                # as in a fit, at global step 0
bound = types.SimpleNamespace(stop_step=3)   # a callback's bound, as StopAtStep's in a fit
stop_step, cap = driver.bounds([bound])
assert driver.size(limit=None, stop_step=stop_step, cap=cap) == 3   # cut to the stop step
```
"""

from __future__ import annotations

import dataclasses
import math
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.contract import IterationsPerLoop, ModeKeys
from keras_tpu_estimator.distribute import any_worker
from keras_tpu_estimator.utils import get_logger

from .loop import SCALARS
from .nan_errors import NanLossError, NonFiniteVariableError
from .preemption import StopRequests

_log = get_logger(__name__)

_STEP, _ALL_FINITE = len(SCALARS), len(SCALARS) + 1  # what a training loop's read_after appends
_STOP_FLAG = {
    ModeKeys.TRAIN: "stop_training",
    ModeKeys.EVAL: "stop_evaluating",
    ModeKeys.PREDICT: "stop_predicting",
}
_CALLBACKS = {
    ModeKeys.TRAIN: ("on_train_batch_begin", "on_train_batch_end"),
    ModeKeys.EVAL: ("on_test_batch_begin", "on_test_batch_end"),
    ModeKeys.PREDICT: ("on_predict_batch_begin", "on_predict_batch_end"),
}
_ALSO = {"on_train_batch_begin": "on_batch_begin", "on_train_batch_end": "on_batch_end"}  # Keras' defaults call these


def _overrides(callback: Any, name: str) -> bool:
    try:
        if name in vars(callback):  # set on the instance, as LambdaCallback does
            return True
    except TypeError:  # no instance dictionary
        pass
    return getattr(type(callback), name, None) is not getattr(keras.callbacks.Callback, name)


def _batch_hook(callbacks: Any, name: str) -> Callable[..., Any]:
    """`callbacks.<name>`, or a no-op when no callback overrides it (Keras' own hooks do nothing).

    Skipping the call skips `CallbackList`'s conversion of the logs to Python
    numbers, about 20 us per execution, as TF-Keras skipped batch hooks nobody had.
    """
    members = getattr(callbacks, "callbacks", None)
    if members is not None and not any(
        _overrides(c, name) or (name in _ALSO and _overrides(c, _ALSO[name])) for c in members
    ):
        return lambda *args, **kwargs: None
    return getattr(callbacks, name)


def checked_variables(variables: Sequence[Any]) -> list:
    """The floating-point variables among `variables`: those the NaN/Inf check covers, in order."""
    return [v for v in variables if v.value.dtype.is_floating]


@dataclasses.dataclass
class Execution:
    """One execution that ran at least one step.

    Attributes:
        first: Steps of this call before it: the Keras batch index of its first step.
        steps: Steps it ran.
        loss_sum, weight_sum: `loss_sum / weight_sum` is the mean of its steps' losses.
        outputs: Its per-step outputs (PREDICT), as the loop returned them.
        logs: What `on_*_batch_end` gets; set by the caller before asking for the next one.
    """

    first: int
    steps: int
    loss_sum: float
    weight_sum: float
    outputs: Any = None
    logs: dict = dataclasses.field(default_factory=dict)

    @property
    def last(self) -> int:
        """The batch index of its last step."""
        return self.first + self.steps - 1

    @property
    def loss(self) -> float:
        """The mean of its steps' losses."""
        return self.loss_sum / max(self.weight_sum, 1e-12)


class ExecutionDriver:
    """Sizes, runs and follows up the executions of one model (see the module docstring).

    Args:
        model: The `EstimatorModel` (its stop flags, variables and callbacks' target).
        host: The model's `HostRunner`.

    Attributes:
        iterations_per_loop: Executions' size, as a count or a duration.
        ended_by: Why the last `executions` ended: `"steps"` (the steps asked
            for ran), `"input"` (the input ran out), `"stopped"` (a stop flag,
            bound or signal) or `"empty_replica"` (the next training batch
            would leave a replica without rows).
        cached_global_step: The global step read with the last training
            execution, while a `fit` runs (None otherwise: read the variable).
        seconds_per_step: Wall time per step of the last execution.
        last_execution_loss, last_step_loss: Mean loss of the last
            execution's steps, and the loss of its last step.
        last_execution_finite: Its loss and trainable variables were finite.
    """

    def __init__(self, model: keras.Model, host: Any):
        self._model = model
        self._host = host
        self.iterations_per_loop = IterationsPerLoop(1, "count")
        self.ended_by: str | None = None
        self.cached_global_step: int | None = None
        self.seconds_per_step: float | None = None
        self.last_execution_loss: float | None = None
        self.last_step_loss: float | None = None
        self.last_execution_finite = True
        self._concrete: tuple | None = None
        self._step_counts: dict[int, tf.Tensor] = {}
        self._call_step: int | None = None  # the global step during one evaluate / predict call
        # Per iterator (calls nest: validation in fit, a fit in a callback): id -> (iterator, steps it
        # still holds), while its call runs and the size is known.
        self._input_left: dict[int, tuple[Any, float]] = {}

    # ---------------------------------------------------------------- sizing
    @staticmethod
    def bounds(callbacks: Any) -> tuple[int | None, int | None]:
        """`(stop step, max steps per execution)` the callbacks declare now, or None for each."""
        stops, caps = [], []
        for callback in getattr(callbacks, "callbacks", callbacks):
            stop = getattr(callback, "stop_step", None)
            cap = getattr(callback, "max_steps_per_execution", None)
            if stop is not None:
                stops.append(stop)
            if cap is not None:
                caps.append(cap)
        return (min(stops) if stops else None), (min(caps) if caps else None)

    def size(self, limit: int | None, stop_step: int | None = None, cap: int | None = None) -> int:
        """The next execution's steps: `iterations_per_loop` cut to `limit`, the stop step and `cap`."""
        loop = self.iterations_per_loop
        if loop.unit == "count":
            size = loop.value
        elif self.seconds_per_step is None:
            size = 1
        else:
            size = max(1, int(loop.value / max(self.seconds_per_step, 1e-9)))
        if limit is not None:
            size = min(size, limit)
        if stop_step is not None:
            size = min(size, stop_step - self.global_step())
        if cap is not None:
            size = min(size, cap)
        return size

    def global_step(self) -> int:
        """The global step: the cached value during `fit`, else read from the variable."""
        if self.cached_global_step is not None:
            return self.cached_global_step
        return int(self._model.global_step_variable.numpy())

    # --------------------------------------------------------------- running
    def run_one(
        self,
        mode: str,
        function: Callable,
        iterator: Any,
        size: int,
        infinite: bool = False,
        single: bool | None = None,
    ) -> tuple[Any, np.ndarray]:
        """Runs one execution of up to `size` steps; returns `(result, scalars)`.

        `infinite`: the input holds at least `size` more steps (the loop then
        skips its end-of-input check). Executions of one step each
        (`iterations_per_loop=1`, `train_on_batch`, or `single`: a call of one
        step) run the loop's single-step form, without a loop around the step.

        Updates the last-execution state and the cached global step, and hands
        the execution's host tensors to the host thread. Does not check NaN.
        """
        first_step = self.global_step() if mode == ModeKeys.TRAIN else 0
        start = time.perf_counter()
        count = self._step_counts.get(size)
        if count is None:
            count = self._step_counts[size] = tf.constant(size, tf.int32)
        # Only when every execution has one step: a tail of one after longer ones keeps the loop's trace.
        single = size == 1 and (single or self.iterations_per_loop == IterationsPerLoop(1, "count"))
        cached = self._concrete
        if cached is None or cached[0] is not function or cached[1] is not iterator or cached[2] != (infinite, single):
            # The concrete function, cached per iterator and bound to it once: skips the
            # polymorphic call's argument hashing, trace-cache lookup and input binding.
            concrete = function.get_concrete_function(iterator, tf.TensorSpec([], tf.int32), infinite, single)
            call = _compat.bound_call(concrete, (iterator, count, infinite, single), 1)
            self._concrete = cached = (function, iterator, (infinite, single), call)
        try:
            result = cached[3](count)
        except tf.errors.OutOfRangeError as error:
            if not infinite:
                raise
            left = self._input_left.pop(id(iterator), (None, math.inf))[1]
            if left != math.inf:  # steps before the end may have run unreported: never go on silently
                raise RuntimeError(
                    f"The input ended before the {left:.0f} more steps tf.data's cardinality promised "
                    f"(in an execution of {size}); its steps may have run without being reported. Was the "
                    "iterator read elsewhere, or the cardinality asserted wrongly?"
                ) from error
            # Training can tell whether steps ran (the global step moved); evaluation and prediction
            # cannot, and their lost steps would be missing rows or loss: they always raise.
            if mode != ModeKeys.TRAIN or int(self._model.global_step_variable.numpy()) != first_step:
                raise RuntimeError(
                    "The input ended although tf.data says it repeats forever (a source that cannot "
                    "start again, such as a one-shot generator before `repeat()`); the steps of the "
                    "execution it ended in may have run without being reported. Make the source repeatable, "
                    "or end it with `take(n)`."
                ) from error
            # A repeated dataset whose every epoch is empty (a filter that drops all) ends
            # although its cardinality says infinite: run again with the end-of-input check.
            return self.run_one(mode, function, iterator, size, infinite=False, single=single)
        scalars = result.scalars.numpy()  # the one host fetch of the execution's scalars
        steps = int(scalars[0])
        if steps:
            self.seconds_per_step = (time.perf_counter() - start) / steps
            self.last_execution_loss = scalars[1] / max(scalars[2], 1e-12)
            self.last_step_loss = float(scalars[3])
        if len(scalars) > _ALL_FINITE:
            if self.cached_global_step is not None:
                self.cached_global_step = int(scalars[_STEP])
            if steps:
                self.last_execution_finite = bool(scalars[_ALL_FINITE]) and math.isfinite(scalars[1])
        if result.host is not None and steps:
            if mode != ModeKeys.TRAIN:  # the host functions' global step: read once per call
                if self._call_step is None:
                    self._call_step = self.global_step()
                first_step = self._call_step
            last_step = int(scalars[_STEP]) if mode == ModeKeys.TRAIN and len(scalars) > _ALL_FINITE else None
            self._host.submit(mode, [tensor.numpy() for tensor in result.host], first_step, steps, last_step)
        return result, scalars

    def forget_iterator(self, iterator: Any = None) -> None:
        """Drops the cached concrete call, and `iterator`'s input count (the iterator is done)."""
        self._concrete = None
        if iterator is not None:
            self._input_left.pop(id(iterator), None)

    def executions(
        self,
        mode: str,
        function: Callable,
        iterator: Any,
        callbacks: Any,
        *,
        steps: int | None = None,
        stop: StopRequests | None = None,
        check_finite: bool = True,
        multi_worker: bool = False,
        input_steps: float | None = None,
    ) -> Iterator[Execution]:
        """Runs executions until `steps` steps, the end of the input or a stop; yields each that ran.

        Calls `on_*_batch_begin(first)` before each execution and
        `on_*_batch_end(last, execution.logs)` after each that ran a step (once
        the caller asks for the next), so every end has its begin. An
        execution that finds the input already ended gets no end, as in Keras
        and TF1 (whose last `session.run` raised before `after_run`).

        Args:
            steps: Steps to run in this call; None runs to the end of the input
                (or, in training, to a stop).
            stop: Signal requests (training): stop after the execution.
            check_finite: In training, raise on a NaN/Inf loss or variable
                (False when a `TerminateOnNaN` callback decides: it stops).
            multi_worker: Agree on signal stops across workers.
            input_steps: The steps a new `iterator` holds, when known: `math.inf`
                for a repeated dataset, a count for a finite one (`ModeRecord.input_steps`).
                Steps that surely have input skip the end-of-input check, and a
                call of one step runs without a loop around it.
        """
        model = self._model
        flag = _STOP_FLAG[mode]
        begin, end = (_batch_hook(callbacks, name) for name in _CALLBACKS[mode])
        if mode != ModeKeys.TRAIN:
            setattr(model, flag, False)
            self._call_step = None
        done, self.ended_by = 0, None
        known = self._input_left.get(id(iterator))
        if input_steps is not None and (known is None or known[0] is not iterator):
            known = self._input_left[id(iterator)] = (iterator, input_steps)  # a new iterator: all left
        left = known[1] if input_steps is not None else None
        # Known to be one step in all: no loop around it (its trace and first run are shorter).
        single = left is not None and min(left, steps if steps is not None else math.inf) == 1
        while True:
            if getattr(model, flag):
                self.ended_by = "stopped"
                return
            stop_step, cap = self.bounds(callbacks)
            if mode != ModeKeys.TRAIN:
                stop_step = None  # a stop step bounds training only
            size = self.size(None if steps is None else steps - done, stop_step, cap)
            if size <= 0:
                self.ended_by = "steps" if steps is not None and done >= steps else "stopped"
                return
            begin(done)
            if left is not None and left <= 0:  # as an execution that finds no input: no end for this begin
                self.ended_by = "input"
                return
            # A counted input that ends within this execution runs what is left (`ran < size`: "input").
            run_size = size if left is None or left >= size else int(left)
            result, scalars = self.run_one(mode, function, iterator, run_size, left is not None, single)
            ran = int(scalars[0])
            if left is not None:
                left -= ran
                self._input_left[id(iterator)] = (iterator, left)
            if mode == ModeKeys.TRAIN and ran:
                self._check_finite(result, scalars, check_finite)
            if ran:
                execution = Execution(done, ran, float(scalars[1]), float(scalars[2]), result.outputs)
                yield execution
                done += ran
                end(execution.last, execution.logs)
            if scalars[4]:
                self.ended_by = "empty_replica"
                return
            if ran < size:
                self.ended_by = "input"
                return
            if stop is not None:
                if multi_worker and any_worker(model.distribute_strategy, stop.requested):
                    stop.request(stop.signal or signal.SIGTERM)  # every worker stops at this execution
                if stop.requested:
                    self.ended_by = "stopped"
                    return

    # ------------------------------------------------------------------ NaN
    def _check_finite(self, result: Any, scalars: np.ndarray, raise_error: bool) -> None:
        """Raises (or, for `TerminateOnNaN`, stops training) on a NaN/Inf loss or trainable variable."""
        self.check_variables(result, scalars, raise_error)
        if raise_error and not math.isfinite(scalars[1]):
            raise NanLossError(
                f"NaN loss during training. The training loss became {self.last_execution_loss} "
                f"in the execution ending at global step {self.global_step()}. Training stopped "
                "before any callback ran, so no checkpoint holds these weights. Check the input "
                "for NaN/Inf, lower the learning rate, or clip gradients."
            )

    def check_variables(self, result: Any, scalars: np.ndarray, raise_error: bool = True) -> None:
        """Raises `NonFiniteVariableError` naming the trainable variables a training execution left NaN/Inf.

        With `raise_error=False` (a `TerminateOnNaN` callback decides), logs
        it and stops training instead, as `TerminateOnNaN` stops on a NaN loss.
        """
        if len(scalars) <= _ALL_FINITE or scalars[_ALL_FINITE]:
            return
        finite = result.after.numpy()
        model = self._model
        names = {id(v): name for name, v in model.variables_by_name.items()}
        checked = checked_variables(model.trainable_variables)
        bad = [names.get(id(v), v.path) for v, ok in zip(checked, finite, strict=False) if not ok]
        if not raise_error:
            _log.warning(
                "Trainable variable '%s' holds NaN or Inf after the execution ending at global "
                "step %d (%d bad in all); stopping training (TerminateOnNaN).",
                bad[0], self.global_step(), len(bad),
            )
            model.stop_training = True
            return
        raise NonFiniteVariableError(
            f"Gradient for {bad[0]} is NaN: trainable variable '{bad[0]}' holds NaN or Inf after the "
            f"execution ending at global step {self.global_step()} ({len(bad)} bad in all: "
            f"{bad[:5]}). Training stopped before any callback ran, so no checkpoint holds these "
            "weights. Check the input for NaN/Inf, lower the learning rate, or clip gradients."
        )
