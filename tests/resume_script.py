"""Trains to `max_steps` in `model_dir`, slowly; the SIGKILL test kills and restarts it.

Usage: python -m tests.resume_script MODEL_DIR MAX_STEPS SECONDS_PER_EXECUTION [SAVE_STEPS]

Writes the global step to MODEL_DIR/progress after every execution.
"""

import sys
import time

import keras
import numpy as np
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.model_dir.checkpoints import checkpoint_step
from tests import models


class Slow(keras.callbacks.Callback):
    def __init__(self, seconds, model_dir):
        super().__init__()
        self.seconds = seconds
        self.model_dir = model_dir

    def on_train_batch_end(self, batch, logs=None):
        with open(f"{self.model_dir}/progress", "w") as progress:
            progress.write(str(self.model.global_step))
        time.sleep(self.seconds)


def main(model_dir, max_steps, seconds, save_steps=4):
    tf.config.experimental.enable_op_determinism()

    def input_fn(params):
        # Resume the data where the checkpoint left it: same order as an uninterrupted run.
        latest = tf.train.latest_checkpoint(model_dir)
        start = checkpoint_step(latest) if latest else 0
        return models.input_fn(params).skip(start)

    config = kte.RunConfig(model_dir=model_dir, save_checkpoints_steps=save_steps, tf_random_seed=5,
                           tpu_config=kte.TPUConfig(iterations_per_loop=4))
    estimator = kte.TPUEstimator(models.get_variable_mlp, config=config, params={"optimizer": "adam"},
                                 train_batch_size=16)
    estimator.train(input_fn, max_steps=max_steps, hooks=[Slow(seconds, model_dir)])
    np.save(f"{model_dir}/final.npy", estimator.get_variable_value("mlp/hidden/kernel"))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), *map(int, sys.argv[4:]))
