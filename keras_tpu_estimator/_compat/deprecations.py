"""Private TensorFlow symbol for TF1 calls whose deprecation notice the user cannot act on.

Part of `_compat` (see its docstring): `tensorflow.python.util.deprecation.silence`.
"""

from __future__ import annotations

import contextlib

from tensorflow.python.util import deprecation as _deprecation


def quiet_deprecations() -> contextlib.AbstractContextManager:
    """Silences TensorFlow's deprecation notices inside (TF1 SavedModel signature builders).

    Example:

    ```python
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        with quiet_deprecations():
            signature = tf.compat.v1.saved_model.predict_signature_def({"x": x}, {"y": 2 * x})
    assert signature.method_name == "tensorflow/serving/predict"
    ```
    """
    return _deprecation.silence()
