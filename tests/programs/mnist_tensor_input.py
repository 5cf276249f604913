"""An MNIST program whose input_fns return tensors, as tensorflow/tpu's MobileNet, SqueezeNet and MNIST demo did.

Each input_fn ends with `make_one_shot_iterator(dataset).get_next()` (the
evaluation input with `make_initializable_iterator`, its initializer in
`TABLE_INITIALIZERS` so the Scaffold runs it) and post-processes the tensors
before returning them. Every `session.run` of a step took the next batch, and
the input ended with `OutOfRangeError`: a finite training input ends
training early, `evaluate(steps=None)` runs to its end. With `--graph_mode`
the program first calls `tf.compat.v1.disable_v2_behavior()` and uses v1
datasets' own `make_one_shot_iterator()` method.
"""

import json

import numpy as np
import tensorflow as tf
from absl import app, flags

flags.DEFINE_bool("use_tpu", False, "Use TPUs rather than plain CPUs.")
flags.DEFINE_bool("graph_mode", False, "Call tf.compat.v1.disable_v2_behavior() first, as TF1 programs ran.")
flags.DEFINE_string("model_dir", None, "Estimator model_dir.")
flags.DEFINE_integer("batch_size", 8, "Global batch size.")
flags.DEFINE_integer("train_steps", 6, "Steps of the first train() call.")
flags.DEFINE_integer("iterations", 4, "Iterations per TPU loop.")
flags.DEFINE_integer("eval_rows", 20, "Evaluation rows (20: batches of 8, 8 and 4).")
flags.DEFINE_string("result_file", None, "Where to write the results as JSON.")
FLAGS = flags.FLAGS

PIXELS = 16
CLASSES = 4


def synthetic_mnist(rows, seed):
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, CLASSES, size=rows).astype(np.int32)
    centers = np.random.RandomState(7).randint(0, 255, size=(CLASSES, PIXELS))
    images = np.clip(centers[labels] + rng.randint(-60, 60, size=(rows, PIXELS)), 0, 255).astype(np.uint8)
    return images, labels


def dataset_of(arrays):
    if FLAGS.graph_mode:
        return tf.compat.v1.data.Dataset.from_tensor_slices(arrays)
    return tf.data.Dataset.from_tensor_slices(arrays)


def one_shot(dataset):
    if FLAGS.graph_mode:
        return dataset.make_one_shot_iterator().get_next()
    return tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()


def preprocess(images, labels, batch_size):
    """As the demos did after get_next(): scale, fix the static shape, one-hot the labels."""
    images = tf.cast(images, tf.float32) / 255.0
    if batch_size is not None:
        images = tf.reshape(images, [batch_size, PIXELS])
    return {"image": images}, tf.one_hot(labels, CLASSES)


def train_input_fn(params):
    batch_size = params["batch_size"]
    images, labels = synthetic_mnist(64, seed=0)
    dataset = dataset_of((images, labels)).repeat().batch(batch_size, drop_remainder=True)
    images, labels = one_shot(dataset)
    return preprocess(images, labels, batch_size)


def finite_train_input_fn(params):
    """24 rows (three global batches) and no repeat: train(steps=100) ends when they are used."""
    batch_size = params["batch_size"]
    images, labels = synthetic_mnist(24, seed=3)
    images, labels = one_shot(dataset_of((images, labels)).batch(batch_size, drop_remainder=True))
    return preprocess(images, labels, batch_size)


def eval_input_fn(params):
    """`--eval_rows` rows (batches of 8, 8 and 4 by default) through an initializable iterator."""
    images, labels = synthetic_mnist(FLAGS.eval_rows, seed=1)
    dataset = dataset_of((images, labels)).batch(params["batch_size"])
    if FLAGS.graph_mode:
        iterator = dataset.make_initializable_iterator()
    else:
        iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
    tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.TABLE_INITIALIZERS, iterator.initializer)
    images, labels = iterator.get_next()
    return preprocess(images, labels, None)


def predict_input_fn(params):
    images, _ = synthetic_mnist(10, seed=2)
    dataset = dataset_of({"image": images}).batch(params["batch_size"])
    dataset = dataset.map(lambda f: {"image": tf.cast(f["image"], tf.float32) / 255.0})
    if FLAGS.use_tpu:  # TPUEstimator's TPU path required a Dataset in PREDICT
        return dataset
    return one_shot(dataset)


def model_fn(features, labels, mode, params):
    hidden_init = np.random.RandomState(1).randn(PIXELS, 12).astype(np.float32) * 0.3
    logits_init = np.random.RandomState(2).randn(12, CLASSES).astype(np.float32) * 0.3
    hidden = tf.compat.v1.layers.dense(
        features["image"], 12, activation=tf.nn.relu, name="hidden",
        kernel_initializer=tf.compat.v1.constant_initializer(hidden_init))
    logits = tf.compat.v1.layers.dense(
        hidden, CLASSES, name="logits", kernel_initializer=tf.compat.v1.constant_initializer(logits_init))
    if mode == tf.estimator.ModeKeys.PREDICT:
        predictions = {"class_ids": tf.argmax(logits, axis=1), "probabilities": tf.nn.softmax(logits)}
        return tf.estimator.tpu.TPUEstimatorSpec(mode, predictions=predictions)
    loss = tf.compat.v1.losses.softmax_cross_entropy(onehot_labels=labels, logits=logits)
    if mode == tf.estimator.ModeKeys.EVAL:
        def metric_fn(labels, logits):
            return {"accuracy": tf.compat.v1.metrics.accuracy(tf.argmax(labels, 1), tf.argmax(logits, 1)),
                    "rows": tf.compat.v1.metrics.true_positives(  # the rows evaluated
                        tf.ones_like(labels[:, 0], tf.bool), tf.ones_like(logits[:, 0], tf.bool))}
        return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
    optimizer = tf.compat.v1.train.MomentumOptimizer(0.5, momentum=0.9)
    if params["use_tpu"]:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    train_op = optimizer.minimize(loss, tf.compat.v1.train.get_global_step())
    return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def main(argv):
    del argv
    if FLAGS.graph_mode:
        tf.compat.v1.disable_v2_behavior()
    config = tf.estimator.tpu.RunConfig(
        model_dir=FLAGS.model_dir, tpu_config=tf.estimator.tpu.TPUConfig(FLAGS.iterations))
    estimator = tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn, use_tpu=FLAGS.use_tpu, config=config, train_batch_size=FLAGS.batch_size,
        eval_batch_size=FLAGS.batch_size, predict_batch_size=FLAGS.batch_size)
    estimator.train(train_input_fn, max_steps=FLAGS.train_steps)
    step_after_train = int(estimator.get_variable_value("global_step"))
    estimator.train(finite_train_input_fn, steps=100)  # ends with its input, after 3 steps
    results = {
        "global_steps": [step_after_train, int(estimator.get_variable_value("global_step"))],
        "evaluate_2_steps": {k: float(v) for k, v in estimator.evaluate(eval_input_fn, steps=2).items()},
        "evaluate_to_the_end": {k: float(v) for k, v in estimator.evaluate(eval_input_fn).items()},
    }
    predictions = list(estimator.predict(predict_input_fn))
    results["class_ids"] = [int(p["class_ids"]) for p in predictions]
    results["probabilities"] = [[float(x) for x in p["probabilities"]] for p in predictions]
    results["logits_bias"] = [float(x) for x in estimator.get_variable_value("logits/bias")]
    print(json.dumps(results))
    if FLAGS.result_file:
        with open(FLAGS.result_file, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    app.run(main)
