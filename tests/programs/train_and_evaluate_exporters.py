"""A train_and_evaluate program with exporters, as tensor2tensor-era TPUEstimator programs wrote it.

`tf.estimator.train_and_evaluate(estimator, TrainSpec, EvalSpec(exporters=[...]))`
on a `tf.estimator.tpu.TPUEstimator`, with a `LatestExporter`, a
`BestExporter` and a `FinalExporter`, each wrapped in a program-defined
`tf.estimator.Exporter` subclass that records its calls. It runs unchanged
through `python -m keras_tpu_estimator train_and_evaluate_exporters.py`.
"""

import json
import os

import numpy as np
import tensorflow as tf
from absl import app, flags

flags.DEFINE_bool("use_tpu", False, "Use TPUs rather than plain CPUs.")
flags.DEFINE_string("model_dir", None, "Estimator model_dir.")
flags.DEFINE_integer("batch_size", 16, "Global batch size.")
flags.DEFINE_integer("train_steps", 12, "TrainSpec max_steps.")
flags.DEFINE_integer("eval_steps", 2, "EvalSpec steps.")
flags.DEFINE_integer("iterations", 2, "Iterations per TPU loop.")
flags.DEFINE_integer("save_steps", 4, "save_checkpoints_steps.")
flags.DEFINE_integer("throttle_secs", 0, "EvalSpec throttle_secs.")
flags.DEFINE_integer("exports_to_keep", 2, "exports_to_keep of the Latest and Best exporters.")
flags.DEFINE_float("learning_rate", 0.5, "Learning rate.")
flags.DEFINE_bool("resume", False, "Call train_and_evaluate a second time on the same model_dir.")
flags.DEFINE_string("result_file", None, "Where to write the results as JSON.")
FLAGS = flags.FLAGS

PIXELS, CLASSES = 36, 5


def synthetic(rows, seed):
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, CLASSES, size=rows).astype(np.int32)
    centers = np.random.RandomState(99).randn(CLASSES, PIXELS).astype(np.float32)
    return centers[labels] + 0.8 * rng.randn(rows, PIXELS).astype(np.float32), labels


def metric_fn(labels, logits):
    return {"accuracy": tf.compat.v1.metrics.accuracy(labels=labels, predictions=tf.argmax(logits, 1))}


def model_fn(features, labels, mode, params):
    del params
    image = features["image"] if isinstance(features, dict) else features
    hidden = tf.compat.v1.layers.dense(
        image, 24, activation=tf.nn.relu, name="hidden", kernel_initializer=tf.compat.v1.constant_initializer(
            np.random.RandomState(1).randn(PIXELS, 24).astype(np.float32) * 0.2))
    logits = tf.compat.v1.layers.dense(
        hidden, CLASSES, name="logits", kernel_initializer=tf.compat.v1.constant_initializer(
            np.random.RandomState(2).randn(24, CLASSES).astype(np.float32) * 0.2))
    if mode == tf.estimator.ModeKeys.PREDICT:
        predictions = {"class_ids": tf.argmax(logits, axis=1), "probabilities": tf.nn.softmax(logits)}
        return tf.estimator.tpu.TPUEstimatorSpec(mode, predictions=predictions)
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(FLAGS.learning_rate)
    if FLAGS.use_tpu:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    train_op = optimizer.minimize(loss, tf.compat.v1.train.get_global_step())
    return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def train_input_fn(params):
    images, labels = synthetic(96, seed=0)
    return tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(
        params["batch_size"], drop_remainder=True)


def eval_input_fn(params):
    images, labels = synthetic(40, seed=1)
    return tf.data.Dataset.from_tensor_slices((images, labels)).batch(params["batch_size"], drop_remainder=True)


def serving_input_receiver_fn():
    image = tf.compat.v1.placeholder(tf.float32, [None, PIXELS], name="image")
    return tf.estimator.export.ServingInputReceiver({"image": image}, {"image": image})


def higher_accuracy(best_eval_result, current_eval_result):
    return current_eval_result["accuracy"] > best_eval_result["accuracy"]


class Recording(tf.estimator.Exporter):
    """A program's own Exporter: delegates to another and notes every call."""

    def __init__(self, exporter):
        self._exporter = exporter
        self.calls = []

    @property
    def name(self):
        return self._exporter.name

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        path = self._exporter.export(estimator, export_path, checkpoint_path, eval_result, is_the_final_export)
        self.calls.append({
            "export_path": os.path.relpath(export_path, FLAGS.model_dir),
            "checkpoint": os.path.basename(checkpoint_path),
            "global_step": int(eval_result["global_step"]),
            "final": bool(is_the_final_export),
            "path": None if path is None else tf.compat.as_str_any(path),
        })
        return path


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
                found.setdefault(event.step, {})[value.tag] = number
    return [[step, found[step]] for step in sorted(found)]


