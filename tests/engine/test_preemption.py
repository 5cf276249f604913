"""Ctrl-C (SIGINT) during fit stops after the current execution, with a checkpoint, and no hang."""

import signal

import keras
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.engine.preemption import StopRequests
from tests.fixtures import models


@pytest.fixture(autouse=True)
def python_sigint_handler():
    """Python's own Ctrl-C handler, as in a terminal: a process started in the background
    (`cmd &`, some CI runners, pytest-xdist workers) may begin with SIGINT ignored."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


class InterruptAfter(keras.callbacks.Callback):
    """Sends this process SIGINT at the end of the execution that reaches `step`."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if self.model.global_step == self.step:
            signal.raise_signal(signal.SIGINT)


def test_ctrl_c_stops_after_the_execution_saves_and_raises(strategy, tmp_path):
    model = models.make_model(strategy=strategy, params={"optimizer": "adam"}, batch=None, train_batch_size=16)
    callbacks = [kte.StopAtStep(steps=40), InterruptAfter(8), kte.CheckpointSaver(str(tmp_path))]
    with pytest.raises(KeyboardInterrupt):
        model.fit(models.input_fn, callbacks=callbacks, verbose=0)
    assert model.global_step == 8
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-8")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=4)], verbose=0)  # usable again
    assert model.global_step == 12


def test_a_second_signal_acts_at_once():
    stop = StopRequests()
    with stop.installed():
        signal.raise_signal(signal.SIGINT)  # the first is a request
        assert stop.requested and stop.signal == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)  # the second acts at once



def test_sigterm_ends_with_the_preemption_exit_code():
    stop = StopRequests()
    stop.request(signal.SIGTERM)
    with pytest.raises(SystemExit) as exit_info:
        stop.raise_if_requested()
    assert exit_info.value.code == 42
