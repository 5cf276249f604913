"""The plain `Estimator` (facade/estimator.py) behaves as the original `tf.estimator.Estimator`.

The cases of `tests/fixtures/estimator_cases.py` run here on `keras_tpu_estimator.estimator`
and are compared with what TF 2.15's Estimator gave for the same code
(`tests/recorded/estimator_numbers_generated.py`): exception types and messages (this
library may add help after the original's text; `model_dir` is left as it
was), values and their NumPy types. Then what the recorded cases do not
show: the module paths, graph-mode programs, summaries and logs, the
execution sizes that land on every save, warm start, and the deprecated export name.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.facade import estimator as plain_estimator
from tests.fixtures import estimator_cases as cases
from tests.fixtures.same_results import assert_same, error_type
from tests.recorded import estimator_numbers_generated as recorded


def api_for(model_dir, strategy=None) -> types.SimpleNamespace:
    return types.SimpleNamespace(estimator=kte.estimator, model_dir=str(model_dir), strategy=strategy,
                                 load_global_step=plain_estimator._load_global_step_from_checkpoint_dir)


def run_error_case(name: str, model_dir) -> list[str] | None:
    try:
        cases.ERRORS[name](api_for(model_dir))
    except Exception as error:  # noqa: BLE001  (the recorded type and text are compared)
        text = cases.normalise(str(error), str(model_dir)).replace("tests.fixtures.estimator_cases", "estimator_cases")
        return [error_type(error), text]
    return None


@pytest.mark.parametrize("name", sorted(cases.ERRORS))
def test_errors_are_the_originals(name, tmp_path):
    expected = recorded.ERRORS[name]
    found = run_error_case(name, tmp_path)
    assert found is not None and expected is not None, f"{name}: ours {found}, the original's {expected}"
    assert found[0] == expected[0], f"{name}: {found} != {expected}"
    assert found[1].startswith(expected[1]), f"{name}: {found[1]!r} does not start with {expected[1]!r}"
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith(("model.ckpt", "eval", "export", "checkpoint"))]
    assert not left, f"{name} left {left} in model_dir"


@pytest.mark.parametrize("name", sorted(cases.DEFAULTS))
def test_results_are_the_originals(name, tmp_path):
    assert_same(cases.DEFAULTS[name](api_for(tmp_path)), recorded.DEFAULTS[name], name)


def test_every_case_was_recorded():
    assert sorted(cases.ERRORS) == sorted(recorded.ERRORS)
    assert sorted(cases.DEFAULTS) == sorted(recorded.DEFAULTS)
    assert sorted(cases.STRATEGY) == sorted(recorded.STRATEGY)


def test_the_module_paths_programs_import_are_the_plain_estimator():
    check = """
import keras_tpu_estimator as kte
from keras_tpu_estimator.facade import estimator as plain_estimator
kte.install()
import tensorflow as tf
from tensorflow.python.estimator import estimator as tf_python
from tensorflow_estimator.python.estimator import estimator as tf_estimator
assert tf_python is tf_estimator is plain_estimator
assert tf.estimator.Estimator is tf.compat.v1.estimator.Estimator is tf_python.Estimator is kte.Estimator
assert issubclass(tf.estimator.tpu.TPUEstimator, tf.estimator.Estimator)
assert tf_python._load_global_step_from_checkpoint_dir("/no/such/dir") == 0
"""
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert done.returncode == 0, done.stderr[-3000:]


def _estimator(tmp_path, **config):
    config = kte.RunConfig(model_dir=str(tmp_path), **config)
    return kte.Estimator(cases.make_model_fn(kte.EstimatorSpec), config=config)


def test_the_calls_run_eagerly_in_a_graph_mode_program(tmp_path):
    estimator = _estimator(tmp_path)
    with tf.Graph().as_default():
        assert not tf.executing_eagerly()
        estimator.train(cases.input_fn_of(repeat=True), steps=2)
        results = estimator.evaluate(cases.input_fn_of(rows=8))
        predictions = list(estimator.predict(cases.input_fn_of(rows=3)))
    assert int(results["global_step"]) == 2 and len(predictions) == 3


def test_checkpoints_summaries_and_logs_land_on_their_steps(tmp_path, caplog):
    """Executions are sized to land on every save, summary and log step (a TF1 loop ran step by step)."""
    estimator = _estimator(tmp_path, save_checkpoints_steps=3, save_summary_steps=2, log_step_count_steps=5)
    with caplog.at_level(logging.INFO, logger="keras_tpu_estimator"):
        estimator.train(cases.input_fn_of(repeat=True), steps=7)
        estimator.evaluate(cases.input_fn_of(rows=8))
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert [int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths] == [3, 6, 7]
    steps = {}
    for path in tf.io.gfile.glob(os.path.join(str(tmp_path), "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                steps.setdefault(value.tag, []).append(event.step)
    assert steps["loss"] == [2, 4, 6] and steps["global_step/sec"] == [2, 4, 6]
    assert "examples/sec" not in steps  # the plain Estimator has no batch size to count examples by
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("loss = ") and "step = 5 " in m for m in messages), messages
    assert any(m.startswith("Loss for final step: ") for m in messages)
    assert any(m.startswith("Saving dict for global step 7: accuracy = ") for m in messages)


def test_a_keras_callback_is_a_hook_and_warm_start_initialises(tmp_path):
    first = _estimator(tmp_path / "first")
    first.train(cases.input_fn_of(repeat=True), steps=2)
    seen = []

    class Steps(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(self.model.global_step)

    config = kte.RunConfig(model_dir=str(tmp_path / "second"))
    second = kte.Estimator(cases.make_model_fn(kte.EstimatorSpec), config=config,
                           warm_start_from=first.latest_checkpoint())
    second.train(cases.input_fn_of(repeat=True), steps=1, hooks=[Steps()])
    assert seen and seen[-1] == 1  # a fresh global step, warm-started weights
    moved = second.get_variable_value("logits/bias") - first.get_variable_value("logits/bias")
    assert 0 < np.abs(moved).max() < 0.5


def test_export_savedmodel_is_the_deprecated_name(tmp_path, caplog):
    estimator = _estimator(tmp_path)
    estimator.train(cases.input_fn_of(repeat=True), steps=1)
    with caplog.at_level(logging.WARNING, logger="keras_tpu_estimator"):
        path = estimator.export_savedmodel(str(tmp_path / "export"), cases.serving_input_receiver_fn(api_for(tmp_path)))
    assert isinstance(path, bytes) and os.path.exists(os.path.join(path.decode(), "saved_model.pb"))
    assert any("export_savedmodel is deprecated" in r.getMessage() for r in caplog.records)


def test_a_tensor_input_fn_and_a_model_fn_without_params(tmp_path):
    """TF1 style: `input_fn()` returning get_next() tensors, `model_fn(features, labels, mode)`."""
    def input_fn():
        x, y = cases.data(8)
        dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, y)).batch(4)
        return tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()

    def model_fn(features, labels, mode):
        return cases.make_model_fn(kte.EstimatorSpec)(features, labels, mode, {})

    estimator = kte.Estimator(model_fn, model_dir=str(tmp_path))
    estimator.train(input_fn)  # two batches, then the input ends
    assert int(estimator.get_variable_value("global_step")) == 2
