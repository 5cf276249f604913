"""An EfficientNet-main-style program: EMA evaluation through `scaffold_fn`, TF1 summaries, hooks.

As tensorflow/tpu's EfficientNet and MnasNet mains do, training applies an
`ExponentialMovingAverage` to the trainable variables and the batch-norm
moving statistics (picked from `global_variables()` by name); evaluation,
prediction and export restore the averages through
`Scaffold(saver=Saver(ema.variables_to_restore()))` from `scaffold_fn`. Off a
TPU, `model_fn` writes TF1 summaries; a `LoggingTensorHook` logs the global
step variable and the learning rate each loop. The program uses
`tf.estimator.tpu.*` on `import tensorflow as tf`, run unchanged through
`python -m keras_tpu_estimator`.
"""

import json
import os

import numpy as np
import tensorflow as tf
from absl import app, flags

flags.DEFINE_bool("use_tpu", False, "Whether to use TPU.")
flags.DEFINE_string("model_dir", None, "Directory for checkpoints and summaries.")
flags.DEFINE_integer("train_batch_size", 8, "Global training batch size.")
flags.DEFINE_integer("eval_batch_size", 8, "Global evaluation batch size.")
flags.DEFINE_integer("train_steps", 12, "Training steps.")
flags.DEFINE_integer("iterations_per_loop", 4, "Steps per TPU loop.")
flags.DEFINE_float("moving_average_decay", 0.7, "EMA decay; 0 turns the EMA off.")
flags.DEFINE_string("result_file", None, "Where to write results (JSON).")
FLAGS = flags.FLAGS

FEATURES = 6
v1 = tf.compat.v1


def dataset(rows, seed):
    rng = np.random.RandomState(seed)
    x = rng.randn(rows, FEATURES).astype(np.float32)
    y = (x[:, 0] - x[:, 1] > 0).astype(np.int32)
    return x, y


def build_model(inputs, is_training):
    kernel = np.linspace(-0.4, 0.4, FEATURES * 8, dtype=np.float32).reshape(FEATURES, 8)
    net = v1.layers.dense(inputs, 8, use_bias=False, name="stem",
                          kernel_initializer=v1.constant_initializer(kernel))
    net = v1.layers.batch_normalization(net, training=is_training, momentum=0.5, name="stem_bn")
    net = tf.nn.relu(net)
    head = np.linspace(0.3, -0.3, 8 * 2, dtype=np.float32).reshape(8, 2)
    return v1.layers.dense(net, 2, name="head", kernel_initializer=v1.constant_initializer(head))


def model_fn(features, labels, mode, params):
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    logits = build_model(features["x"], is_training)
    global_step = v1.train.get_global_step()
    has_moving_average_decay = FLAGS.moving_average_decay > 0
    scaffold_fn = None
    if has_moving_average_decay and not is_training:
        ema = v1.train.ExponentialMovingAverage(FLAGS.moving_average_decay, num_updates=global_step)
        ema_vars = v1.trainable_variables() + [v for v in v1.global_variables() if "moving_" in v.op.name]
        restore_vars_dict = ema.variables_to_restore(ema_vars)

        def _scaffold_fn():
            saver = v1.train.Saver(restore_vars_dict)
            return v1.train.Scaffold(saver=saver)

        scaffold_fn = _scaffold_fn

    if mode == tf.estimator.ModeKeys.PREDICT:
        predictions = {"classes": tf.argmax(logits, axis=1), "probabilities": tf.nn.softmax(logits)}
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode=mode, predictions=predictions, scaffold_fn=scaffold_fn,
            export_outputs={"serving_default": tf.estimator.export.PredictOutput(predictions)})

    loss = v1.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    if is_training:
        learning_rate = v1.train.exponential_decay(0.5, global_step, 4, 0.5, staircase=True)
        current_epoch = tf.cast(global_step, tf.float32) / 6.0
        optimizer = v1.train.GradientDescentOptimizer(learning_rate)
        if FLAGS.use_tpu:
            optimizer = v1.tpu.CrossShardOptimizer(optimizer)
        with tf.control_dependencies(v1.get_collection(v1.GraphKeys.UPDATE_OPS)):
            train_op = optimizer.minimize(loss, global_step)
        if has_moving_average_decay:
            ema = v1.train.ExponentialMovingAverage(FLAGS.moving_average_decay, num_updates=global_step)
            ema_vars = v1.trainable_variables() + [v for v in v1.global_variables() if "moving_" in v.op.name]
            with tf.control_dependencies([train_op]):
                train_op = ema.apply(ema_vars)
        if not FLAGS.use_tpu:
            v1.summary.scalar("learning_rate", learning_rate)
            v1.summary.scalar("current_epoch", current_epoch)
        logging_hook = v1.train.LoggingTensorHook(
            {"step": global_step, "learning_rate": learning_rate}, every_n_iter=FLAGS.iterations_per_loop)
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode=mode, loss=loss, train_op=train_op, training_hooks=[logging_hook])

    def metric_fn(labels, logits):
        predictions = tf.argmax(logits, axis=1)
        return {"top_1_accuracy": v1.metrics.accuracy(labels, predictions),
                "mean_logit": v1.metrics.mean(logits)}

    return tf.estimator.tpu.TPUEstimatorSpec(
        mode=mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]), scaffold_fn=scaffold_fn)


