"""`model.optimizer` when `model_fn` trains with its own `train_op` and no Keras optimizer.

Stock Keras callbacks read `model.optimizer`: `TensorBoard` its `iterations`
(steps per second, `evaluation_*_vs_iterations`), `BackupAndRestore` its
`built`, learning-rate schedulers its `learning_rate`. A TF1 optimizer
(`tf.compat.v1.train.*Optimizer`) has no Keras counterpart, so the model
shows this view: `iterations` is the global step (one per training step, as
a Keras optimizer's iterations), and anything else raises an AttributeError
that says why (a learning-rate scheduler cannot reach a TF1 optimizer's rate).
"""

from __future__ import annotations

from typing import Any

import keras

from keras_tpu_estimator.utils import get_logger

_log = get_logger(__name__)


class TrainOpOptimizer:
    """The optimizer view of a `model_fn` that returns its own `train_op`.

    Args:
        global_step: The model's `global_step` variable.
        reason: Why there is no Keras optimizer to show (in error messages).

    Example:

    ```python
    model.fit(input_fn, callbacks=[kte.StopAtStep(steps=1)])   # model_fn's train_op: no Keras optimizer
    assert int(model.optimizer.iterations) == 1                # the global step
    ```
    """

    built = True

    def __init__(self, global_step: Any, reason: str):
        self.iterations = global_step
        self.reason = reason

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"model.optimizer.{name} is not available: {self.reason} A Keras callback that "
            "changes the learning rate (LearningRateScheduler, ReduceLROnPlateau) needs a Keras "
            "optimizer: create one in model_fn (`keras.optimizers.SGD(lr)`) and return "
            "`train_op=optimizer.apply_gradients(...)`, or compute the rate from the global "
            "step in model_fn (`tf.compat.v1.train.exponential_decay`)."
        )

    def __repr__(self) -> str:
        return f"<TrainOpOptimizer iterations=global_step: {self.reason}>"


def train_op_optimizer(passed: Any, created: list, global_step: Any) -> Any:
    """What `model.optimizer` is when `model_fn` returns its own `train_op`.

    The one Keras optimizer `model_fn` created (`created`), so learning-rate
    callbacks reach it; else a `TrainOpOptimizer` whose `iterations` is the
    global step. A Keras optimizer given to the model (`passed`) that
    `model_fn` does not use gets a warning.

    Example:

    ```python
    global_step = tf.Variable(0, dtype=tf.int64, name="global_step")
    optimizer = train_op_optimizer(None, [], global_step)   # model_fn created no Keras optimizer
    assert isinstance(optimizer, TrainOpOptimizer) and optimizer.iterations is global_step
    ```
    """
    if isinstance(passed, keras.optimizers.Optimizer) and not any(passed is found for found in created):
        _log.warning(
            "The Keras optimizer given to the model is not used: model_fn returns its own "
            "train_op. Callbacks that read model.optimizer see the one model_fn uses."
        )
    if len(created) == 1:
        return created[0]
    if created:
        reason = f"model_fn created {len(created)} Keras optimizers."
    else:
        reason = "model_fn trains with its own train_op and no Keras optimizer."
    return TrainOpOptimizer(global_step, reason)


def check_learning_rate_callbacks(optimizer: Any, callbacks: list) -> None:
    """Raises before training when a learning-rate callback cannot reach `optimizer`'s rate.

    Keras' own check ("Optimizer must have a learning_rate attribute") would
    come at the first epoch and not say why.
    """
    for callback in callbacks:
        if isinstance(callback, keras.callbacks.LearningRateScheduler | keras.callbacks.ReduceLROnPlateau):
            try:
                getattr(optimizer, "learning_rate")  # noqa: B009  (the view's message)
            except AttributeError as error:
                raise ValueError(f"{type(callback).__name__}: {error}") from None
