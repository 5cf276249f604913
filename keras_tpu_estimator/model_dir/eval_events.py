"""Reads evaluations back from `model_dir/eval[_name]` event files, in either writer's format.

The original wrote one event per evaluation with every metric as a TF1
`simple_value`; `TPUEstimator.evaluate` here writes each metric as a TF2
scalar summary (a float tensor) in its own event. Both are read as one
evaluation per run of consecutive events with the same step in a file. What
reads them: `BestExporter` (the best result so far) and the early-stopping
hooks (`read_eval_metrics`).

Example:

```python
for step, metrics in evaluations(os.path.join(model_dir, "eval", "*.tfevents.*")):
    print(step, metrics["loss"])
```
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from collections.abc import Iterator

import numpy as np
import tensorflow as tf

from keras_tpu_estimator._compat.deprecations import quiet_deprecations
from keras_tpu_estimator.utils import get_logger

_log = get_logger(__name__)
EVENT_FILE_GLOB_PATTERN = "events.out.tfevents.*"


def _scalar(value: tf.compat.v1.Summary.Value) -> float | None:
    """A summary value as a float: a TF1 `simple_value` or a numeric TF2 scalar tensor; else None."""
    if value.HasField("simple_value"):
        return float(value.simple_value)
    if value.HasField("tensor"):
        array = tf.make_ndarray(value.tensor)
        if array.ndim == 0 and array.dtype.kind in "fiub":
            return float(np.asarray(array, np.float64))
    return None


def _creation_order(path: str) -> list:
    """Sort key: `events.out.tfevents.<time>.<host>[.<pid>.<count>.v2]` by its numbers, as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", os.path.basename(path))]


def evaluations(file_pattern: str) -> Iterator[tuple[int, dict[str, float]]]:
    """Yields `(global_step, {tag: value})` per evaluation found in the event files matching `file_pattern`.

    Files are read in the order their writers were made (the time and
    counter in their names); a corrupt record ends that file's reading with
    a warning, as the original's early stopping did.

    Example:

    ```python
    list(evaluations("/tmp/m/eval/*.tfevents.*"))   # [(4, {"loss": 0.16, "accuracy": 1.0}), ...]
    ```
    """
    for path in sorted(tf.io.gfile.glob(file_pattern), key=_creation_order):
        step, metrics = None, {}
        try:
            with quiet_deprecations():
                for event in tf.compat.v1.train.summary_iterator(path):
                    found = {}
                    for value in event.summary.value if event.HasField("summary") else ():
                        number = _scalar(value)
                        if number is not None:
                            found[value.tag] = number
                    if not found:
                        continue
                    if metrics and event.step != step:
                        yield step, metrics
                        metrics = {}
                    step = event.step
                    metrics.update(found)
        except tf.errors.DataLossError as error:
            _log.warning(
                "Skipping rest of the file due to encountering data corruption error; file path: %s; "
                "original error raised by `tf.train.summary_iterator`: %s", path, error,
            )
        if metrics:
            yield step, metrics


def read_eval_metrics(eval_dir: str) -> OrderedDict:
    """`{global_step: {metric: value}}` of every evaluation in `eval_dir`, by step (the original's helper).

    Example:

    ```python
    read_eval_metrics(estimator.eval_dir())   # OrderedDict([(4, {"loss": 0.16}), (8, {"loss": 0.04})])
    ```
    """
    by_step: dict[int, dict[str, float]] = {}
    if tf.io.gfile.exists(eval_dir):
        for step, metrics in evaluations(os.path.join(eval_dir, EVENT_FILE_GLOB_PATTERN)):
            by_step.setdefault(step, {}).update(metrics)
    return OrderedDict(sorted(by_step.items()))
