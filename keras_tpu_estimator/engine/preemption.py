"""Stopping training cleanly on SIGTERM (preemption) and SIGINT (Ctrl-C).

A cloud VM about to be preempted gets SIGTERM; a notebook user presses
Ctrl-C. Killing the process mid-execution loses the steps since the last
checkpoint. Instead, while `fit` runs, `StopRequests` turns the first signal
into a request: `fit` finishes the current execution, runs the callbacks'
`on_train_end` (where `CheckpointSaver` writes a checkpoint), and then
`raise_if_requested` ends the call: `SystemExit(42)` for SIGTERM (the exit
code of `tf.distribute.experimental.PreemptionCheckpointHandler`, so a
supervisor can restart the job) and `KeyboardInterrupt` for SIGINT. A second
signal of the same kind acts at once, as without this module.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from keras_tpu_estimator.utils import get_logger

PREEMPTION_EXIT_CODE = 42
_log = get_logger(__name__)


class StopRequests:
    """Records SIGTERM / SIGINT while `installed()`; `fit` polls it between executions.

    Example:

    ```python
    stop, executions = StopRequests(), 0
    with stop.installed():
        while not stop.requested:
            executions += 1                    # run one execution
            stop.request(signal.SIGTERM)       # what the handler does on a preemption notice
    # save a checkpoint here, then
    try:
        stop.raise_if_requested()
    except SystemExit as exit:
        assert exit.code == 42 and executions == 1
    ```
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.signal: int | None = None

    @property
    def requested(self) -> bool:
        """True once a signal arrived."""
        return self.signal is not None

    def request(self, signum: int) -> None:
        """Records `signum` as if it had been received (what the handler does)."""
        if self.signal is None:
            self.signal = signum
            _log.warning(
                "Received %s: stopping after the current execution, then saving a checkpoint. "
                "Send it again to stop at once.",
                signal.Signals(signum).name,
            )

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Handles SIGTERM and SIGINT while active (main thread only; elsewhere a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {signum: signal.getsignal(signum) for signum in self.SIGNALS}

        def handler(signum: int, frame: Any) -> None:
            if self.signal == signum:  # the second one: act as before
                signal.signal(signum, previous[signum])
                signal.raise_signal(signum)
                return
            self.request(signum)

        for signum in self.SIGNALS:
            signal.signal(signum, handler)
        try:
            yield
        finally:
            for signum, old in previous.items():
                signal.signal(signum, old)

    def raise_if_requested(self) -> None:
        """Ends the call the way the signal asked: SystemExit(42) or KeyboardInterrupt."""
        if self.signal == signal.SIGTERM:
            raise SystemExit(PREEMPTION_EXIT_CODE)
        if self.signal == signal.SIGINT:
            raise KeyboardInterrupt
