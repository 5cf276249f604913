"""One task of a distributed train_and_evaluate job on localhost, run by tests/test_training_distributed.py.

Usage: python -m tests.train_and_evaluate_script TASK INDEX CLUSTER MODEL_DIR MAX_STEPS SECONDS

Trainers of a cluster with several of them create a MultiWorkerMirroredStrategy
at start (as tests/multiworker_script.py does) and pass it as `train_distribute`.

CLUSTER is a JSON dict of jobs to `host:port` lists (TF_CONFIG's cluster);
TASK / INDEX is this process's task. Trainers sleep SECONDS after every
step (so an evaluator sees several checkpoints). Every process calls
`kte.estimator.train_and_evaluate` unchanged and prints "RETURNED <value>";
the evaluator also writes MODEL_DIR/evaluator.json with what it evaluated
and exported. With STOP_AFTER_CHECKS=N in the environment, trainers add an
early-stopping hook whose `should_stop_fn` (called on the chief only) is
True at its N-th call, and print "STOPPED <step>".
"""

import json
import os
import sys
import time

TASK, INDEX, CLUSTER = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
os.environ["TF_CONFIG"] = json.dumps({"cluster": CLUSTER, "task": {"type": TASK, "index": INDEX}})

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

# Several trainers: MultiWorkerMirroredStrategy, created first, as it requires. Not in the evaluator,
# which is not part of the training cluster.
TRAINERS = len(CLUSTER.get("chief", [])) + len(CLUSTER.get("worker", []))
STRATEGY = tf.distribute.MultiWorkerMirroredStrategy() if TASK != "evaluator" and TRAINERS > 1 else None

from keras_tpu_estimator import estimator as tf_estimator  # noqa: E402
from tests import models  # noqa: E402


class Slow(keras.callbacks.Callback):
    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(self.seconds)


class Recording(tf_estimator.Exporter):
    """Records each call of the exporter it wraps."""

    def __init__(self, exporter):
        self.exporter, self.calls = exporter, []

    @property
    def name(self):
        return self.exporter.name

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        path = self.exporter.export(estimator, export_path, checkpoint_path, eval_result, is_the_final_export)
        self.calls.append([int(eval_result["global_step"]), bool(is_the_final_export), path is not None])
        return path


def serving_input_receiver_fn():
    x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
    return tf_estimator.export.ServingInputReceiver({"x": x, "id": tf.zeros_like(x[:, 0], tf.int64)}, {"x": x})


def main(model_dir, max_steps, seconds):
    config = tf_estimator.tpu.RunConfig(
        model_dir=model_dir, save_checkpoints_steps=2, keep_checkpoint_max=100, train_distribute=STRATEGY,
        tpu_config=tf_estimator.tpu.TPUConfig(iterations_per_loop=1))
    estimator = tf_estimator.tpu.TPUEstimator(
        models.get_variable_mlp, config=config, params={"optimizer": "sgd"},
        train_batch_size=16, eval_batch_size=16, predict_batch_size=16)
    exporters = [Recording(tf_estimator.FinalExporter("final", serving_input_receiver_fn)),
                 Recording(tf_estimator.LatestExporter("latest", serving_input_receiver_fn, exports_to_keep=2))]
    hooks = [Slow(seconds)]
    if os.environ.get("STOP_AFTER_CHECKS"):  # the chief's should_stop_fn says stop at its N-th check
        checks = []
        stop = tf_estimator.experimental.make_early_stopping_hook(
            estimator, lambda: checks.append(1) or len(checks) >= int(os.environ["STOP_AFTER_CHECKS"]),
            run_every_secs=None, run_every_steps=1)
        hooks.append(stop)
    train_spec = tf_estimator.TrainSpec(models.input_fn, max_steps=max_steps, hooks=hooks)
    eval_spec = tf_estimator.EvalSpec(models.input_fn, steps=2, exporters=exporters,
                                      start_delay_secs=1, throttle_secs=1)
    started = time.time()
    returned = tf_estimator.train_and_evaluate(estimator, train_spec, eval_spec)
    print("RETURNED", returned, flush=True)
    if os.environ.get("STOP_AFTER_CHECKS"):
        print("STOPPED", stop.stopped_at, flush=True)
    if TASK == "evaluator":
        steps = [step for step, _ in models.summary_values(estimator.eval_dir()) if _.tag == "loss"]
        with open(os.path.join(model_dir, "evaluator.json"), "w") as f:
            json.dump({"evaluated": steps, "exports": {e.name: e.calls for e in exporters},
                       "seconds": time.time() - started, "is_chief": estimator.config.is_chief}, f)


if __name__ == "__main__":
    main(sys.argv[4], int(sys.argv[5]), float(sys.argv[6]))
