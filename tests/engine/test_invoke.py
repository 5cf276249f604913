"""`invoke_model_fn`: the one way `model_fn` is called (training, evaluation, prediction, export)."""

import contextlib
import logging

import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.engine.invoke import check_scaffold, invoke_model_fn
from keras_tpu_estimator.export import saved_model as export
from keras_tpu_estimator.tf1.legacy import inside_model_fn

PREDICT, TRAIN = kte.ModeKeys.PREDICT, kte.ModeKeys.TRAIN
CONFIG = object()


def recording(calls):
    """A model_fn(features, labels, mode, config, params) that records what it got."""

    def model_fn(features, labels, mode, config, params):
        calls.append({"features": features, "labels": labels, "mode": mode, "config": config, "params": params})
        return kte.TPUEstimatorSpec(mode, predictions=tf.constant([1.0]))

    return model_fn


def test_model_fn_gets_the_arguments_it_declares_and_params_as_is():
    calls, params = [], {"a": 1}
    invoke_model_fn(recording(calls), "f", "l", PREDICT, params, CONFIG)
    assert calls == [{"features": "f", "labels": "l", "mode": PREDICT, "config": CONFIG, "params": params}]
    assert calls[0]["params"] is params  # the caller copies

    got = []

    def minimal(features, params):
        got.append((features, params))
        return kte.TPUEstimatorSpec(PREDICT, predictions=tf.constant([1.0]))

    invoke_model_fn(minimal, "f", None, PREDICT, params, CONFIG)
    assert got == [("f", params)]

    def no_params(features, mode):
        got.append((features, mode))
        return kte.TPUEstimatorSpec(mode, predictions=tf.constant([1.0]))

    invoke_model_fn(no_params, "g", None, PREDICT, params, CONFIG)  # as the original's inference
    assert got[-1] == ("g", PREDICT)


def test_features_go_by_keyword_when_declared_else_first():
    got = []

    def features_last(params, mode, features):
        got.append(features)
        return kte.TPUEstimatorSpec(mode, predictions=tf.constant([1.0]))

    def unnamed(x, mode, params):
        got.append(x)
        return kte.TPUEstimatorSpec(mode, predictions=tf.constant([1.0]))

    invoke_model_fn(features_last, "by keyword", None, PREDICT, {}, CONFIG)
    invoke_model_fn(unnamed, "first", None, PREDICT, {}, CONFIG)
    assert got == ["by keyword", "first"]


def test_labels_for_a_model_fn_without_labels_are_refused_or_dropped():
    def model_fn(features, mode, params):
        return kte.TPUEstimatorSpec(mode, predictions=tf.constant([1.0]))

    with pytest.raises(ValueError, match=r"^model_fn does not take labels, but input_fn returns labels\. "):
        invoke_model_fn(model_fn, "f", "l", PREDICT, {}, CONFIG)
    invoke_model_fn(model_fn, "f", None, PREDICT, {}, CONFIG)  # no labels: nothing to refuse
    spec = invoke_model_fn(model_fn, "f", "l", PREDICT, {}, CONFIG, drop_undeclared_labels=True)
    assert spec.mode == PREDICT


def test_contexts_are_entered_in_order_around_model_fn_scope_and_exited_on_error():
    events = []

    @contextlib.contextmanager
    def context(name):
        events.append(f"enter {name} (in model_fn: {inside_model_fn()})")
        try:
            yield
        finally:
            events.append(f"exit {name}")

    def failing(features, params):
        events.append(f"model_fn (in model_fn: {inside_model_fn()})")
        raise RuntimeError("model_fn failed")

    with pytest.raises(RuntimeError, match="model_fn failed"):
        invoke_model_fn(failing, "f", None, PREDICT, {}, CONFIG, contexts=(context("a"), context("b")))
    assert events == [
        "enter a (in model_fn: False)",
        "enter b (in model_fn: False)",
        "model_fn (in model_fn: True)",
        "exit b",
        "exit a",
    ]
    assert not inside_model_fn()


def test_the_spec_is_checked_for_the_mode():
    def not_a_spec(features, params):
        return {"predictions": features}

    with pytest.raises(ValueError, match="model_fn should return an EstimatorSpec"):
        invoke_model_fn(not_a_spec, "f", None, PREDICT, {}, CONFIG)

    def no_predictions(features, mode, params):
        return kte.TPUEstimatorSpec(TRAIN, loss=tf.constant(1.0))

    with pytest.raises(ValueError):
        invoke_model_fn(no_predictions, "f", None, PREDICT, {}, CONFIG)

    def loss_of_shape_1(features, mode, params):
        return kte.TPUEstimatorSpec(mode, loss=tf.constant([2.0]), train_op=tf.constant(0))

    with tf.Graph().as_default():
        spec = invoke_model_fn(loss_of_shape_1, "f", None, TRAIN, {}, CONFIG)
        assert spec.loss.shape == []  # reshaped to a scalar, as the Estimator did


def test_an_estimator_spec_scaffold_is_checked_unless_asked_not_to(caplog):
    def with_scaffold(**parts):
        def model_fn(features, mode, params):
            scaffold = tf.compat.v1.train.Scaffold(**parts)
            return kte.EstimatorSpec(mode, predictions=tf.constant([1.0]), scaffold=scaffold)

        return model_fn

    custom = with_scaffold(init_fn=lambda scaffold, session: None)  # run when nothing is restored
    with caplog.at_level(logging.WARNING):
        spec = invoke_model_fn(custom, "f", None, PREDICT, {}, CONFIG)
    assert spec.scaffold.init_fn is not None and "does not use" not in caplog.text
    with tf.Graph().as_default(), caplog.at_level(logging.WARNING):
        invoke_model_fn(with_scaffold(ready_op=tf.constant([], tf.string)), "f", None, PREDICT, {}, CONFIG)
    assert "sets ['ready_op'], which keras_tpu_estimator does not use" in caplog.text
    caplog.clear()
    with tf.Graph().as_default(), caplog.at_level(logging.WARNING):
        invoke_model_fn(with_scaffold(ready_op=tf.constant([], tf.string)), "f", None, PREDICT, {}, CONFIG,
                        check_estimator_scaffold=False)
    assert "does not use" not in caplog.text


def test_check_scaffold_accepts_a_default_scaffold():
    check_scaffold(tf.compat.v1.train.Scaffold(), "scaffold_fn")


SUPERVISED = export.build_raw_supervised_input_receiver_fn(
    {"x": tf.TensorSpec([None, 4], tf.float32)}, tf.TensorSpec([None, 1], tf.float32)
)


def test_export_calls_model_fn_as_tpu_estimator_did(tmp_path):
    """Export needs `params` (tpu_estimator.py:2038) and refuses labels model_fn does not take (:2026)."""

    def no_params(features, labels, mode):
        raise AssertionError("not called")

    with pytest.raises(ValueError, match=r"does not include params argument, required by TPUEstimator"):
        export.export_saved_model(str(tmp_path), SUPERVISED, no_params, "unused", mode=TRAIN)

    def no_labels(features, mode, params):
        raise AssertionError("not called")

    with pytest.raises(ValueError, match=r"^model_fn does not take labels, but input_fn returns labels\. "):
        export.export_saved_model(str(tmp_path), SUPERVISED, no_labels, "unused", mode=TRAIN,
                                  export_to_tpu=False)
    assert not list(tmp_path.iterdir())  # no export directory left behind
