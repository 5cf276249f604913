"""`tf.compat.v1.estimator.tpu.experimental`: TPU embeddings, which this library does not run.

Example:

```python
# Was: tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec(...); now raises and
# names the replacement, tf.tpu.experimental.embedding.TPUEmbedding inside model_fn.
```
"""

from __future__ import annotations

from typing import Any


class EmbeddingConfigSpec:
    """TPUEstimator's TPU-embedding configuration: constructing it raises a NotImplementedError.

    Example:

    ```python
    try:
        EmbeddingConfigSpec(feature_columns=[])
    except NotImplementedError as error:   # it names the replacement
        assert "tf.tpu.experimental.embedding.TPUEmbedding" in str(error)
    ```
    """

    def __init__(self, *args: Any, **kwargs: Any):
        raise NotImplementedError(
            "EmbeddingConfigSpec (TPUEstimator's TPU embeddings) is not supported by "
            "keras_tpu_estimator. Create a tf.tpu.experimental.embedding.TPUEmbedding inside "
            "model_fn and pass "
            "embedding_config_spec=None."
        )


__all__ = ["EmbeddingConfigSpec"]