def make_input_fn(is_training, rows, seed):
    def input_fn(params):
        x, y = dataset(rows, seed)
        ds = tf.data.Dataset.from_tensor_slices(({"x": x}, y))
        if is_training:
            ds = ds.repeat()
        return ds.batch(params["batch_size"], drop_remainder=True)

    return input_fn


def serving_input_fn():
    x = v1.placeholder(tf.float32, [None, FEATURES], name="x")
    return tf.estimator.export.ServingInputReceiver({"x": x}, {"x": x})


def main(unused_argv):
    config = tf.estimator.tpu.RunConfig(
        model_dir=FLAGS.model_dir, save_checkpoints_steps=FLAGS.iterations_per_loop, save_summary_steps=4,
        tpu_config=tf.estimator.tpu.TPUConfig(iterations_per_loop=FLAGS.iterations_per_loop))
    estimator = tf.estimator.tpu.TPUEstimator(
        use_tpu=FLAGS.use_tpu, model_fn=model_fn, config=config, train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=FLAGS.eval_batch_size, predict_batch_size=FLAGS.eval_batch_size, export_to_tpu=False)
    estimator.train(make_input_fn(True, 48, 0), max_steps=FLAGS.train_steps)
    metrics = estimator.evaluate(make_input_fn(False, 24, 1), steps=3)
    predictions = list(estimator.predict(make_input_fn(False, 16, 2)))
    export_dir = estimator.export_saved_model(os.path.join(FLAGS.model_dir, "export"), serving_input_fn)
    served = tf.saved_model.load(export_dir).signatures["serving_default"](x=tf.constant(dataset(4, 3)[0]))

    summaries = {}
    for path in tf.io.gfile.glob(os.path.join(FLAGS.model_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag in ("learning_rate", "current_epoch"):
                    summaries.setdefault(value.tag, {})[event.step] = round(float(value.simple_value), 6)
    results = {
        "evaluate": {k: round(float(v), 5) for k, v in metrics.items()},
        "probabilities": [round(float(p["probabilities"][1]), 5) for p in predictions],
        "served_probabilities": [round(float(p), 5) for p in served["probabilities"].numpy()[:, 1]],
        "head_kernel": [round(float(v), 5) for v in estimator.get_variable_value("head/kernel")[:3, 0]],
        "summaries": {tag: [[step, value] for step, value in sorted(steps.items())]
                      for tag, steps in sorted(summaries.items())},
        "variables": sorted(estimator.get_variable_names()),
    }
    if FLAGS.moving_average_decay > 0:
        average = estimator.get_variable_value("head/kernel/ExponentialMovingAverage")
        results["head_kernel_average"] = [round(float(v), 5) for v in average[:3, 0]]
    print(json.dumps(results))
    if FLAGS.result_file:
        with open(FLAGS.result_file, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    app.run(main)
