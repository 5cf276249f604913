"""Predictions on the CPU path (`use_tpu=False`): each batch as it is, as TPUEstimator's CPU path ran it.

The strategy path's padded predictions are tested in `tests/inputs/test_padding.py`; the original's numbers
for a batch-dependent prediction are pinned in `tests/parity/test_original_parity.py`.
"""

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte

X = np.arange(10, dtype=np.float32).reshape(10, 1)


def cpu_model(predict, steps_per_execution=2, seen=None):
    def model_fn(features, labels, mode, params):
        f = features["x"] if isinstance(features, dict) else features
        if seen is not None:
            seen.append((f.shape.as_list(), kte.padding_mask()))
        scale = tf.compat.v1.get_variable("scale", [], initializer=tf.compat.v1.ones_initializer())
        return kte.TPUEstimatorSpec(mode, predictions=predict(f * scale))

    return kte.EstimatorModel(model_fn, use_tpu=False, predict_batch_size=4, steps_per_execution=steps_per_execution)


def input_fn(params):
    return tf.data.Dataset.from_tensor_slices({"x": X}).batch(params["batch_size"])


def centred(f):
    return {"centred": f - tf.reduce_mean(f, axis=0), "rows": tf.fill(tf.shape(f)[:1], tf.shape(f)[0])}


@pytest.mark.parametrize("steps_per_execution", [1, 2, 100])
def test_model_fn_sees_the_real_rows_of_every_batch(steps_per_execution):
    seen = []
    model = cpu_model(centred, steps_per_execution, seen)
    out = model.predict(input_fn, verbose=0)
    expected = np.concatenate([b - b.mean(axis=0) for b in (X[:4], X[4:8], X[8:])])
    np.testing.assert_array_equal(out["centred"], expected)
    np.testing.assert_array_equal(out["rows"], [4] * 8 + [2] * 2)
    assert {tuple(shape) for shape, _ in seen} == {(None, 1)}
    assert all(mask is None for _, mask in seen)  # nothing padded, so no mask
    batches = list(model.predict_batches(input_fn, verbose=0))
    assert [b["rows"].tolist() for b in batches] == [[4] * 4, [4] * 4, [2, 2]]


def test_batches_of_any_size_anywhere_in_the_input_come_back_as_they_were():
    """Sizes 2, 2, 1, 4: a short batch in the middle of an execution is not cut or padded."""

    def uneven(params):
        first = tf.data.Dataset.from_tensor_slices({"x": X[:5]}).batch(2)
        return first.concatenate(tf.data.Dataset.from_tensor_slices({"x": X[5:9]}).batch(4))

    model = cpu_model(centred, steps_per_execution=3)
    batches = list(model.predict_batches(uneven, verbose=0))
    assert [b["rows"].tolist() for b in batches] == [[2, 2], [2, 2], [1], [4] * 4]
    np.testing.assert_array_equal(batches[2]["centred"], [[0.0]])
    assert model.predict(uneven, verbose=0)["centred"].shape == (9, 1)


def test_predictions_of_any_shape_reach_predict_batches_unchanged():
    """As on the original's CPU path: a scalar, a transposed tensor and strings per batch."""

    def shapes(f):
        return {
            "total": tf.reduce_sum(f),
            "transposed": tf.transpose(f),
            "names": tf.strings.as_string(tf.cast(f[:, 0], tf.int32)),
        }

    batches = list(cpu_model(shapes).predict_batches(input_fn, verbose=0))
    assert [float(b["total"]) for b in batches] == [6.0, 22.0, 17.0]
    assert [b["transposed"].shape for b in batches] == [(1, 4), (1, 4), (1, 2)]
    assert batches[2]["names"].tolist() == [b"8", b"9"]


def test_predict_cannot_join_a_scalar_across_batches_and_says_what_to_use():
    model = cpu_model(lambda f: {"total": tf.reduce_sum(f)})
    with pytest.raises(ValueError, match=r"prediction 'total' has no batch dimension.*predict_batches"):
        model.predict(input_fn, verbose=0)


def test_predict_of_an_empty_input_has_zero_rows_of_each_prediction():
    def empty(params):
        return tf.data.Dataset.from_tensor_slices({"x": X[:0]}).batch(params["batch_size"])

    out = cpu_model(centred).predict(empty, verbose=0)
    assert out["centred"].shape == (0, 1) and out["rows"].shape == (0,)


