"""A BERT `run_classifier.py`-style program on TF 2.x: `from tensorflow.compat.v1 import estimator as tf_estimator`.

The estimator namespace is imported from `tensorflow.compat.v1`, model code
is `tf.compat.v1` (variable scopes, `get_variable`), a `scaffold_fn` warm
starts from an "init checkpoint" with `init_from_checkpoint`, training logs
the loss with a `LoggingTensorHook`, and the classifier is exported with a
raw serving receiver.
"""

import argparse
import json
import os

import numpy as np
import tensorflow as tf
from tensorflow.compat.v1 import estimator as tf_estimator

HIDDEN = 6
LABELS = 3


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--use_tpu", type=lambda s: s.lower() in ("1", "true", "yes"), default=False)
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--result_file")
    parser.add_argument("--train_batch_size", type=int, default=8)
    parser.add_argument("--eval_batch_size", type=int, default=8)
    parser.add_argument("--num_train_steps", type=int, default=9)
    parser.add_argument("--iterations_per_loop", type=int, default=3)
    parser.add_argument("--learning_rate", type=float, default=0.1)
    return parser.parse_args()


def write_init_checkpoint(path):
    """A "pre-trained" encoder, written by a TF1 Saver as BERT's checkpoints were."""
    with tf.Graph().as_default():
        tf.compat.v1.get_variable("bert/encoder/kernel", initializer=np.linspace(
            -0.5, 0.5, 5 * HIDDEN, dtype=np.float32).reshape(5, HIDDEN))
        tf.compat.v1.get_variable("bert/encoder/bias", initializer=np.full([HIDDEN], 0.1, np.float32))
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return tf.compat.v1.train.Saver().save(sess, path)


def create_model(features, is_training):
    with tf.compat.v1.variable_scope("bert/encoder"):
        kernel = tf.compat.v1.get_variable("kernel", [5, HIDDEN], initializer=tf.compat.v1.zeros_initializer())
        bias = tf.compat.v1.get_variable("bias", [HIDDEN], initializer=tf.compat.v1.zeros_initializer())
    pooled = tf.tanh(tf.matmul(features["input"], kernel) + bias)
    if is_training:
        pooled = tf.compat.v1.nn.dropout(pooled, rate=0.0)
    output_weights = tf.compat.v1.get_variable(
        "output_weights", [LABELS, HIDDEN], initializer=tf.compat.v1.constant_initializer(0.05))
    output_bias = tf.compat.v1.get_variable("output_bias", [LABELS], initializer=tf.compat.v1.zeros_initializer())
    logits = tf.nn.bias_add(tf.matmul(pooled, output_weights, transpose_b=True), output_bias)
    return logits


def model_fn_builder(init_checkpoint, learning_rate, use_tpu):
    def model_fn(features, labels, mode, params):
        del params
        logits = create_model(features, mode == tf_estimator.ModeKeys.TRAIN)
        tvars = tf.compat.v1.trainable_variables()
        assignment_map = {v.name.split(":")[0]: v for v in tvars if v.name.startswith("bert/")}

        def tpu_scaffold():
            tf.compat.v1.train.init_from_checkpoint(init_checkpoint, assignment_map)
            return tf.compat.v1.train.Scaffold()

        scaffold_fn = tpu_scaffold if use_tpu else None
        if not use_tpu:
            tf.compat.v1.train.init_from_checkpoint(init_checkpoint, assignment_map)

        if mode == tf_estimator.ModeKeys.PREDICT:
            probabilities = tf.nn.softmax(logits, axis=-1)
            return tf_estimator.tpu.TPUEstimatorSpec(
                mode=mode, predictions={"probabilities": probabilities}, scaffold_fn=scaffold_fn)

        one_hot = tf.one_hot(labels, depth=LABELS, dtype=tf.float32)
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        per_example_loss = -tf.reduce_sum(one_hot * log_probs, axis=-1)
        loss = tf.reduce_mean(per_example_loss, name="total_loss")

        if mode == tf_estimator.ModeKeys.TRAIN:
            global_step = tf.compat.v1.train.get_or_create_global_step()
            optimizer = tf.compat.v1.train.AdamOptimizer(learning_rate)
            if use_tpu:
                optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
            train_op = optimizer.minimize(loss, global_step=global_step)
            return tf_estimator.tpu.TPUEstimatorSpec(
                mode=mode, loss=loss, train_op=train_op, scaffold_fn=scaffold_fn)

        def metric_fn(per_example_loss, label_ids, logits):
            predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
            return {
                "eval_accuracy": tf.compat.v1.metrics.accuracy(labels=label_ids, predictions=predictions),
                "eval_loss": tf.compat.v1.metrics.mean(values=per_example_loss),
            }

        return tf_estimator.tpu.TPUEstimatorSpec(
            mode=mode, loss=loss, eval_metrics=(metric_fn, [per_example_loss, labels, logits]),
            scaffold_fn=scaffold_fn)

    return model_fn


