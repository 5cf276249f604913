"""A ResNet-main-style program: TF1 graph mode (`disable_v2_behavior()`) and `import tensorflow.compat.v1 as tf`.

As tensorflow/tpu's `resnet_main.py` did, it switches TensorFlow to graph
mode at start, builds its model with `tf.layers` and batch norm under
`UPDATE_OPS`, reads static shapes with `Dimension.value`, and drives a
`tf.estimator.tpu.TPUEstimator`; then it exports a SavedModel from
placeholders and reads it back in a `Session`, in graph mode.
"""

import json
import os

import numpy as np
import tensorflow.compat.v1 as tf
from absl import app, flags

flags.DEFINE_bool("use_tpu", False, "Whether to use TPU.")
flags.DEFINE_string("model_dir", None, "Directory for checkpoints and summaries.")
flags.DEFINE_integer("train_batch_size", 8, "Global training batch size.")
flags.DEFINE_integer("eval_batch_size", 8, "Global evaluation batch size.")
flags.DEFINE_integer("train_steps", 10, "Training steps.")
flags.DEFINE_integer("iterations_per_loop", 5, "Steps per TPU loop.")
flags.DEFINE_bool("batch_norm", True, "Batch-normalize the hidden layer (per replica, as on TPU cores).")
flags.DEFINE_string("result_file", None, "Where to write results (JSON).")
FLAGS = flags.FLAGS

FEATURES = 12


def dataset(rows, seed):
    rng = np.random.RandomState(seed)
    x = rng.randn(rows, FEATURES).astype(np.float32)
    y = (x[:, :3].sum(axis=1) > 0).astype(np.int32)
    return x, y


def network(inputs, is_training):
    width = inputs.shape[1].value  # TF1 static shapes: a Dimension
    kernel = np.linspace(-0.3, 0.3, width * 16, dtype=np.float32).reshape(width, 16)
    net = tf.layers.dense(inputs, 16, use_bias=False, name="fc1",
                          kernel_initializer=tf.constant_initializer(kernel))
    if FLAGS.batch_norm:
        net = tf.layers.batch_normalization(net, training=is_training, momentum=0.9, name="bn1")
    net = tf.nn.relu(net)
    head = np.linspace(0.2, -0.2, 16 * 2, dtype=np.float32).reshape(16, 2)
    return tf.layers.dense(net, 2, name="logits", kernel_initializer=tf.constant_initializer(head))


def resnet_model_fn(features, labels, mode, params):
    logits = network(features["x"], mode == tf.estimator.ModeKeys.TRAIN)
    if mode == tf.estimator.ModeKeys.PREDICT:
        predictions = {"classes": tf.argmax(logits, axis=1), "probabilities": tf.nn.softmax(logits)}
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode=mode, predictions=predictions,
            export_outputs={"classify": tf.estimator.export.PredictOutput(predictions)})

    one_hot = tf.one_hot(labels, 2)
    loss = tf.losses.softmax_cross_entropy(onehot_labels=one_hot, logits=logits)
    loss += 1e-3 * tf.add_n([tf.nn.l2_loss(v) for v in tf.trainable_variables() if "kernel" in v.name])
    global_step = tf.train.get_global_step()
    if mode == tf.estimator.ModeKeys.TRAIN:
        learning_rate = tf.train.piecewise_constant(global_step, [6], [0.2, 0.05])
        gs_t = tf.reshape(global_step, [1])  # read before the update, as each step's index
        loss_t = tf.reshape(loss, [1])
        lr_t = tf.reshape(learning_rate, [1])

        def host_call_fn(gs, loss, lr):
            """Training summaries, written on the host as resnet_main's host_call did."""
            gs = gs[0]
            with tf.compat.v2.summary.create_file_writer(FLAGS.model_dir, max_queue=100).as_default():
                with tf.compat.v2.summary.record_if(True):
                    tf.compat.v2.summary.scalar("loss", loss[0], step=gs)
                    tf.compat.v2.summary.scalar("learning_rate", lr[0], step=gs)
                    return tf.summary.all_v2_summary_ops()

        optimizer = tf.train.MomentumOptimizer(learning_rate, momentum=0.9)
        if params["use_tpu"]:
            optimizer = tf.tpu.CrossShardOptimizer(optimizer)
        update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
        with tf.control_dependencies(update_ops):
            train_op = optimizer.minimize(loss, global_step)
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode=mode, loss=loss, train_op=train_op, host_call=(host_call_fn, [gs_t, loss_t, lr_t]))

    def metric_fn(labels, logits):
        predictions = tf.argmax(logits, axis=1)
        return {
            "top_1_accuracy": tf.metrics.accuracy(labels, predictions),
            "mean_logit": tf.metrics.mean(logits),
        }

    return tf.estimator.tpu.TPUEstimatorSpec(
        mode=mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))


