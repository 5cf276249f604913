"""A strategy in scope, in `RunConfig(train_distribute=...)`, or resolved: the same training, evaluation and predictions.

The program is `tests/fixtures/scope_cases.py`; `tests/recorded/scope_numbers_generated.py` holds
the original's CPU-path numbers at the same global batch (TF 2.15; its TPU path
did not run without a TPU), which the strategy path matches on one replica or
four. The original ran each call in a graph of its own: a strategy in scope
did not change its numbers (`IN_SCOPE == PLAIN`).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.distribute import strategy as strategy_module
from keras_tpu_estimator.estimator import tpu
from tests.fixtures import scope_cases as cases
from tests.recorded import scope_numbers_generated as recorded


def assert_close(result: dict, expected: dict) -> None:
    for key in ("losses", "predictions", "out_kernel"):
        np.testing.assert_allclose(result[key], expected[key], rtol=2e-5, atol=2e-6, err_msg=key)
    assert result["evaluate"].keys() == expected["evaluate"].keys()
    for key, value in expected["evaluate"].items():
        np.testing.assert_allclose(result["evaluate"][key], value, rtol=2e-5, err_msg=key)


def test_the_original_did_not_use_a_strategy_in_scope():
    assert recorded.IN_SCOPE == recorded.PLAIN


@pytest.mark.slow
def test_a_strategy_in_scope_trains_evaluates_and_predicts_as_in_run_config(strategy, tmp_path):
    with strategy.scope():
        in_scope = cases.run(cases.make_estimator(tpu, str(tmp_path / "scope"), use_tpu=True))
    in_config = cases.run(cases.make_estimator(tpu, str(tmp_path / "config"), True, train_distribute=strategy))
    assert in_scope == in_config
    assert_close(in_scope, recorded.PLAIN)


def test_a_resolved_strategy_gives_the_same_numbers(strategy, tmp_path, monkeypatch):
    monkeypatch.setitem(strategy_module._RESOLVED, "local", strategy)  # what use_cpu_replicas(4) sets
    resolved = cases.run(cases.make_estimator(tpu, str(tmp_path), use_tpu=True))
    assert_close(resolved, recorded.PLAIN)


def test_a_scope_around_the_constructor_only_is_not_kept(mirrored, tmp_path):
    """The estimator makes its model at each call (as the original made a graph): the call's strategy counts."""
    with mirrored.scope():
        estimator = cases.make_estimator(tpu, str(tmp_path), use_tpu=True)
    cases.LossRecorder.losses = []
    estimator.train(cases.make_input_fn(64, 0, True), max_steps=2)
    np.testing.assert_allclose(cases.LossRecorder.losses, recorded.PLAIN["losses"][:2], rtol=2e-5)


def test_training_inside_the_scope_equals_training_with_train_distribute(mirrored, tmp_path):
    """Issue 31: an AssertionError in MirroredStrategy's creator (the variable store re-entered the scope)."""
    kernels = []
    for name, scope, distribute in (("scope", mirrored.scope(), None), ("config", contextlib.nullcontext(), mirrored)):
        estimator = cases.make_estimator(tpu, str(tmp_path / name), True, train_distribute=distribute)
        cases.LossRecorder.losses = []
        with scope:
            estimator.train(cases.make_input_fn(64, 0, True), max_steps=2)
        kernels.append((list(cases.LossRecorder.losses), estimator.get_variable_value("out/kernel").tolist()))
    assert kernels[0] == kernels[1]
    np.testing.assert_allclose(kernels[0][0], recorded.PLAIN["losses"][:2], rtol=2e-5)


def test_the_cpu_path_inside_a_scope_runs_as_the_original_without_it(mirrored, tmp_path):
    """use_tpu=False: the original's calls ran in graphs of their own, where the caller's scope was not."""
    with mirrored.scope():
        in_scope = cases.run(cases.make_estimator(tpu, str(tmp_path), use_tpu=False))
    assert_close(in_scope, recorded.IN_SCOPE)


def test_between_predictions_the_callers_scope_is_in_scope(mirrored, tmp_path):
    estimator = cases.make_estimator(tpu, str(tmp_path), use_tpu=False)
    seen = []
    with mirrored.scope():
        for _ in estimator.predict(cases.make_input_fn(cases.BATCH, 2, False), yield_single_examples=False):
            seen.append(tf.distribute.get_strategy())
        seen.append(tf.distribute.get_strategy())
    assert len(seen) == 2 and all(s is mirrored for s in seen)
    assert not tf.distribute.has_strategy()


def test_the_plain_estimator_inside_the_scope_trains_as_without_it(mirrored, tmp_path):
    def model_fn(features, labels, mode):
        w = tf.compat.v1.get_variable("w", [cases.FEATURES, 1], initializer=tf.compat.v1.zeros_initializer())
        loss = tf.compat.v1.losses.mean_squared_error(labels, tf.matmul(features, w))
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
            loss, tf.compat.v1.train.get_global_step())
        return kte.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, predictions={"y": loss + 0})

    def input_fn():
        return cases.make_input_fn(64, 0, True)({"batch_size": 4})

    results = []
    for name, scope in (("scope", mirrored.scope()), ("none", contextlib.nullcontext())):
        estimator = kte.estimator.Estimator(model_fn, config=kte.estimator.RunConfig(model_dir=str(tmp_path / name)))
        with scope:
            estimator.train(input_fn, max_steps=3)
            metrics = estimator.evaluate(input_fn, steps=2)
        results.append((estimator.get_variable_value("w").tolist(), float(metrics["loss"])))
    assert results[0] == results[1]


def test_estimator_model_fits_evaluates_and_predicts_inside_the_scope(strategy):
    cases._TPU.append(tpu)
    with strategy.scope():
        model = kte.EstimatorModel(
            cases.model_fn, train_batch_size=cases.BATCH, eval_batch_size=cases.BATCH,
            predict_batch_size=cases.BATCH, config=kte.RunConfig(tpu_config=kte.TPUConfig(iterations_per_loop=1)))
        assert model.distribute_strategy is strategy
        cases.LossRecorder.losses = []
        model.fit(cases.make_input_fn(64, 0, True), callbacks=[kte.StopAtStep(steps=cases.STEPS)], verbose=0)
        metrics = model.evaluate(cases.make_input_fn(2 * cases.BATCH, 1, False), return_dict=True, verbose=0)
        predictions = model.predict(cases.make_input_fn(cases.BATCH, 2, False), verbose=0)
    np.testing.assert_allclose(cases.LossRecorder.losses, recorded.PLAIN["losses"], rtol=2e-5)
    for key in ("loss", "mae", "rmse"):
        np.testing.assert_allclose(metrics[key], recorded.PLAIN["evaluate"][key], rtol=2e-5)
    np.testing.assert_allclose(np.ravel(predictions["y"]), recorded.PLAIN["predictions"], rtol=2e-5, atol=2e-6)
