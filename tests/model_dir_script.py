"""Trains in MODEL_DIR with a big extra variable, so saves take long enough to be killed during.

Usage: python -m tests.model_dir_script MODEL_DIR MAX_STEPS SECONDS_PER_EXECUTION BIG_FLOATS

Writes the global step to MODEL_DIR/../progress after every execution.
"""

import pathlib
import sys
import time

import keras
import tensorflow as tf

import keras_tpu_estimator as kte
from tests import models


def model_fn(features, labels, mode, params):
    # Every save writes every variable: the big one makes saves slow enough to be killed during.
    tf.compat.v1.get_variable("big", [params["big"]], initializer=tf.zeros_initializer(), trainable=False)
    return models.get_variable_mlp(features, labels, mode, params)


class Slow(keras.callbacks.Callback):
    def __init__(self, seconds, progress):
        super().__init__()
        self.seconds, self.progress = seconds, progress

    def on_train_batch_end(self, batch, logs=None):
        self.progress.write_text(str(self.model.global_step))
        time.sleep(self.seconds)


def main(model_dir, max_steps, seconds, big):
    config = kte.RunConfig(model_dir=model_dir, save_checkpoints_steps=2, tf_random_seed=5,
                           tpu_config=kte.TPUConfig(iterations_per_loop=2))
    estimator = kte.TPUEstimator(model_fn, config=config, params={"optimizer": "sgd", "big": big},
                                 train_batch_size=16)
    progress = pathlib.Path(model_dir).parent / "progress"
    estimator.train(models.input_fn, max_steps=max_steps, hooks=[Slow(seconds, progress)])


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