class ImageNetInput:
    def __init__(self, is_training, rows, seed):
        self.is_training, self.rows, self.seed = is_training, rows, seed

    def input_fn(self, params):
        x, y = dataset(self.rows, self.seed)
        ds = tf.data.Dataset.from_tensor_slices(({"x": x}, y))
        if self.is_training:
            ds = ds.repeat()
        return ds.batch(params["batch_size"], drop_remainder=True)


def serving_input_fn():
    x = tf.placeholder(tf.float32, [None, FEATURES], name="x")
    return tf.estimator.export.ServingInputReceiver({"x": x}, {"x": x})


def main(unused_argv):
    tf.logging.set_verbosity(tf.logging.INFO)
    assert not tf.executing_eagerly()
    config = tf.estimator.tpu.RunConfig(
        model_dir=FLAGS.model_dir, save_checkpoints_steps=FLAGS.iterations_per_loop,
        tpu_config=tf.estimator.tpu.TPUConfig(iterations_per_loop=FLAGS.iterations_per_loop))
    estimator = tf.estimator.tpu.TPUEstimator(
        use_tpu=FLAGS.use_tpu, model_fn=resnet_model_fn, config=config,
        train_batch_size=FLAGS.train_batch_size, eval_batch_size=FLAGS.eval_batch_size,
        predict_batch_size=FLAGS.eval_batch_size, export_to_tpu=False)
    estimator.train(ImageNetInput(True, 48, 0).input_fn, max_steps=FLAGS.train_steps)
    metrics = estimator.evaluate(ImageNetInput(False, 24, 1).input_fn, steps=3)
    predictions = list(estimator.predict(ImageNetInput(False, 16, 2).input_fn))
    export_dir = estimator.export_saved_model(os.path.join(FLAGS.model_dir, "export"), serving_input_fn)

    # Read the export back as TF1 programs did: a Session in graph mode.
    x, _ = dataset(4, 3)
    with tf.Graph().as_default(), tf.Session() as sess:
        meta = tf.saved_model.loader.load(sess, [tf.saved_model.tag_constants.SERVING], export_dir)
        signature = meta.signature_def["classify"]
        served = sess.run(signature.outputs["classes"].name, {signature.inputs["x"].name: x})

    summaries = {}
    for path in tf.io.gfile.glob(os.path.join(FLAGS.model_dir, "events.out.tfevents.*")):
        for event in tf.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == "learning_rate":
                    summaries[event.step] = round(float(tf.make_ndarray(value.tensor)), 6)
    results = {
        "host_learning_rate": [summaries[step] for step in sorted(summaries)],
        "host_steps": sorted(summaries),
        "evaluate": {k: float(v) for k, v in metrics.items()},
        "classes": [int(p["classes"]) for p in predictions],
        "probabilities": [float(p["probabilities"][1]) for p in predictions],
        "served_classes": [int(c) for c in served],
        "fc1_kernel": [float(v) for v in estimator.get_variable_value("fc1/kernel")[0, :4]],
        "variables": sorted(n for n in estimator.get_variable_names() if "Momentum" not in n),
    }
    print(json.dumps(results))
    if FLAGS.result_file:
        with open(FLAGS.result_file, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    tf.disable_v2_behavior()
    app.run(main)
