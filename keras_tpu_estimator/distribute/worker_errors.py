"""Under several workers, the error that ended one worker ends the others with its cause.

Example:

```python
strategy = tf.distribute.get_strategy()   # one worker: an error passes through as it is
try:
    with sharing_worker_errors(model_dir, strategy):
        raise ValueError("bad record")   # what model.fit(...) raised on this worker
except ValueError as error:
    assert str(error) == "bad record"
```
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

import tensorflow as tf

from .strategy import num_workers

_ABORTED = (
    tf.errors.UnavailableError,
    tf.errors.AbortedError,
    tf.errors.CancelledError,
    tf.errors.DeadlineExceededError,
)


@contextlib.contextmanager
def sharing_worker_errors(model_dir: str, strategy: tf.distribute.Strategy) -> Iterator[None]:
    """Under several workers, the error that ended one worker ends the others too.

    A failing worker writes its error to `model_dir/worker_errors/`; a worker
    whose collectives were aborted because a peer died re-raises with the
    peer's error, so every process reports the original cause.
    """
    if num_workers(strategy) == 1:
        yield
        return
    folder = os.path.join(model_dir, "worker_errors")
    resolver = strategy.cluster_resolver
    own = os.path.join(folder, f"{resolver.task_type}-{resolver.task_id}.txt")
    tf.io.gfile.makedirs(folder)
    if tf.io.gfile.exists(own):
        tf.io.gfile.remove(own)
    try:
        yield
    except Exception as error:
        if not isinstance(error, _ABORTED):
            with tf.io.gfile.GFile(own, "w") as report:
                report.write(f"{type(error).__name__}: {error}")
            raise
        peers: list[str] = []
        deadline = time.monotonic() + 5.0
        while not peers and time.monotonic() < deadline:
            peers = [p for p in tf.io.gfile.glob(os.path.join(folder, "*.txt")) if p != own]
            time.sleep(0.2)
        if not peers:
            raise
        reports = {}
        for path in sorted(peers):
            with tf.io.gfile.GFile(path) as report:
                reports[os.path.basename(path)[:-4]] = report.read().strip()
        raise RuntimeError(
            f"Training stopped because another worker failed: {reports}. "
            "This worker's collectives were aborted."
        ) from error
