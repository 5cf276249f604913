"""An unchanged TPUEstimator-style program, end to end, on synthetic data.

Run it with `python -m keras_tpu_estimator.examples.synthetic_mlp [--steps N]`.
It trains a TF1 `get_variable` MLP with a TF1 Adam `train_op`, evaluates it,
predicts, and prints the results; the progress bar is Keras'.
"""

from __future__ import annotations

import argparse

import numpy as np
import tensorflow as tf

import keras_tpu_estimator as kte

NUM_FEATURES, NUM_CLASSES = 20, 4


def synthetic_data(num_rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows of Gaussian features; the label is the argmax of a fixed linear map."""
    rng = np.random.RandomState(seed)
    x = rng.randn(num_rows, NUM_FEATURES).astype(np.float32)
    labels = np.argmax(x @ np.random.RandomState(42).randn(NUM_FEATURES, NUM_CLASSES), axis=1)
    return x, labels.astype(np.int32)


def input_fn(params: dict) -> tf.data.Dataset:
    """Training/eval input, batched with params['batch_size'] as TPUEstimator asked."""
    x, labels = synthetic_data(4096)
    dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, labels))
    return dataset.shuffle(4096, seed=1).repeat().batch(params["batch_size"], drop_remainder=True)


def predict_input_fn(params: dict) -> tf.data.Dataset:
    """256 held-out rows for prediction."""
    x, _ = synthetic_data(256, seed=1)
    return tf.data.Dataset.from_tensor_slices({"x": x}).batch(params["batch_size"], drop_remainder=True)


def model_fn(features, labels, mode, params):
    """A TPUEstimator model_fn, as written for TF 1.x."""
    hidden = features["x"]
    for i, units in enumerate(params["hidden_units"]):
        with tf.compat.v1.variable_scope(f"layer_{i}"):
            w = tf.compat.v1.get_variable("kernel", [hidden.shape[-1], units])
            b = tf.compat.v1.get_variable("bias", [units], initializer=tf.zeros_initializer())
        hidden = tf.nn.relu(tf.matmul(hidden, w) + b)
    with tf.compat.v1.variable_scope("logits"):
        w = tf.compat.v1.get_variable("kernel", [hidden.shape[-1], NUM_CLASSES])
    logits = tf.matmul(hidden, w)
    if mode == kte.ModeKeys.PREDICT:
        return kte.TPUEstimatorSpec(
            mode, predictions={"class": tf.argmax(logits, axis=1), "probabilities": tf.nn.softmax(logits)}
        )
    loss = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    )
    train_op = None
    if mode == kte.ModeKeys.TRAIN:
        optimizer = tf.compat.v1.train.AdamOptimizer(params["learning_rate"])
        train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def main(argv: list[str] | None = None) -> dict:
    """Trains, evaluates and predicts; returns the numbers it printed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--iterations-per-loop", type=int, default=50)
    args = parser.parse_args(argv)

    config = kte.RunConfig(
        tpu_config=kte.TPUConfig(iterations_per_loop=args.iterations_per_loop), tf_random_seed=0
    )
    model = kte.EstimatorModel(
        model_fn,
        params={"hidden_units": [64, 64], "learning_rate": 3e-3},
        config=config,
        train_batch_size=128,
        eval_batch_size=128,
        predict_batch_size=64,
    )
    print(f"Strategy: {type(model.distribute_strategy).__name__}, "
          f"{model.distribute_strategy.num_replicas_in_sync} replica(s)")
    before = model.evaluate(input_fn, steps=8, verbose=0)
    model.fit(input_fn, callbacks=[kte.StopAtStep(steps=args.steps)])
    after = model.evaluate(input_fn, steps=8, verbose=0)
    predictions = model.predict(predict_input_fn, verbose=0)
    _, labels = synthetic_data(256, seed=1)
    accuracy = float(np.mean(predictions["class"] == labels))
    print(f"global_step: {model.global_step}")
    print(f"eval loss: {before:.4f} before training, {after:.4f} after")
    print(f"predictions: {len(predictions['class'])} rows, accuracy {accuracy:.3f}")
    return {"global_step": model.global_step, "loss_before": before, "loss_after": after,
            "accuracy": accuracy}


if __name__ == "__main__":
    main()
