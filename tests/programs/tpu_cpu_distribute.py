"""A TPUEstimator program whose GPU flag runs the CPU path on a strategy, as XLNet's and BigBird's did.

`TPUEstimator(use_tpu=False)` with `RunConfig(train_distribute=...,
eval_distribute=...)` (a `MirroredStrategy`, here over logical CPUs made at
start): the original ran the Estimator's distributed training and evaluation
(each replica a whole `input_fn` batch of `params['batch_size']` rows, in
turn), and `input_fn(params, input_context)` got the strategy's
`InputContext`. With `--replicas=1` the same program runs without a strategy.
It records what `input_fn`, `model_fn` and `host_call` saw, and what a second
`train` call on a finite input (5 batches for 2 replicas) trained.
"""

import json

import numpy as np
import tensorflow as tf
from absl import app, flags

flags.DEFINE_bool("use_tpu", False, "Use TPUs rather than CPUs / GPUs.")
flags.DEFINE_integer("replicas", 2, "Replicas of the CPU/GPU strategy (1: none).")
flags.DEFINE_string("model_dir", None, "Estimator model_dir.")
flags.DEFINE_string("result_file", None, "Where to write the results as JSON.")
flags.DEFINE_integer("train_batch_size", 8, "Batch size.")
flags.DEFINE_integer("train_steps", 6, "Training steps.")
FLAGS = flags.FLAGS

FEATURES = 5
SEEN = {"input_fn": [], "model_fn": [], "host_call": []}


def data(rows, seed):
    rng = np.random.RandomState(seed)
    x = rng.randn(rows, FEATURES).astype(np.float32)
    y = (x @ np.linspace(1.0, -1.0, FEATURES).astype(np.float32) > 0).astype(np.int32)
    return x, y


def make_input_fn(rows, seed, repeat):
    def input_fn(params, input_context=None):
        SEEN["input_fn"].append({
            "batch_size": params.get("batch_size"),
            "context": None if input_context is None else [
                input_context.num_input_pipelines, input_context.input_pipeline_id,
                input_context.num_replicas_in_sync],
        })
        x, y = data(rows, seed)
        dataset = tf.data.Dataset.from_tensor_slices((x, y))
        if input_context is not None:
            dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        if repeat:
            dataset = dataset.repeat()
        return dataset.batch(params["batch_size"])
    return input_fn


def record_host_call(labels):
    SEEN["host_call"].append([int(labels.shape[0]), int(labels.sum())])
    return np.int64(0)


def host_call_fn(labels):
    return tf.compat.v1.py_func(record_host_call, [labels], tf.int64, stateful=True)


def metric_fn(labels, logits):
    predictions = tf.argmax(logits, axis=1, output_type=tf.int32)
    return {
        "accuracy": tf.compat.v1.metrics.accuracy(labels=labels, predictions=predictions),
        "auc": tf.compat.v1.metrics.auc(labels=labels, predictions=tf.nn.softmax(logits)[:, 1]),
    }


def model_fn(features, labels, mode, params):
    SEEN["model_fn"].append({"mode": mode, "use_tpu": params.get("use_tpu")})
    kernel = np.random.RandomState(3).randn(FEATURES, 2).astype(np.float32) * 0.3
    logits = tf.compat.v1.layers.dense(features, 2, name="logits",
                                       kernel_initializer=tf.compat.v1.constant_initializer(kernel))
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.tpu.TPUEstimatorSpec(mode, predictions={"logits": logits})
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
    optimizer = tf.compat.v1.train.AdamOptimizer(0.05)
    if FLAGS.use_tpu:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, host_call=(host_call_fn, [labels]))


def main(argv):
    del argv
    strategy = None
    if FLAGS.replicas > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * FLAGS.replicas)
        # ReductionToOneDevice: TF 2.15's default all-reduce over CPUs hangs in an Estimator's session.
        strategy = tf.distribute.MirroredStrategy(
            [f"/cpu:{i}" for i in range(FLAGS.replicas)], cross_device_ops=tf.distribute.ReductionToOneDevice())
    config = tf.estimator.tpu.RunConfig(
        model_dir=FLAGS.model_dir, save_checkpoints_steps=100,
        train_distribute=strategy, eval_distribute=strategy,
        tpu_config=tf.estimator.tpu.TPUConfig(iterations_per_loop=3))
    estimator = tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn, config=config, use_tpu=FLAGS.use_tpu,
        train_batch_size=FLAGS.train_batch_size, eval_batch_size=FLAGS.train_batch_size,
        predict_batch_size=FLAGS.train_batch_size)
    estimator.train(make_input_fn(48, 0, True), max_steps=FLAGS.train_steps)
    after_first = int(estimator.get_variable_value("global_step"))
    estimator.train(make_input_fn(40, 4, False))  # 5 batches: the last step has one for 2 replicas
    metrics = estimator.evaluate(make_input_fn(32, 1, False))
    predictions = list(estimator.predict(make_input_fn(4, 2, False)))
    results = {
        "global_steps": [after_first, int(estimator.get_variable_value("global_step"))],
        "evaluate": {key: float(value) for key, value in sorted(metrics.items())},
        "logits": [[float(v) for v in p["logits"]] for p in predictions],
        "kernel": [[float(v) for v in row] for row in estimator.get_variable_value("logits/kernel")],
        "input_fn": SEEN["input_fn"],
        "model_fn_use_tpu": sorted({str(call["use_tpu"]) for call in SEEN["model_fn"]}),
        "host_call": SEEN["host_call"],
    }
    print(json.dumps(results))
    if FLAGS.result_file:
        with open(FLAGS.result_file, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    app.run(main)
