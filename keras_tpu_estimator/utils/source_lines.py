"""Where user code made an op: the `model_fn` line an error or a report should name.

Example:

```python
with tf.Graph().as_default():
    op = tf.constant(1.0, name="mine").op   # made on line 2 of this example
line = user_line(op)   # "/home/me/mnist.py:57", or None when only TensorFlow made it
assert line.endswith(":2")
```
"""

from __future__ import annotations

import os
import sysconfig

import tensorflow as tf

_INSTALLED = (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])
_FRAMEWORK_DIRS = (
    os.path.dirname(os.path.dirname(__file__)) + os.sep,  # this library (utils/ is one of its wings)
    os.path.dirname(tf.__file__) + os.sep,
    sysconfig.get_paths()["stdlib"] + os.sep,
    "<frozen",
    *(os.path.join(root, name) + os.sep for root in _INSTALLED for name in ("tensorflow", "keras", "tf_keras", "absl")),
)
_INSTALLED_DIRS = tuple(root + os.sep for root in _INSTALLED)


def user_line(op: tf.Operation) -> str | None:
    """`file:line` of the innermost frame that made `op` outside TensorFlow, Keras and this library."""
    frames = list(reversed(op.traceback or []))
    # The user's own files first; else an installed package's (a model_fn shipped in one).
    for skipped in ((*_FRAMEWORK_DIRS, *_INSTALLED_DIRS), _FRAMEWORK_DIRS):
        for frame in frames:
            if not frame.filename.startswith(skipped):
                return f"{frame.filename}:{frame.lineno}"
    return None
