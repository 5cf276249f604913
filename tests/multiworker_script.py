"""One worker of a MultiWorkerMirroredStrategy job on localhost, run by tests/test_multiworker.py.

Usage: python -m tests.multiworker_script INDEX PORTS MODEL_DIR MAX_STEPS SECONDS [FAIL]

INDEX -1 runs alone (default strategy) with the same global batch. PORTS is a
comma-separated list, one per worker. SECONDS is slept after every execution;
MODEL_DIR/progress-INDEX gets the global step after each. FAIL is "input_fn"
or "host_call": that worker raises there; or "xla": no failure, the replica step is
compiled with XLA (`RunConfig(jit_compile=True)`). Prints "START <step>" once the latest
checkpoint is restored, and saves its own final weights to MODEL_DIR/final-INDEX.npz.
"""

import json
import os
import sys
import time

INDEX, PORTS = int(sys.argv[1]), sys.argv[2].split(",")
if INDEX >= 0:
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"localhost:{port}" for port in PORTS]},
        "task": {"type": "worker", "index": INDEX},
    })

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

# Created first, before any other TensorFlow call, as MultiWorkerMirroredStrategy requires.
STRATEGY = tf.distribute.MultiWorkerMirroredStrategy() if INDEX >= 0 else None

import keras_tpu_estimator as kte  # noqa: E402
from keras_tpu_estimator.model_dir.checkpoints import checkpoint_step  # noqa: E402
from tests import models  # noqa: E402


class Progress(keras.callbacks.Callback):
    def __init__(self, model_dir, seconds):
        super().__init__()
        self.model_dir, self.seconds = model_dir, seconds

    def on_train_begin(self, logs=None):
        print("START", self.model.global_step, flush=True)

    def on_train_batch_end(self, batch, logs=None):
        with open(f"{self.model_dir}/progress-{INDEX}", "w") as progress:
            progress.write(str(self.model.global_step))
        time.sleep(self.seconds)

    def on_train_end(self, logs=None):
        # This worker's own copy of the weights (not the chief's checkpoint).
        weights = {name: v.numpy() for name, v in self.model.variables_by_name.items()}
        np.savez(f"{self.model_dir}/final-{INDEX}.npz", **{k.replace("/", "."): w for k, w in weights.items()})


def main(model_dir, max_steps, seconds, fail=None):
    tf.config.experimental.enable_op_determinism()
    jit_compile = fail == "xla" or None

    def input_fn(params):
        if fail == "input_fn":
            raise RuntimeError("input_fn failed on purpose")
        _, index, count, _ = params["context"].current_input_fn_deployment()
        latest = tf.train.latest_checkpoint(model_dir)
        start = checkpoint_step(latest) if latest else 0
        # Step k reads batches k*count .. k*count+count-1: worker i takes the i-th.
        return models.input_fn(params).skip(start * count).shard(count, index)

    def model_fn(features, labels, mode, params):
        spec = models.get_variable_mlp(features, labels, mode, params)
        if fail == "host_call":
            def explode(loss):
                return tf.numpy_function(lambda _: 1 / 0, [loss], tf.float64)

            spec = spec._replace(host_call=(explode, [tf.reshape(spec.loss, [1])]))
        return spec

    config = kte.RunConfig(
        model_dir=model_dir, save_checkpoints_steps=4, tf_random_seed=7,
        train_distribute=STRATEGY, tpu_config=kte.TPUConfig(iterations_per_loop=4), jit_compile=jit_compile,
    )
    estimator = kte.TPUEstimator(model_fn, config=config, params={"optimizer": "adam"},
                                 train_batch_size=32)
    estimator.train(input_fn, max_steps=max_steps, hooks=[Progress(model_dir, seconds)])
    print("DONE", INDEX, flush=True)


if __name__ == "__main__":
    main(sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), *sys.argv[6:])
