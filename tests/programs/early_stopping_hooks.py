"""Early stopping as TPUEstimator programs wrote it: `tf.estimator.experimental` hooks.

`--hook` picks one of the original's helpers; `lower`, `higher`,
`no_decrease` and `no_increase` run inside `tf.estimator.train_and_evaluate`
(the hook reads the evaluations the loop writes to `model_dir/eval`),
`in_memory` trains with an `InMemoryEvaluatorHook` (which writes
`model_dir/eval_in_memory`) and a `stop_if_no_increase_hook` reading that
directory, `predicate` uses `make_early_stopping_hook` with a program's own
`should_stop_fn`, and `checkpoint_step` uses `make_stop_at_checkpoint_step_hook`.
`--resume` trains a second time to twice the steps, the hook's timer at its
default (run_every_secs=60): it checks once, at the first run, against the
evaluations already on disk.
"""

import argparse
import json
import os

import numpy as np
import tensorflow as tf

PIXELS, CLASSES = 36, 5


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--use_tpu", type=lambda s: s.lower() in ("1", "true", "yes"), default=False)
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--result_file")
    parser.add_argument("--hook", default="lower")
    parser.add_argument("--train_steps", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--save_steps", type=int, default=2)
    parser.add_argument("--learning_rate", type=float, default=0.5)
    parser.add_argument("--resume", action="store_true")
    return parser.parse_args()


ARGS = parse_args()


def synthetic(rows, seed):
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, CLASSES, size=rows).astype(np.int32)
    centers = np.random.RandomState(99).randn(CLASSES, PIXELS).astype(np.float32)
    return centers[labels] + 1.5 * rng.randn(rows, PIXELS).astype(np.float32), labels


def metric_fn(labels, logits):
    return {"accuracy": tf.compat.v1.metrics.accuracy(labels=labels, predictions=tf.argmax(logits, 1))}


def model_fn(features, labels, mode, params):
    del params
    logits = tf.compat.v1.layers.dense(
        features, CLASSES, name="logits", kernel_initializer=tf.compat.v1.constant_initializer(
            np.random.RandomState(2).randn(PIXELS, CLASSES).astype(np.float32) * 0.2))
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(ARGS.learning_rate)
    if ARGS.use_tpu:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    train_op = optimizer.minimize(loss, tf.compat.v1.train.get_global_step())
    return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def train_input_fn(params):
    images, labels = synthetic(64, seed=0)
    return tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(
        params["batch_size"], drop_remainder=True)


def eval_input_fn(params):
    images, labels = synthetic(32, seed=1)
    return tf.data.Dataset.from_tensor_slices((images, labels)).batch(params["batch_size"], drop_remainder=True)


def eval_events(directory):
    """[[step, {tag: value}]] of the scalar summaries in `directory` (TF1 simple values or TF2 tensors)."""
    found = {}
    for path in sorted(tf.io.gfile.glob(os.path.join(directory, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    number = value.simple_value
                elif value.HasField("tensor") and tf.make_ndarray(value.tensor).dtype.kind == "f":
                    number = float(tf.make_ndarray(value.tensor))
                else:
                    continue
                found.setdefault(event.step, []).append([value.tag, number])
    return [[step, sorted(found[step])] for step in sorted(found)]


def make_hook(estimator, kind, timer):
    experimental = tf.estimator.experimental
    if kind == "lower":
        return experimental.stop_if_lower_hook(estimator, "loss", 0.9, **timer)
    if kind == "higher":
        return experimental.stop_if_higher_hook(estimator, "accuracy", 0.7, min_steps=5, **timer)
    if kind == "no_decrease":
        return experimental.stop_if_no_decrease_hook(estimator, "loss", 4, **timer)
    if kind == "no_increase":
        return experimental.stop_if_no_increase_hook(estimator, "accuracy", 4, min_steps=2, **timer)
    if kind == "predicate":
        checked = []

        def should_stop_fn():
            checked.append(len(checked))
            return len(checked) >= 3

        return experimental.make_early_stopping_hook(estimator, should_stop_fn, **timer)
    raise ValueError(kind)


def main():
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)
    config = tf.estimator.tpu.RunConfig(
        model_dir=ARGS.model_dir, save_checkpoints_steps=ARGS.save_steps, keep_checkpoint_max=20,
        tpu_config=tf.estimator.tpu.TPUConfig(ARGS.iterations))
    estimator = tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn, use_tpu=ARGS.use_tpu, config=config, train_batch_size=16, eval_batch_size=16)
    results = {"stopped_at": []}
    every_step = {"run_every_secs": None, "run_every_steps": 1}
    if ARGS.hook == "in_memory":
        evaluator = tf.estimator.experimental.InMemoryEvaluatorHook(
            estimator, eval_input_fn, steps=2, name="in_memory", every_n_iter=3)
        stop = tf.estimator.experimental.stop_if_no_increase_hook(
            estimator, "accuracy", 3, eval_dir=estimator.eval_dir("in_memory"), **every_step)
        estimator.train(train_input_fn, max_steps=ARGS.train_steps, hooks=[evaluator, stop])
        results["stopped_at"].append(int(estimator.get_variable_value("global_step")))
        results["in_memory"] = eval_events(estimator.eval_dir("in_memory"))
    elif ARGS.hook == "checkpoint_step":
        hook = tf.estimator.experimental.make_stop_at_checkpoint_step_hook(estimator, last_step=5)
        results["hook_type"] = type(hook).__name__
        estimator.train(train_input_fn, max_steps=ARGS.train_steps, hooks=[hook])
        results["stopped_at"].append(int(estimator.get_variable_value("global_step")))
    else:
        phases = [(ARGS.train_steps, every_step)]
        if ARGS.resume:
            phases.append((2 * ARGS.train_steps, {}))
        for max_steps, timer in phases:
            train_spec = tf.estimator.TrainSpec(train_input_fn, max_steps=max_steps,
                                                hooks=[make_hook(estimator, ARGS.hook, timer)])
            eval_spec = tf.estimator.EvalSpec(eval_input_fn, steps=2, start_delay_secs=0, throttle_secs=0)
            metrics, _ = tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
            results["stopped_at"].append(int(metrics["global_step"]))
    results["evaluations"] = eval_events(estimator.eval_dir())
    results["checkpoints"] = sorted(int(p.rsplit("-", 1)[1]) for p in tf.train.get_checkpoint_state(
        ARGS.model_dir).all_model_checkpoint_paths)
    print(json.dumps(results))
    if ARGS.result_file:
        with open(ARGS.result_file, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main()
