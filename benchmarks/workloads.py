"""One TPUEstimator program, importable by the bridge's Python (TF 2.21) and the original's (TF 2.15).

The MLP 784-256-256-10 (batch 128, `tf.compat.v1.train.AdamOptimizer`) written in TF1 style with
`tf.compat.v1.get_variable` and plain ops (no Keras, so the same code runs under Keras 2 and 3),
an `eval_metrics` tuple (`tf.compat.v1.metrics.accuracy` and `mean` of the per-example loss) and
`input_fn(params)` on a cached synthetic dataset. The spec class is an argument: the caller passes
`keras_tpu_estimator.TPUEstimatorSpec` or `tf.compat.v1.estimator.tpu.TPUEstimatorSpec`
(`estimator_api(backend)` returns the right set). Nothing here imports `keras_tpu_estimator` unless
asked to, so the original's Python can import this module from the repository root.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MLP = {"inputs": 784, "hidden": [256, 256], "outputs": 10, "batch": 128}
ROWS = 1024  # distinct examples, cached and repeated


def estimator_api(backend: str) -> dict[str, Any]:
    """The TPUEstimator classes of `backend`: "bridge" (keras_tpu_estimator) or "original" (TF 2.15)."""
    if backend == "bridge":
        import keras_tpu_estimator as api
    elif backend == "original":
        import tensorflow as tf

        api = tf.compat.v1.estimator.tpu
    else:
        raise ValueError(f"backend must be 'bridge' or 'original', not {backend!r}")
    return {name: getattr(api, name) for name in ("TPUEstimator", "TPUEstimatorSpec", "RunConfig", "TPUConfig")}


def data(workload: dict = MLP, rows: int = ROWS, seed: int = 0) -> tuple:
    import numpy as np

    rng = np.random.RandomState(seed)
    x = rng.randn(rows, workload["inputs"]).astype(np.float32)
    y = rng.randint(0, workload["outputs"], rows).astype(np.int32)
    return x, y


def make_input_fn(workload: dict = MLP, labels: bool = True, rows: int | None = None) -> Callable:
    """`input_fn(params)`: batches of `params["batch_size"]`, repeated forever with labels;
    without labels (prediction) exactly `rows` examples (default one batch), once."""
    x, y = data(workload)

    def input_fn(params: dict) -> Any:
        import tensorflow as tf

        batch = params["batch_size"]
        if not labels:
            n = rows or batch
            return tf.data.Dataset.from_tensor_slices({"x": x[:n]}).batch(batch)
        dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, y)).cache().repeat()
        return dataset.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    return input_fn


def metric_fn(labels: Any, logits: Any) -> dict:
    import tensorflow as tf

    per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return {
        "accuracy": tf.compat.v1.metrics.accuracy(labels, predictions),
        "mean_loss": tf.compat.v1.metrics.mean(per_example),
    }


def make_model_fn(spec_class: type, workload: dict = MLP) -> Callable:
    """`model_fn(features, labels, mode, params)` returning `spec_class` instances."""

    def model_fn(features: Any, labels: Any, mode: str, params: dict) -> Any:
        import tensorflow as tf

        h = features["x"]
        sizes = [*workload["hidden"], workload["outputs"]]
        for i, units in enumerate(sizes):
            w = tf.compat.v1.get_variable(f"dense_{i}/kernel", [h.shape[-1], units])
            b = tf.compat.v1.get_variable(
                f"dense_{i}/bias", [units], initializer=tf.compat.v1.zeros_initializer()
            )
            h = tf.matmul(h, w) + b
            if i + 1 < len(sizes):
                h = tf.nn.relu(h)
        if mode == "infer":  # ModeKeys.PREDICT on both sides
            return spec_class(mode, predictions={"logits": h})
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=h))
        if mode == "eval":
            return spec_class(mode, loss=loss, eval_metrics=(metric_fn, [labels, h]))
        global_step = tf.compat.v1.train.get_global_step()
        train_op = tf.compat.v1.train.AdamOptimizer(1e-3).minimize(loss, global_step=global_step)
        return spec_class(mode, loss=loss, train_op=train_op)

    return model_fn


def make_estimator(backend: str, model_dir: str, iterations_per_loop: int, workload: dict = MLP) -> Any:
    """`TPUEstimator(model_fn, config=RunConfig(model_dir, TPUConfig(iterations_per_loop)), use_tpu=False)`."""
    api = estimator_api(backend)
    config = api["RunConfig"](
        model_dir=model_dir, tpu_config=api["TPUConfig"](iterations_per_loop=iterations_per_loop)
    )
    batch = workload["batch"]
    return api["TPUEstimator"](
        make_model_fn(api["TPUEstimatorSpec"], workload), config=config, use_tpu=False,
        train_batch_size=batch, eval_batch_size=batch, predict_batch_size=batch,
    )
