"""Keras callbacks that replace TPUEstimator's session hooks.

`StopAtStep` is `_TPUStopAtStepHook`: it ends training at an exact global
step. It does so through the model's public `stop_at_step` attribute, which
`EstimatorModel` reads before every execution to size it as
`min(steps_per_execution, stop_at_step - global_step)`.
"""

from __future__ import annotations

from typing import Any

import keras


def _check_steps(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")


class StopAtStep(keras.callbacks.Callback):
    """Stops `fit` at an exact global step, sizing the last execution to land on it.

    Args:
        steps: Train this many steps from the global step at the start of `fit`.
        max_steps: Train until the global step reaches this value. If it is
            already there, `fit` runs no step.

    Example:

    ```python
    model.fit(input_fn, callbacks=[StopAtStep(steps=10)])   # executions 4, 4, 2 with K=4
    model.global_step                                          # 10
    ```

    Note: the model must expose `global_step` and `stop_at_step`, as
    `EstimatorModel` does.
    """

    def __init__(self, steps: int | None = None, max_steps: int | None = None):
        super().__init__()
        if steps is None and max_steps is None:
            raise ValueError("One of `steps` or `max_steps` must be specified.")
        if steps is not None and max_steps is not None:
            raise ValueError(
                "Only one of `steps` or `max_steps` can be specified. "
                f"Received: steps={steps}, max_steps={max_steps}."
            )
        _check_steps("steps", steps)
        _check_steps("max_steps", max_steps)
        self.steps = steps
        self.max_steps = max_steps
        self.final_step: int | None = None

    def on_train_begin(self, logs: dict | None = None) -> None:
        start = self.model.global_step
        self.final_step = self.max_steps if self.max_steps is not None else start + self.steps
        self.model.stop_at_step = self.final_step
        if start >= self.final_step:
            self.model.stop_training = True

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self.model.global_step >= self.final_step:
            self.model.stop_training = True

    def on_train_end(self, logs: dict | None = None) -> None:
        self.model.stop_at_step = None
