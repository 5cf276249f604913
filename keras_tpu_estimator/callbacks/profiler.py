"""Profiles of the executions a session hook asks a full trace of (`ProfilerHook`).

A TF1 hook asked for a trace by returning `RunOptions(trace_level=FULL_TRACE)`
from `before_run`; the session then recorded that run's step stats. A
`tf.function` loop records none, so here the execution that run stands for is
profiled by TensorFlow's profiler (`tf.profiler.experimental.start` / `stop`)
into the hook's output directory, as TensorBoard's profile plugin reads it:
`<output_dir>/plugins/profile/<time>_step_<global step after it>/<host>.xplane.pb`.
`ProfilerHook` itself still writes its `timeline-<step>.json` files (without
step stats) at the steps it always named.

Example:

```python
logdir = os.path.join(model_dir, "profile")
with tf.Graph().as_default():      # where a TF1 program builds its hooks
    hook = tf.compat.v1.train.ProfilerHook(save_steps=1, output_dir=logdir)
profile = ExecutionProfile(hook)
options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
profile.before(options)            # starts the profiler: before_run asked a full trace
tf.reduce_sum(tf.ones([4]))        # the execution
profile.after(1)                   # stops it, under logdir/plugins/profile/
```
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import tensorflow as tf

from keras_tpu_estimator._compat.session_hooks import profiler_hook_output_dir
from keras_tpu_estimator.utils import get_logger

_log = get_logger(__name__)


class ExecutionProfile:
    """Starts and stops TensorFlow's profiler around the executions `hook` asks a full trace of.

    Args:
        hook: The session hook.
    """

    def __init__(self, hook: Any):
        self._hook = hook
        self._scratch: str | None = None
        self._warned = False
        self.written: list[str] = []  # the profile directories written, in order

    def before(self, options: Any) -> None:
        """Starts profiling when `options` (from `before_run`) ask for a full trace."""
        if options is None or getattr(options, "trace_level", 0) != tf.compat.v1.RunOptions.FULL_TRACE:
            return
        if profiler_hook_output_dir(self._hook) is None:
            if not self._warned:
                self._warned = True
                _log.warning("%s asks for a full trace but has no output_dir: no profile is written.",
                             type(self._hook).__name__)
            return
        self._scratch = tempfile.mkdtemp(prefix="keras_tpu_estimator_profile_")
        try:
            tf.profiler.experimental.start(self._scratch)
        except Exception as error:  # another profile is running (Keras' TensorBoard callback)
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
            _log.warning("%s: the execution is not profiled: %s", type(self._hook).__name__, error)

    def after(self, global_step: int) -> None:
        """Stops a running profile and moves it under the hook's output directory."""
        scratch, self._scratch = self._scratch, None
        if scratch is None:
            return
        try:
            tf.profiler.experimental.stop()
            runs = os.path.join(scratch, "plugins", "profile")
            target = os.path.join(profiler_hook_output_dir(self._hook), "plugins", "profile")
            for run in sorted(os.listdir(runs)):
                destination = os.path.join(target, f"{run}_step_{global_step}")
                tf.io.gfile.makedirs(destination)  # gfile: the output_dir may be a bucket
                for name in sorted(os.listdir(os.path.join(runs, run))):
                    tf.io.gfile.copy(os.path.join(runs, run, name), os.path.join(destination, name), overwrite=True)
                self.written.append(destination)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
