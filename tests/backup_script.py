"""`fit` for 3 epochs of 4 steps with `keras.callbacks.BackupAndRestore`; the test SIGKILLs it.

Usage: python -m tests.backup_script BACKUP_DIR OUT_DIR [KILL_AFTER_EPOCH]

With KILL_AFTER_EPOCH, the process SIGKILLs itself at the end of that epoch
(after BackupAndRestore saved it). Otherwise it writes `OUT_DIR/result.npz`:
the epochs `fit` ran, the global step and the weights.
"""

import os
import signal
import sys

import keras
import numpy as np
import tensorflow as tf

import keras_tpu_estimator as kte
from tests import models


class KillAfterEpoch(keras.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGKILL)


def main(backup_dir, out_dir, kill_after_epoch=None):
    tf.config.experimental.enable_op_determinism()
    features, labels = models.data(64)
    dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(16)  # 4 steps per epoch
    model = kte.EstimatorModel(models.get_variable_mlp, params={"optimizer": "adam"}, use_tpu=False, train_batch_size=16,
                               config=kte.RunConfig(tf_random_seed=5), steps_per_execution=2)
    callbacks = [keras.callbacks.BackupAndRestore(backup_dir)]
    if kill_after_epoch is not None:
        callbacks.append(KillAfterEpoch(kill_after_epoch))
    history = model.fit(dataset, epochs=3, callbacks=callbacks, verbose=0)
    np.savez(f"{out_dir}/result.npz", epochs=np.array(history.epoch), step=model.global_step,
             kernel=model.variables_by_name["mlp/hidden/kernel"].numpy())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:]))
