"""Graph-mode programs: the facade's calls run eagerly, whatever the program switched off.

Many TPUEstimator programs start with `tf.compat.v1.disable_v2_behavior()`
or `disable_eager_execution()`. The original built its own graphs, so this
was harmless there; Keras 3 needs eager execution. The facade's methods are
decorated here: in a graph-mode program each call (and each step of
`predict`'s generator) runs inside an eager context, while the program's
other TF1 switches (v1 `TensorShape` with `Dimension.value`, hashable
tensors, ...) stay as the program set them, in its `model_fn` as before.
Code outside the facade keeps running in graph mode.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import tensorflow as tf

from keras_tpu_estimator import _compat

F = TypeVar("F", bound=Callable[..., Any])

GRAPH_MODE_KERAS_FACE = (
    "EstimatorModel is a Keras 3 model, and Keras 3 runs eagerly, but this program switched "
    "TensorFlow to graph mode (tf.compat.v1.disable_eager_execution() or disable_v2_behavior()). "
    "Use the TPUEstimator / Estimator facade, whose calls run eagerly in a graph-mode program, "
    "or remove that call."
)


def eager_context() -> contextlib.AbstractContextManager:
    """An eager context when the program runs in graph mode, else nothing.

    Example:

    ```python
    with tf.Graph().as_default():   # as in a program that disabled eager execution
        assert not tf.executing_eagerly()
        with eager_context():
            assert tf.executing_eagerly()
    ```
    """
    if tf.executing_eagerly() or tf.inside_function():
        return contextlib.nullcontext()
    return _compat.eager_mode()


def eager_call(method: F) -> F:
    """Decorates a facade method so it runs eagerly in a graph-mode program.

    Example:

    ```python
    class Estimator:
        @eager_call
        def train(self, input_fn, steps=None): ...
    ```
    """

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with eager_context():
            return method(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def eager_generator(method: F) -> F:
    """Like `eager_call`, for a generator method: every step of the generator runs eagerly.

    The caller's loop body between two items keeps the program's mode.

    Example:

    ```python
    class Estimator:
        @eager_generator
        def predict(self, input_fn): yield ...
    ```
    """

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
        with eager_context():
            inner = method(*args, **kwargs)
        try:
            while True:
                with eager_context():
                    try:
                        item = next(inner)
                    except StopIteration:
                        return
                yield item
        finally:
            with eager_context():
                inner.close()

    return wrapper  # type: ignore[return-value]
