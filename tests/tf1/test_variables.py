"""The variable store on its own: names, reuse, creation only during a build."""

import keras
import pytest
import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.tf1.variables import NewVariableAfterBuildError, VariableStore


def build(store, fn):
    with store.creating(), _compat.default_replica_graph("build"), store.scope():
        return fn()


def test_get_variable_and_keras_layers_get_tf1_names_and_are_tracked(strategy):
    owner = keras.layers.Layer()
    store = VariableStore(owner, strategy)

    def fn():
        with tf.compat.v1.variable_scope("block"):
            tf.compat.v1.get_variable("w", [2, 3])
        keras.layers.Dense(3)(tf.compat.v1.placeholder(tf.float32, [4, 2]))

    build(store, fn)
    assert sorted(store.variables_by_name) == ["block/w", "dense/bias", "dense/kernel", "global_step"]
    assert {v.value.name for v in owner.weights} >= {"block/w:0", "dense/kernel:0", "global_step:0"}
    assert len(owner.trainable_weights) == 3


def test_a_variable_asked_for_after_the_build_is_an_error(strategy):
    store = VariableStore(keras.layers.Layer(), strategy)
    build(store, lambda: tf.compat.v1.get_variable("a", [1]))

    @tf.function(autograph=False)
    def trace():
        with store.scope():
            tf.compat.v1.get_variable("a", [1])       # reused: fine
            return tf.compat.v1.get_variable("b", [1])

    with pytest.raises(NewVariableAfterBuildError, match="'b'"):
        trace()


def test_initial_values_computed_from_inputs_are_rejected():
    store = VariableStore(keras.layers.Layer(), tf.distribute.get_strategy())

    def fn():
        x = tf.compat.v1.placeholder(tf.float32, [3])
        tf.Variable(x * 2.0, name="bad")

    with pytest.raises(ValueError, match="initial value of variable 'bad' depends on tensors"):
        build(store, fn)


def test_collections_hold_the_model_variables_only_inside_the_scope():
    store = VariableStore(keras.layers.Layer(), tf.distribute.get_strategy())

    def fn():
        tf.compat.v1.get_variable("w", [1])
        assert tf.compat.v1.train.get_global_step() is store.global_step.value
        return list(tf.compat.v1.trainable_variables())

    assert [v.name for v in build(store, fn)] == ["w:0"]
    assert tf.compat.v1.trainable_variables() == []
