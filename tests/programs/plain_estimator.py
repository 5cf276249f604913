"""A custom-Estimator program as TF 1.x tutorials and model zoos wrote it: `tf.estimator.Estimator` on `import tensorflow as tf`.

`model_fn` returns `tf.estimator.EstimatorSpec`s (TF1 layers, `eval_metric_ops`,
`training_hooks`), `input_fn(params, input_context=None)` batches with a
`batch_size` from the program's own params (BigBird / XLNet style: per
replica from `input_context`, sharded by input pipeline), and the program
reads its global step with `_load_global_step_from_checkpoint_dir` from
`tensorflow.python.estimator.estimator`, as tensorflow/tpu's EfficientNet did.
With `--replicas=2` it splits the CPU in two at start and passes a
`MirroredStrategy` as `RunConfig(train_distribute=..., eval_distribute=...)`.
"""

import argparse
import json
import os

import numpy as np
import tensorflow as tf
from tensorflow.python.estimator import estimator as estimator_lib

FEATURES, CLASSES, HIDDEN = 6, 3, 8
CALLS = []  # what each input_fn call received


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--result_file")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=8, help="global batch")
    parser.add_argument("--train_steps", type=int, default=10)
    parser.add_argument("--eval_rows", type=int, default=32)
    return parser.parse_args()


def dataset(rows, seed):
    rng = np.random.RandomState(seed)
    x = rng.randn(rows, FEATURES).astype(np.float32)
    y = (np.argmax(x[:, :CLASSES] + 0.5 * x[:, CLASSES:], axis=1)).astype(np.int64)
    return x, y


def make_input_fn(rows, seed, training):
    def input_fn(params, input_context=None):
        batch_size = params["batch_size"]
        CALLS.append({
            "rows": rows, "params": sorted(params),
            "context": None if input_context is None else [
                input_context.num_input_pipelines, input_context.input_pipeline_id,
                input_context.num_replicas_in_sync],
        })
        x, y = dataset(rows, seed)
        data = tf.data.Dataset.from_tensor_slices(({"x": x}, y))
        if input_context is not None:
            batch_size = input_context.get_per_replica_batch_size(batch_size)
            data = data.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        if training:
            data = data.repeat()
        return data.batch(batch_size)
    return input_fn


class StepRecorder(tf.estimator.SessionRunHook):
    """Records the global step after each training step, as programs' own hooks did.

    (A fetch in `before_run` raced with the step's increment in TF1.)
    """

    def __init__(self):
        self.steps = []

    def begin(self):
        self._global_step = tf.compat.v1.train.get_global_step()

    def after_run(self, run_context, run_values):
        self.steps.append(int(run_context.session.run(self._global_step)))


RECORDER = StepRecorder()


def model_fn(features, labels, mode, params):
    hidden_init = np.random.RandomState(1).randn(FEATURES, HIDDEN).astype(np.float32) * 0.4
    logits_init = np.random.RandomState(2).randn(HIDDEN, CLASSES).astype(np.float32) * 0.4
    net = tf.compat.v1.layers.dense(features["x"], HIDDEN, activation=tf.nn.relu, name="hidden",
                                    kernel_initializer=tf.compat.v1.constant_initializer(hidden_init))
    logits = tf.compat.v1.layers.dense(net, CLASSES, name="logits",
                                       kernel_initializer=tf.compat.v1.constant_initializer(logits_init))
    classes = tf.argmax(logits, axis=1)
    if mode == tf.estimator.ModeKeys.PREDICT:
        predictions = {"classes": classes, "probabilities": tf.nn.softmax(logits)}
        return tf.estimator.EstimatorSpec(
            mode, predictions=predictions,
            export_outputs={"serving_default": tf.estimator.export.PredictOutput(predictions)})
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    if mode == tf.estimator.ModeKeys.EVAL:
        metrics = {
            "accuracy": tf.compat.v1.metrics.accuracy(labels=labels, predictions=classes),
            "mean_label": tf.compat.v1.metrics.mean(tf.cast(labels, tf.float32)),
        }
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics)
    optimizer = tf.compat.v1.train.MomentumOptimizer(params["learning_rate"], momentum=0.9)
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, training_hooks=[RECORDER])


def serving_input_receiver_fn():
    x = tf.compat.v1.placeholder(tf.float32, [None, FEATURES], name="x")
    return tf.estimator.export.ServingInputReceiver({"x": x}, {"x": x})


def main():
    args = parse_args()
    strategy = None
    if args.replicas > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.replicas)
        # ReductionToOneDevice: TF 2.15's default all-reduce over CPUs hangs in an Estimator's session.
        strategy = tf.distribute.MirroredStrategy(
            [f"/cpu:{i}" for i in range(args.replicas)], cross_device_ops=tf.distribute.ReductionToOneDevice())
    config = tf.estimator.RunConfig(model_dir=args.model_dir, save_checkpoints_steps=4, log_step_count_steps=5,
                                    train_distribute=strategy, eval_distribute=strategy)
    estimator = tf.estimator.Estimator(model_fn, config=config,
                                       params={"batch_size": args.batch_size, "learning_rate": 0.2})
    start = estimator_lib._load_global_step_from_checkpoint_dir(args.model_dir)
    estimator.train(make_input_fn(64, 0, True), steps=args.train_steps)
    metrics = estimator.evaluate(make_input_fn(args.eval_rows, 1, False))
    metrics_two = estimator.evaluate(make_input_fn(args.eval_rows, 1, False), steps=1, name="one_step")
    predictions = list(estimator.predict(make_input_fn(5, 2, False), yield_single_examples=True))
    export_dir = estimator.export_saved_model(os.path.join(args.model_dir, "export"), serving_input_receiver_fn)
    served = tf.saved_model.load(export_dir.decode()).signatures["serving_default"](
        x=tf.constant(dataset(3, 3)[0]))
    results = {
        "start_step": int(start),
        "end_step": int(estimator_lib._load_global_step_from_checkpoint_dir(args.model_dir)),
        "evaluate": {key: float(value) for key, value in sorted(metrics.items())},
        "evaluate_one_step": {key: float(value) for key, value in sorted(metrics_two.items())},
        "classes": [int(p["classes"]) for p in predictions],
        "probabilities": [[float(v) for v in p["probabilities"]] for p in predictions],
        "served": [[float(v) for v in row] for row in served["probabilities"].numpy()],
        "hook_steps": RECORDER.steps,
        "checkpoints": sorted(int(path.rsplit("-", 1)[1]) for path in
                              tf.train.get_checkpoint_state(args.model_dir).all_model_checkpoint_paths),
        "logits_bias": [float(v) for v in estimator.get_variable_value("logits/bias")],
        "variables": sorted(name for name in estimator.get_variable_names() if "Momentum" not in name),
        "input_fn_calls": CALLS,
        "is_estimator": isinstance(estimator, tf.estimator.Estimator),
    }
    print(json.dumps(results))
    if args.result_file:
        with open(args.result_file, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main()
