"""Private parts of TF's session hooks that the hook callbacks read."""

from __future__ import annotations

import os
from typing import Any

import tensorflow as tf


def profiler_hook_output_dir(hook: Any) -> str | None:
    """A `tf.compat.v1.train.ProfilerHook`'s `output_dir` (None for other hooks).

    Reads its private `_output_file` (`<output_dir>/timeline-{}.json`), stable since TF 1.x.
    """
    output_file = getattr(hook, "_output_file", None)
    if isinstance(hook, tf.compat.v1.train.ProfilerHook) and isinstance(output_file, str):
        return os.path.dirname(output_file)
    return None
