"""The device loop: exact execution sizes, exact input consumption, no retrace on the tail."""

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.engine import loop as kte_loop
from tests.fixtures import models


def counting_model_fn(features, labels, mode, params):
    """Adds the ids of every row it trains on into `ids_sum` (summed over replicas)."""
    ids_sum = tf.compat.v1.get_variable(
        "ids_sum", [], tf.int64, initializer=tf.zeros_initializer(),
        trainable=False, aggregation=tf.VariableAggregation.SUM,
    )
    w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.zeros_initializer())
    loss = tf.reduce_mean(tf.square(tf.matmul(features["x"], w) - labels))
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.01)
    step = tf.compat.v1.train.get_or_create_global_step()
    train_op = tf.group(
        optimizer.minimize(loss, global_step=step),
        ids_sum.assign_add(tf.reduce_sum(features["id"])),
    )
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def id_input_fn(params):
    ids = np.arange(10_000, dtype=np.int64)
    features = {"x": np.ones([10_000, 4], np.float32), "id": ids}
    dataset = tf.data.Dataset.from_tensor_slices((features, np.zeros([10_000, 1], np.float32)))
    return dataset.batch(params["batch_size"], drop_remainder=True)


def make_model(strategy, k, model_fn=counting_model_fn):
    """Trains only: no eval or predict batch size."""
    return models.make_model(model_fn, strategy, k=k, batch=None, train_batch_size=16)


def fit(model, **stop):
    recorder = models.ExecutionRecorder()
    model.fit(id_input_fn, callbacks=[kte.StopAtStep(**stop), recorder], verbose=0)
    return recorder.sizes


def test_steps_10_with_k4_runs_4_4_2_then_continues_to_20(strategy):
    model = make_model(strategy, 4)
    assert fit(model, steps=10) == [4, 4, 2]
    assert model.global_step == 10
    # Exactly 10 batches of 16 rows were consumed, in order: ids 0..159.
    assert model.variables_by_name["ids_sum"].numpy() == sum(range(160))
    assert fit(model, steps=10) == [4, 4, 2]
    assert model.global_step == 20
    # One trace of the training loop for both calls, tail executions included.
    assert model.train_function.experimental_get_tracing_count() == 1


def test_max_steps_counts_from_the_current_global_step(strategy):
    model = make_model(strategy, 4)
    assert fit(model, steps=3) == [3]
    assert fit(model, max_steps=10) == [4, 3]
    assert model.global_step == 10
    assert fit(model, max_steps=10) == []
    assert model.global_step == 10


def test_k_larger_than_steps_runs_one_short_execution(strategy):
    model = make_model(strategy, 100)
    assert fit(model, steps=3) == [3]
    assert model.variables_by_name["ids_sum"].numpy() == sum(range(48))


def test_k_1_runs_one_step_per_execution(strategy):
    model = make_model(strategy, 1)
    assert fit(model, steps=3) == [1, 1, 1]


def test_model_fn_is_traced_once_per_call_including_the_tail(strategy):
    calls = []

    def model_fn(features, labels, mode, params):
        calls.append(mode)
        return counting_model_fn(features, labels, mode, params)

    model = make_model(strategy, 4, model_fn)
    fit(model, steps=10)
    replicas = strategy.num_replicas_in_sync
    # One build trace, then one trace of the loop (run once per replica).
    assert calls == ["train"] * (1 + replicas)
    fit(model, steps=6)
    assert len(calls) == 1 + replicas


def test_steps_per_epoch_is_exact_where_stock_keras_rounds_up(strategy):
    # Keras 3.15 runs 12 steps for steps_per_epoch=10, steps_per_execution=4, and
    # its multi-step function fails under MirroredStrategy (keras-team/keras#19246).
    model = make_model(strategy, 4)
    recorder = models.ExecutionRecorder()
    model.fit(id_input_fn, epochs=2, steps_per_epoch=10, callbacks=[recorder], verbose=0)
    assert recorder.sizes == [4, 4, 2, 4, 4, 2]
    assert model.global_step == 20


def test_finite_input_ends_the_epoch_without_a_stop_callback(strategy):
    def short_input_fn(params):
        # Six global batches: under PER_HOST_V1 (the default) input_fn gets the per-host batch.
        return id_input_fn(params).take(6)

    model = make_model(strategy, 4)
    recorder = models.ExecutionRecorder()
    model.fit(short_input_fn, epochs=2, callbacks=[recorder], verbose=0)
    assert recorder.sizes == [4, 2, 4, 2]


def test_time_based_iterations_per_loop_starts_at_one_and_lands_exactly(strategy):
    model = make_model(strategy, "1s")
    sizes = fit(model, steps=7)
    assert sizes[0] == 1
    assert sum(sizes) == 7 and model.global_step == 7


def test_stop_at_step_validates_its_arguments():
    with pytest.raises(ValueError, match="One of `steps` or `max_steps`"):
        kte.StopAtStep()
    with pytest.raises(ValueError, match="Only one of"):
        kte.StopAtStep(steps=1, max_steps=2)
    with pytest.raises(ValueError, match="positive integer"):
        kte.StopAtStep(steps=0)


def test_loop_function_stops_at_the_end_of_input():
    def step(value):
        return {"loss": tf.cast(tf.reduce_sum(value), tf.float32), "weight": 1.0, "outputs": value}

    loop = kte_loop.make_loop_function(
        tf.distribute.get_strategy(), step, output_spec=tf.TensorSpec([None], tf.int64)
    )
    iterator = iter(tf.data.Dataset.range(5).batch(2))
    result = loop(iterator, tf.constant(10))
    # Batches [0, 1], [2, 3], [4]: three steps, outputs concatenated in order.
    assert int(result.steps) == 3
    np.testing.assert_array_equal(result.outputs.numpy(), [0, 1, 2, 3, 4])