def ranked(paths):
    """Paths relative to model_dir with each export timestamp replaced by its rank among `paths`."""
    stamps = sorted({os.path.basename(p) for p in paths if p})
    def rank(path):
        if path is None:
            return None
        relative = os.path.relpath(path, FLAGS.model_dir)
        return os.path.join(os.path.dirname(relative), str(stamps.index(os.path.basename(path))))
    return rank


def predictions_of(export_dir):
    images, _ = synthetic(2, seed=2)
    serving = tf.saved_model.load(export_dir, tags=["serve"]).signatures["serving_default"]
    return [[round(float(x), 6) for x in row] for row in serving(image=tf.constant(images))["probabilities"].numpy()]


def main(argv):
    del argv
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)
    config = tf.estimator.tpu.RunConfig(
        model_dir=FLAGS.model_dir, save_checkpoints_steps=FLAGS.save_steps, keep_checkpoint_max=10,
        tpu_config=tf.estimator.tpu.TPUConfig(FLAGS.iterations))
    estimator = tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn, use_tpu=FLAGS.use_tpu, config=config, train_batch_size=FLAGS.batch_size,
        eval_batch_size=FLAGS.batch_size, predict_batch_size=FLAGS.batch_size)
    exporters = [
        Recording(tf.estimator.LatestExporter("latest", serving_input_receiver_fn,
                                              exports_to_keep=FLAGS.exports_to_keep)),
        Recording(tf.estimator.BestExporter("best", serving_input_receiver_fn,
                                            exports_to_keep=FLAGS.exports_to_keep)),
        Recording(tf.estimator.BestExporter("best_accuracy", serving_input_receiver_fn,
                                            compare_fn=higher_accuracy, exports_to_keep=None)),
        Recording(tf.estimator.FinalExporter("final", serving_input_receiver_fn)),
    ]
    train_spec = tf.estimator.TrainSpec(input_fn=train_input_fn, max_steps=FLAGS.train_steps)
    eval_spec = tf.estimator.EvalSpec(input_fn=eval_input_fn, steps=FLAGS.eval_steps, exporters=exporters,
                                      start_delay_secs=0, throttle_secs=FLAGS.throttle_secs)
    returned = [tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)]
    if FLAGS.resume:  # max_steps already reached: training is skipped
        returned.append(tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec))

    export_root = os.path.join(FLAGS.model_dir, "export")
    results = {"returned": [], "exports": {}, "kept": {}, "export_predictions": {}}
    for exporter in exporters:
        directory = os.path.join(export_root, exporter.name)
        kept = sorted(os.path.join(directory, d) for d in tf.io.gfile.listdir(directory)) \
            if tf.io.gfile.exists(directory) else []
        rank = ranked([c["path"] for c in exporter.calls] + kept)
        results["exports"][exporter.name] = [dict(c, path=rank(c["path"])) for c in exporter.calls]
        results["kept"][exporter.name] = [rank(p) for p in kept]
        for path in kept:
            results["export_predictions"][rank(path)] = predictions_of(path)
    every = [c["path"] for e in exporters for c in e.calls]
    for value in returned:
        if value is None:
            results["returned"].append(None)
            continue
        metrics, export_results = value
        results["returned"].append({
            "eval_result": None if metrics is None else {
                k: (int(v) if k == "global_step" else float(v)) for k, v in metrics.items()},
            "types": None if metrics is None else sorted({k: type(v).__name__ for k, v in metrics.items()}.items()),
            "export_results": None if export_results is None else [
                None if p is None else [type(p).__name__, ranked(every + [tf.compat.as_str_any(p)])(
                    tf.compat.as_str_any(p)).split(os.sep)[:2]] for p in export_results],
        })
    results["evaluations"] = eval_events(os.path.join(FLAGS.model_dir, "eval"))
    results["checkpoints"] = sorted(int(p.rsplit("-", 1)[1]) for p in tf.train.get_checkpoint_state(
        FLAGS.model_dir).all_model_checkpoint_paths)
    print(json.dumps(results))
    if FLAGS.result_file:
        with open(FLAGS.result_file, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    app.run(main)
