"""Test set-up: 4 logical CPUs before TensorFlow starts, and a strategy fixture.

Every test that involves replicas takes the `strategy` fixture and runs twice:
under the default strategy and under `MirroredStrategy` over 4 logical CPUs.
One `MirroredStrategy` per process (two collide on collective keys), so
tests take it from these fixtures and never import this module.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

_CPU = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(_CPU, [tf.config.LogicalDeviceConfiguration()] * 4)

_MIRRORED = []


def mirrored_strategy() -> tf.distribute.Strategy:
    if not _MIRRORED:
        _MIRRORED.append(tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(4)]))
    return _MIRRORED[0]


@pytest.fixture(params=["default", "mirrored4"])
def strategy(request):
    if request.param == "default":
        return tf.distribute.get_strategy()
    return mirrored_strategy()


@pytest.fixture
def mirrored():
    return mirrored_strategy()