def input_fn_builder(rows, seed, is_training, drop_remainder):
    rng = np.random.RandomState(seed)
    features = rng.randn(rows, 5).astype(np.float32)
    label_ids = (np.abs(features[:, 0] * 2).astype(np.int32) % LABELS).astype(np.int32)

    def input_fn(params):
        d = tf.data.Dataset.from_tensor_slices(({"input": features}, label_ids))
        if is_training:
            d = d.repeat()
        return d.batch(params["batch_size"], drop_remainder=drop_remainder)

    return input_fn


class LossRecorder(tf.estimator.SessionRunHook):
    """Records the loss TF1-style, through a hook fetching the tensor by name."""

    def __init__(self):
        self.losses = []

    def before_run(self, run_context):
        return tf.estimator.SessionRunArgs({"loss": "total_loss:0"})

    def after_run(self, run_context, run_values):
        self.losses.append(float(run_values.results["loss"]))


def main():
    args = parse_args()
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)
    init_checkpoint = write_init_checkpoint(os.path.join(args.model_dir + "_init", "bert_model.ckpt"))
    run_config = tf_estimator.tpu.RunConfig(
        model_dir=args.model_dir, save_checkpoints_steps=args.iterations_per_loop,
        tpu_config=tf_estimator.tpu.TPUConfig(iterations_per_loop=args.iterations_per_loop,
                                              per_host_input_for_training=True))
    estimator = tf_estimator.tpu.TPUEstimator(
        use_tpu=args.use_tpu, model_fn=model_fn_builder(init_checkpoint, args.learning_rate, args.use_tpu),
        config=run_config, train_batch_size=args.train_batch_size, eval_batch_size=args.eval_batch_size,
        predict_batch_size=args.eval_batch_size)
    recorder = LossRecorder()
    estimator.train(input_fn=input_fn_builder(40, 0, True, True), max_steps=args.num_train_steps,
                    hooks=[tf_estimator.LoggingTensorHook({"loss": "total_loss"}, every_n_iter=3), recorder])
    result = estimator.evaluate(input_fn=input_fn_builder(24, 1, False, True), steps=None)
    predictions = list(estimator.predict(input_fn=input_fn_builder(6, 2, False, False)))
    def serving_input_fn():
        features = {"input": tf.compat.v1.placeholder(tf.float32, [None, 5], name="input")}
        return tf_estimator.export.build_raw_serving_input_receiver_fn(features)()

    export_dir = estimator.export_saved_model(os.path.join(args.model_dir, "export"), serving_input_fn)
    served = tf.saved_model.load(export_dir.decode(), tags=["serve"]).signatures["serving_default"](
        input=tf.constant(np.ones([2, 5], np.float32)))

    results = {
        "eval": {k: float(v) for k, v in result.items()},
        "probabilities": [[float(x) for x in p["probabilities"]] for p in predictions],
        "hook_losses_run": len(recorder.losses),
        "last_hook_loss": recorder.losses[-1],
        "encoder_bias": [float(x) for x in estimator.get_variable_value("bert/encoder/bias")],
        "served": [[float(x) for x in row] for row in served["probabilities"].numpy()],
    }
    print(json.dumps(results))
    if args.result_file:
        with open(args.result_file, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main()
