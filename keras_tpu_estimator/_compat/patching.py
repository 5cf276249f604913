"""Attribute patches that one thread enters and leaves (a build): set while active, restored after."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def swapped_attribute(owner: Any, name: str, value: Any) -> Iterator[None]:
    """Sets `owner.name = value` while active, and puts the previous value back on exit.

    For patches entered and left by one thread (a build); `patched_attributes`
    is the reference-counted form for patches that replica threads share.

    Example:

    ```python
    calls = []
    def record(checkpoint, assignment_map):
        calls.append(assignment_map)

    with swapped_attribute(tf.compat.v1.train, "init_from_checkpoint", record):
        tf.compat.v1.train.init_from_checkpoint("/tmp/m", {"w": "w"})   # as model_fn would
    assert calls == [{"w": "w"}] and tf.compat.v1.train.init_from_checkpoint is not record
    ```
    """
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)
