"""An ALBERT-style program (google-research/albert's run_classifier.py): keep the best checkpoint with its `.meta`.

After training it evaluates every checkpoint it finds by listing `.index`
files, removes the others' `.index`, `.data-00000-of-00001` and `.meta` with
`tf.io.gfile.remove`, renames the best one's three files to
`model.ckpt-best.*`, copies them elsewhere with `tf.io.gfile.copy`, and
loads the copy as TF1 programs did: `tf.compat.v1.train.import_meta_graph`,
`saver.restore` in a `Session`, variables read by name.
"""

import json
import os

import numpy as np
import tensorflow as tf
from absl import app, flags

flags.DEFINE_bool("use_tpu", False, "Use TPUs rather than plain CPUs.")
flags.DEFINE_bool("graph_mode", False, "Call tf.compat.v1.disable_v2_behavior() first.")
flags.DEFINE_string("model_dir", None, "The output directory (checkpoints).")
flags.DEFINE_integer("batch_size", 8, "Global batch size.")
flags.DEFINE_integer("train_steps", 16, "Training steps.")
flags.DEFINE_integer("save_checkpoints_steps", 4, "How often to save a checkpoint.")
flags.DEFINE_integer("iterations_per_loop", 4, "Steps per TPU loop.")
flags.DEFINE_string("result_file", None, "Where to write the results as JSON.")
FLAGS = flags.FLAGS

WIDTH = 6
EXTENSIONS = ["meta", "data-00000-of-00001", "index"]


def data(rows, seed):
    rng = np.random.RandomState(seed)
    x = rng.randn(rows, WIDTH).astype(np.float32)
    y = (x[:, 0] - 0.5 * x[:, 1] > 0).astype(np.int32)
    return x, y


def input_fn_builder(rows, seed, repeat):
    def input_fn(params):
        x, y = data(rows, seed)
        dataset = tf.data.Dataset.from_tensor_slices(({"input_ids": x}, y))
        if repeat:
            dataset = dataset.repeat()
        return dataset.batch(params["batch_size"], drop_remainder=True)

    return input_fn


def model_fn(features, labels, mode, params):
    with tf.compat.v1.variable_scope("bert/encoder"):
        kernel = tf.compat.v1.get_variable(
            "dense/kernel", initializer=np.linspace(-0.4, 0.4, WIDTH * 8, dtype=np.float32).reshape(WIDTH, 8))
        bias = tf.compat.v1.get_variable("dense/bias", [8], initializer=tf.compat.v1.zeros_initializer())
        hidden = tf.nn.tanh(tf.matmul(features["input_ids"], kernel) + bias)
    output_weights = tf.compat.v1.get_variable(
        "output_weights", initializer=np.linspace(0.3, -0.3, 16, dtype=np.float32).reshape(2, 8))
    output_bias = tf.compat.v1.get_variable("output_bias", [2], initializer=tf.compat.v1.zeros_initializer())
    logits = tf.matmul(hidden, output_weights, transpose_b=True) + output_bias
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
    if mode == tf.estimator.ModeKeys.TRAIN:
        step = tf.compat.v1.train.get_or_create_global_step()
        learning_rate = tf.compat.v1.train.polynomial_decay(0.1, step, FLAGS.train_steps, end_learning_rate=0.0)
        optimizer = tf.compat.v1.train.AdamOptimizer(learning_rate)
        if FLAGS.use_tpu:
            optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
        return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, step))

    def metric_fn(labels, predictions):
        return {"eval_accuracy": tf.compat.v1.metrics.accuracy(labels, predictions)}

    return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, predictions]))