def test_the_facade_yields_single_examples_checked_as_the_original_did(tmp_path):
    def model_fn(features, labels, mode, params):
        f = features["x"] + 0 * tf.compat.v1.get_variable("v", [])
        return kte.TPUEstimatorSpec(mode, predictions={"x": f, "three": tf.zeros([3])})

    config = kte.RunConfig(model_dir=str(tmp_path))
    estimator = kte.TPUEstimator(model_fn, config=config, use_tpu=False, predict_batch_size=4)
    with pytest.raises(ValueError, match="^Batch length of predictions should be same. three has"):
        next(estimator.predict(input_fn))
    shapes = [{k: v.shape for k, v in b.items()} for b in estimator.predict(input_fn, yield_single_examples=False)]
    assert shapes == [{"x": (4, 1), "three": (3,)}] * 2 + [{"x": (2, 1), "three": (3,)}]


def test_a_prediction_of_unknown_rank_and_one_of_zero_width_come_back():
    def odd(f):
        return {"doubled": tf.numpy_function(lambda a: a * 2, [f], tf.float32), "none": f[:, :0]}

    out = cpu_model(odd).predict(input_fn, verbose=0)
    np.testing.assert_array_equal(out["doubled"], X * 2)
    assert out["none"].shape == (10, 0)


@pytest.mark.parametrize("steps_per_execution", [1, 3])
def test_predict_refuses_predictions_it_cannot_join_into_one_row_per_example(steps_per_execution):
    model = cpu_model(lambda f: {"y": f, "three": tf.zeros([3])}, steps_per_execution)
    with pytest.raises(ValueError, match="^Batch length of predictions should be same. three has"):
        model.predict(input_fn, verbose=0)
    model = cpu_model(lambda f: {"t": tf.transpose(f)}, steps_per_execution)
    with pytest.raises(ValueError, match=r"prediction 't' cannot be joined across batches.*\(1, 2\), \(1, 4\)"):
        model.predict(input_fn, verbose=0)


def test_host_call_in_predict_sees_each_batch_as_the_input_made_it():
    """The original's CPU path: params['batch_size'] is advice; a batch of 8 with a batch size of 4 runs."""
    seen = []

    def model_fn(features, labels, mode, params):
        f = features["x"] + 0 * tf.compat.v1.get_variable("v", [])
        record = lambda t: seen.append(t.shape[0]) or np.int64(0)  # noqa: E731
        host_call = (lambda t: tf.numpy_function(record, [t], tf.int64), [f])
        return kte.TPUEstimatorSpec(mode, predictions={"y": f}, host_call=host_call)

    model = kte.EstimatorModel(model_fn, use_tpu=False, predict_batch_size=4, steps_per_execution=2)
    model.predict(input_fn, verbose=0)
    assert seen == [4, 4, 2]
    seen.clear()
    out = model.predict(lambda params: tf.data.Dataset.from_tensor_slices({"x": X}).batch(8), verbose=0)
    assert seen == [8, len(X) - 8]
    np.testing.assert_array_equal(out["y"], X)


def test_select_predictions_computes_only_the_selected_keys():
    ran = []

    def watched(f):
        counted = tf.numpy_function(lambda v: ran.append(len(v)) or v, [f], tf.float32)
        return {"y": f, "watched": tf.ensure_shape(counted, f.shape)}

    model = cpu_model(watched)
    model.select_predictions(["y"])
    out = model.predict(input_fn, verbose=0)
    assert sorted(out) == ["y"] and ran == []  # the unselected prediction never ran
    np.testing.assert_array_equal(out["y"], X)
    model.select_predictions(["y"])  # the same selection: allowed after the build
    with pytest.raises(ValueError, match="before the model's first prediction"):
        model.select_predictions(None)
    everything = cpu_model(watched)
    assert sorted(everything.predict(input_fn, verbose=0)) == ["watched", "y"] and ran == [4, 4, 2]


def test_predictions_left_out_by_predict_keys_are_still_checked():
    """As the Estimator: every prediction is checked, then only the selected ones are computed."""
    model = cpu_model(lambda f: {"y": f, "sparse": tf.sparse.from_dense(f)})
    model.select_predictions(["y"])
    with pytest.raises(TypeError, match=r"predictions\['sparse'\] must be a Tensor"):
        model.predict(input_fn, verbose=0)


def test_batch_length_raises_the_originals_errors_for_predictions_without_examples():
    from keras_tpu_estimator.host.predictions import batch_length

    with pytest.raises(TypeError, match=r"^'NoneType' object cannot be interpreted as an integer: the predictions dict is empty"):
        batch_length({})
    with pytest.raises(AttributeError, match=r"^'bytes' object has no attribute 'shape': the prediction 'label'"):
        batch_length({"y": np.zeros([2, 1]), "label": b"6.0"})
    assert batch_length({"y": np.zeros([3, 1]), "z": np.zeros([3])}) == 3
