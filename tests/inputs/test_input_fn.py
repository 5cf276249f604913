"""The input_fn contract: the arguments it declares, what it may return."""

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.inputs.input_fn import call_input_fn, split_element
from tests.fixtures import models


def test_input_fn_gets_mode_config_and_input_context(strategy):
    seen = {}

    def input_fn(params, mode, config, input_context):
        seen.update(mode=mode, config=config, input_context=input_context)
        return models.input_fn(params)

    config = kte.RunConfig(tpu_config=kte.TPUConfig(iterations_per_loop=2))
    model = kte.EstimatorModel(models.get_variable_mlp, config=config, strategy=strategy, train_batch_size=16)
    model.fit(input_fn, callbacks=[kte.StopAtStep(steps=2)], verbose=0)
    assert seen["mode"] == kte.ModeKeys.TRAIN and seen["config"] is config
    assert isinstance(seen["input_context"], tf.distribute.InputContext)
    assert seen["input_context"].num_replicas_in_sync == strategy.num_replicas_in_sync


def test_tensors_returned_by_input_fn_are_repeated():
    def input_fn(params):
        return {"x": tf.ones([params["batch_size"], 2])}, tf.zeros([params["batch_size"], 1])

    dataset = call_input_fn(input_fn, kte.ModeKeys.TRAIN, {"batch_size": 4}, None)
    elements = list(dataset.take(3))
    assert len(elements) == 3 and elements[2][0]["x"].shape == (4, 2)


def test_input_fn_returning_garbage_is_a_type_error():
    with pytest.raises(TypeError, match="must return a tf.data.Dataset"):
        call_input_fn(lambda params: object(), kte.ModeKeys.TRAIN, {"batch_size": 4}, None)


def test_only_a_pair_carries_labels():
    assert split_element(({"x": 1}, 2)) == ({"x": 1}, 2)
    assert split_element({"x": 1}) == ({"x": 1}, None)
    with pytest.raises(ValueError, match=r"^input_fn should return \(features, labels\) as a len 2 tuple"):
        split_element((1, 2, 3))


def test_batches_must_use_params_batch_size(strategy):
    def input_fn(params):
        return models.input_fn({"batch_size": params["batch_size"] * 2})

    model = kte.EstimatorModel(models.get_variable_mlp, strategy=strategy, train_batch_size=16)
    with pytest.raises(ValueError, match="Batch with params\\['batch_size'\\]"):
        model.fit(input_fn, verbose=0)


def test_a_dataset_without_a_static_batch_needs_a_batch_size():
    features, labels = models.data()
    dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(16)
    model = kte.EstimatorModel(models.get_variable_mlp)
    with pytest.raises(ValueError, match="batch size is not static"):
        model.fit(dataset, verbose=0)


def test_numpy_arrays_are_accepted_with_a_batch_size():
    features, labels = models.data(64)
    model = kte.EstimatorModel(models.get_variable_mlp)
    model.fit((features, labels), batch_size=16, verbose=0)
    assert model.global_step == 4
    assert np.isfinite(model.evaluate((features, labels), batch_size=16, verbose=0))
