"""An MNIST-on-TPU program as Cloud TPU's samples wrote it: `tf.estimator.tpu.*` on `import tensorflow as tf`.

It has no estimator import to swap: it runs unchanged through
`python -m keras_tpu_estimator mnist_tpu_namespace.py --use_tpu=...`.
"""

import json

import numpy as np
import tensorflow as tf
from absl import app, flags

flags.DEFINE_bool("use_tpu", False, "Use TPUs rather than plain CPUs.")
flags.DEFINE_string("model_dir", None, "Estimator model_dir.")
flags.DEFINE_integer("batch_size", 16, "Global batch size for training and evaluation.")
flags.DEFINE_integer("train_steps", 12, "Total number of training steps.")
flags.DEFINE_integer("eval_steps", 2, "Total number of evaluation steps.")
flags.DEFINE_integer("iterations", 4, "Number of iterations per TPU training loop.")
flags.DEFINE_float("learning_rate", 0.5, "Learning rate.")
flags.DEFINE_string("result_file", None, "Where to write the results as JSON.")
flags.DEFINE_bool("use_xla", False, "Turn on XLA JIT compilation (the session's global_jit_level).")
FLAGS = flags.FLAGS

IMAGE_PIXELS = 36
NUM_CLASSES = 5


def synthetic_mnist(rows, seed):
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, NUM_CLASSES, size=rows).astype(np.int32)
    centers = np.random.RandomState(99).randn(NUM_CLASSES, IMAGE_PIXELS).astype(np.float32)
    images = centers[labels] + 0.8 * rng.randn(rows, IMAGE_PIXELS).astype(np.float32)
    return images, labels


def metric_fn(labels, logits):
    predictions = tf.argmax(logits, 1)
    return {"accuracy": tf.compat.v1.metrics.accuracy(labels=labels, predictions=predictions)}


def model_fn(features, labels, mode, params):
    """A two-layer classifier in TF1 layers."""
    del params
    image = features
    if isinstance(image, dict):
        image = features["image"]
    hidden_init = np.random.RandomState(1).randn(IMAGE_PIXELS, 24).astype(np.float32) * 0.2
    logits_init = np.random.RandomState(2).randn(24, NUM_CLASSES).astype(np.float32) * 0.2
    hidden = tf.compat.v1.layers.dense(
        image, 24, activation=tf.nn.relu, name="hidden",
        kernel_initializer=tf.compat.v1.constant_initializer(hidden_init))
    logits = tf.compat.v1.layers.dense(
        hidden, NUM_CLASSES, name="logits",
        kernel_initializer=tf.compat.v1.constant_initializer(logits_init))
    if mode == tf.estimator.ModeKeys.PREDICT:
        predictions = {"class_ids": tf.argmax(logits, axis=1), "probabilities": tf.nn.softmax(logits)}
        return tf.estimator.tpu.TPUEstimatorSpec(mode, predictions=predictions)

    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.tpu.TPUEstimatorSpec(mode=mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))

    learning_rate = tf.compat.v1.train.exponential_decay(
        FLAGS.learning_rate, tf.compat.v1.train.get_global_step(), decay_steps=5, decay_rate=0.8)
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(learning_rate)
    if FLAGS.use_tpu:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    return tf.estimator.tpu.TPUEstimatorSpec(
        mode=mode, loss=loss, train_op=optimizer.minimize(loss, tf.compat.v1.train.get_global_step()))


def train_input_fn(params):
    images, labels = synthetic_mnist(96, seed=0)
    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).repeat()
    return dataset.batch(params["batch_size"], drop_remainder=True)


def eval_input_fn(params):
    images, labels = synthetic_mnist(40, seed=1)
    dataset = tf.data.Dataset.from_tensor_slices((images, labels))
    return dataset.batch(params["batch_size"], drop_remainder=True)


def predict_input_fn(params):
    images, _ = synthetic_mnist(10, seed=2)
    return tf.data.Dataset.from_tensor_slices({"image": images}).batch(params["batch_size"])


def main(argv):
    del argv
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)
    session_config = None
    if FLAGS.use_xla:
        session_config = tf.compat.v1.ConfigProto()
        session_config.graph_options.optimizer_options.global_jit_level = tf.compat.v1.OptimizerOptions.ON_1
    run_config = tf.estimator.tpu.RunConfig(
        model_dir=FLAGS.model_dir,
        save_checkpoints_steps=8,
        session_config=session_config,
        tpu_config=tf.estimator.tpu.TPUConfig(FLAGS.iterations))
    estimator = tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        use_tpu=FLAGS.use_tpu,
        train_batch_size=FLAGS.batch_size,
        eval_batch_size=FLAGS.batch_size,
        predict_batch_size=FLAGS.batch_size,
        config=run_config)
    estimator.train(input_fn=train_input_fn, max_steps=FLAGS.train_steps)
    metrics = estimator.evaluate(input_fn=eval_input_fn, steps=FLAGS.eval_steps)
    predictions = list(estimator.predict(input_fn=predict_input_fn))
    results = {
        "evaluate": {key: float(value) for key, value in metrics.items()},
        "class_ids": [int(p["class_ids"]) for p in predictions],
        "probabilities": [[float(x) for x in p["probabilities"]] for p in predictions],
        "checkpoints": sorted(
            int(path.rsplit("-", 1)[1]) for path in tf.train.get_checkpoint_state(
                FLAGS.model_dir).all_model_checkpoint_paths),
        "hidden_bias": [float(x) for x in estimator.get_variable_value("hidden/bias")],
    }
    print(json.dumps(results))
    if FLAGS.result_file:
        with open(FLAGS.result_file, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    app.run(main)
