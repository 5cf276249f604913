"""Evaluations that run while a model trains: `train_and_evaluate`'s saving listener, `InMemoryEvaluatorHook`.

The original evaluated in a graph of its own, so its training's random ops
(dropout) went on with their sequences. Here every `EstimatorModel` with a
`RunConfig.tf_random_seed` reseeds TensorFlow when it is made (what gives
each `train` call the original's initial values and random sequences), and a
reseed restarts the random ops of functions already traced: an evaluation
made during training would replay the training's dropout masks from the
start. Inside `evaluating_during_training()` models are made without
reseeding, so training goes on as in the original.

Example:

```python
with evaluating_during_training():
    estimator.evaluate(eval_input_fn, steps=1)
```
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import keras

from keras_tpu_estimator import _compat


def _keep_the_seed(seed: int) -> None:
    """Stands in for `keras.utils.set_random_seed` while an evaluation runs inside training."""
    del seed


@contextlib.contextmanager
def evaluating_during_training() -> Iterator[None]:
    """Models made inside do not reseed TensorFlow (see the module docstring).

    Example:

    ```python
    with evaluating_during_training():
        metrics = estimator.evaluate(input_fn, steps=1)
    ```
    """
    with _compat.swapped_attribute(keras.utils, "set_random_seed", _keep_the_seed):
        yield
