"""Padding signals: exactly N predictions in order, static shapes on device, exact eval to the end."""

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.inputs.padding import pad_batches
from tests.fixtures import models


def id_model_fn(features, labels, mode, params):
    if mode != kte.ModeKeys.TRAIN:  # padded: a full, static batch on every replica
        assert features["x"].shape[0] == params["batch_size"], features["x"].shape
    w = tf.compat.v1.get_variable("w", [2, 1], initializer=tf.compat.v1.constant_initializer([[1.0], [0.5]]))
    predictions = tf.matmul(features["x"], w)
    if mode == kte.ModeKeys.PREDICT:
        return kte.TPUEstimatorSpec(mode, predictions={"id": features["id"], "y": predictions})
    mask = kte.padding_mask()
    if mask is None:  # TRAIN batches are not padded
        mask = tf.ones_like(predictions[:, 0])
    error = tf.abs(predictions - labels)[:, 0]
    loss = tf.reduce_sum(error * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)

    def metric_fn(labels, predictions):
        return {"mae": tf.compat.v1.metrics.mean_absolute_error(labels, predictions)}

    train_op = None
    if mode == kte.ModeKeys.TRAIN:  # learning rate 0: the weights stay as initialised
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.0).minimize(loss)
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, eval_metrics=(metric_fn, [labels, predictions]))


def rows(n):
    x = np.stack([np.arange(n), np.ones(n)], axis=1).astype(np.float32)
    labels = (np.arange(n) % 7).astype(np.float32)[:, None]
    return {"x": x, "id": np.arange(n, dtype=np.int64)}, labels


def input_fn_of(n, with_labels=False, counter=None):
    def input_fn(params):
        features, labels = rows(n)
        dataset = tf.data.Dataset.from_tensor_slices((features, labels) if with_labels else features)
        if counter is not None:
            def count(*element):
                counter.assign_add(1)
                return element if len(element) > 1 else element[0]
            dataset = dataset.map(count)
        return dataset.batch(params["batch_size"])  # no drop_remainder: the last batch is partial

    return input_fn


def make(strategy):
    """Evaluates and predicts only: no train batch size."""
    return models.make_model(id_model_fn, strategy, k=3, batch=None, eval_batch_size=16, predict_batch_size=16)


@pytest.mark.parametrize("n", [100, 96, 99, 3])
def test_predict_returns_exactly_the_real_rows_in_order(n, strategy):
    predictions = make(strategy).predict(input_fn_of(n), verbose=0)
    np.testing.assert_array_equal(predictions["id"], np.arange(n))
    np.testing.assert_allclose(predictions["y"][:, 0], np.arange(n) + 0.5)


def test_predict_batches_follow_the_input_batches(strategy):
    sizes = [len(batch["id"]) for batch in make(strategy).predict_batches(input_fn_of(100), verbose=0)]
    assert sizes == [16] * 6 + [4]


def test_a_dataset_with_a_partial_last_batch_is_padded_too(strategy):
    features, _ = rows(99)
    dataset = tf.data.Dataset.from_tensor_slices(features).batch(16)
    predictions = make(strategy).predict(dataset, verbose=0)
    np.testing.assert_array_equal(predictions["id"], np.arange(99))


def test_facade_yields_single_examples_or_input_batches(tmp_path):
    config = kte.RunConfig(model_dir=str(tmp_path))
    estimator = kte.TPUEstimator(id_model_fn, config=config, train_batch_size=16, predict_batch_size=16)
    estimator.train(input_fn_of(160, with_labels=True), steps=1)
    singles = list(estimator.predict(input_fn_of(100), predict_keys="id"))
    assert [int(p["id"]) for p in singles] == list(range(100))
    batches = list(estimator.predict(input_fn_of(100), yield_single_examples=False))
    assert [len(b["id"]) for b in batches] == [16] * 6 + [4]


def test_evaluate_to_the_end_of_input_is_exact(strategy):
    features, labels = rows(99)
    predictions = features["x"] @ np.array([[1.0], [0.5]], np.float32)
    expected = np.mean(np.abs(predictions - labels))
    results = make(strategy).evaluate(input_fn_of(99, with_labels=True), verbose=0, return_dict=True)
    # metric_fn never sees padded rows. The loss is TPUEstimator's: the mean of the steps'
    # losses, each the masked loss of its real rows (16 per step, 3 in the last).
    errors = np.abs(predictions - labels)[:, 0]
    step_losses = [errors[start : start + 16].mean() for start in range(0, 99, 16)]
    assert results["mae"] == pytest.approx(expected, rel=1e-6)
    assert results["loss"] == pytest.approx(np.mean(step_losses), rel=1e-6)


def test_the_input_is_read_exactly_once(strategy):
    counter = tf.Variable(0, dtype=tf.int64)
    make(strategy).predict(input_fn_of(99, counter=counter), verbose=0)
    assert int(counter.numpy()) == 99


def test_a_batch_larger_than_batch_size_is_the_seed_error(strategy):
    def input_fn(params):
        features, _ = rows(64)
        return tf.data.Dataset.from_tensor_slices(features).batch(params["batch_size"] * 2)

    with pytest.raises(tf.errors.InvalidArgumentError, match="real batch size should not be greater than batch_size"):
        make(strategy).predict(input_fn, verbose=0)


def test_runtime_check_for_oversized_batches():
    dataset = tf.data.Dataset.from_generator(
        lambda: iter([{"x": np.zeros([5, 2], np.float32)}]),
        output_signature={"x": tf.TensorSpec([None, 2], tf.float32)},
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="real batch size should not be greater"):
        list(pad_batches(dataset, 4))


@pytest.mark.parametrize(
    "predictions, error, message",
    [
        (lambda x: [x], TypeError, r"^predictions must be Tensor, given: \["),
        (lambda x: {"s": tf.reduce_sum(x)}, ValueError, r"key \(s\).*batch-major"),
        (lambda x: {"t": tf.transpose(x)}, ValueError,
         r"^Batch length of predictions should be same. t has different batch length than others"),
    ],
)
def test_bad_predictions_are_clear_errors(predictions, error, message, strategy):
    def model_fn(features, labels, mode, params):
        return kte.TPUEstimatorSpec(mode, predictions=predictions(features["x"]))

    model = kte.EstimatorModel(model_fn, strategy=strategy, predict_batch_size=16)
    with pytest.raises(error, match=message):
        model.predict(input_fn_of(20), verbose=0)


def test_pad_batches_fills_whole_global_steps():
    dataset = pad_batches(tf.data.Dataset.range(10).batch(4), 4, replicas=4)
    masks = [int(e["mask"].numpy().sum()) for e in dataset]
    assert masks == [4, 4, 2, 0]