def meta_facts(checkpoint):
    """What a TF1 program sees after `import_meta_graph(checkpoint + '.meta')` and `saver.restore`."""
    with tf.Graph().as_default() as graph:
        saver = tf.compat.v1.train.import_meta_graph(checkpoint + ".meta")
        with tf.compat.v1.Session(graph=graph) as session:
            saver.restore(session, checkpoint)

            def describe(variables):
                return [[v.op.name, v.shape.as_list(), v.dtype.base_dtype.name, v.op.type] for v in variables]

            values = {v.op.name: np.asarray(session.run(v)).ravel().tolist()
                      for v in tf.compat.v1.global_variables()}
            by_name = session.run(graph.get_tensor_by_name("output_bias/Read/ReadVariableOp:0")
                                  if not FLAGS.graph_mode else "output_bias:0")
            saver_def = saver.saver_def
            return {
                "global_variables": describe(tf.compat.v1.global_variables()),
                "trainable_variables": [v.op.name for v in tf.compat.v1.trainable_variables()],
                "global_step": [v.op.name for v in tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.GLOBAL_STEP)],
                "global_step_value": int(session.run(tf.compat.v1.train.get_global_step())),
                "savers": len(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVERS)),
                "saver_def": {
                    "filename_tensor_name": saver_def.filename_tensor_name,
                    "restore_op_name": saver_def.restore_op_name,
                    "max_to_keep": saver_def.max_to_keep,
                    "sharded": saver_def.sharded,
                    "keep_checkpoint_every_n_hours": saver_def.keep_checkpoint_every_n_hours,
                    "version": int(saver_def.version),
                },
                "values": values,
                "output_bias_by_name": np.asarray(by_name).tolist(),
            }


def main(argv):
    del argv
    if FLAGS.graph_mode:
        tf.compat.v1.disable_v2_behavior()
    output_dir = FLAGS.model_dir
    config = tf.estimator.tpu.RunConfig(
        model_dir=output_dir, save_checkpoints_steps=FLAGS.save_checkpoints_steps, keep_checkpoint_max=3,
        tpu_config=tf.estimator.tpu.TPUConfig(iterations_per_loop=FLAGS.iterations_per_loop))
    estimator = tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn, use_tpu=FLAGS.use_tpu, config=config,
        train_batch_size=FLAGS.batch_size, eval_batch_size=FLAGS.batch_size)
    estimator.train(input_fn_builder(64, 0, repeat=True), max_steps=FLAGS.train_steps)
    meta_files = sorted(n for n in tf.io.gfile.listdir(output_dir) if n.endswith(".meta"))

    eval_input_fn = input_fn_builder(32, 1, repeat=False)
    steps_and_files = {}
    for filename in tf.io.gfile.listdir(output_dir):
        if filename.endswith(".index"):
            ckpt_name = filename[:-6]
            steps_and_files[int(ckpt_name.split("-")[-1])] = os.path.join(output_dir, ckpt_name)
    evaluated, best_step, best_perf = {}, None, -1.0
    for step, checkpoint_path in sorted(steps_and_files.items()):
        result = estimator.evaluate(input_fn=eval_input_fn, steps=None, checkpoint_path=checkpoint_path)
        evaluated[str(step)] = {key: float(value) for key, value in result.items()}
        if result["eval_accuracy"] > best_perf:
            best_perf, best_step = result["eval_accuracy"], step
    for step, checkpoint_path in steps_and_files.items():
        if step != best_step:
            for ext in EXTENSIONS:
                tf.io.gfile.remove(f"{checkpoint_path}.{ext}")
    for ext in EXTENSIONS:
        tf.io.gfile.rename(os.path.join(output_dir, f"model.ckpt-{best_step}.{ext}"),
                           os.path.join(output_dir, f"model.ckpt-best.{ext}"), overwrite=True)
    best = os.path.join(output_dir, "model.ckpt-best")
    export_dir = os.path.join(output_dir, "export")
    tf.io.gfile.makedirs(export_dir)
    for ext in EXTENSIONS:
        tf.io.gfile.copy(f"{best}.{ext}", os.path.join(export_dir, f"model.ckpt.{ext}"), overwrite=True)

    results = {
        "meta_files": meta_files,
        "evaluated": evaluated,
        "best_step": best_step,
        "best_evaluate": {k: float(v) for k, v in estimator.evaluate(
            eval_input_fn, steps=None, checkpoint_path=best).items()},
        "checkpoint_files": sorted(n for n in tf.io.gfile.listdir(output_dir) if n.startswith("model.ckpt")),
        "meta": meta_facts(os.path.join(export_dir, "model.ckpt")),
    }
    print(json.dumps(results))
    if FLAGS.result_file:
        with open(FLAGS.result_file, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    app.run(main)
