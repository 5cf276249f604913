"""TF1 fetch semantics (`tf1/fetches.py`): what a traced step runs, and what it leaves out."""

import numpy as np
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.tf1.fetches import always_increments, run_fetched
from tests.fixtures import models


def test_only_what_the_result_needs_runs_in_program_order():
    counter, weight = tf.Variable(0.0), tf.Variable(1.0)

    @tf.function
    def step():
        def traced():
            counter.assign_add(1.0)  # nothing needs it
            loss = weight * 2.0
            update = weight.assign_sub(0.25)
            with tf.control_dependencies([update]):
                after = tf.identity(weight.read_value())
            return {"loss": loss, "after": after}

        return run_fetched(traced)

    result = step()
    assert float(counter.numpy()) == 0.0
    assert float(result["loss"]) == 2.0 and float(result["after"]) == 0.75
    assert float(weight.numpy()) == 0.75


def linear_model_fn(features, labels, mode, params):
    """A linear model whose product is a `tf.map_fn` (a while loop) or a matmul."""
    w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.zeros_initializer())
    if params["map_fn"]:
        output = tf.map_fn(lambda row: tf.reduce_sum(row * w[:, 0]), features["x"])[:, None]
    else:
        output = tf.matmul(features["x"], w)
    loss = tf.reduce_mean(tf.square(output - labels))
    step = tf.compat.v1.train.get_or_create_global_step()
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.05).minimize(loss, step)
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def test_the_gradient_of_a_while_loop_in_model_fn_trains(strategy):
    """A while loop's gradient rewrites the forward loop: its copy must follow its new inputs."""
    weights = []
    for map_fn in (True, False):
        model = kte.EstimatorModel(linear_model_fn, params={"map_fn": map_fn}, strategy=strategy,
                                   train_batch_size=16, steps_per_execution=3)
        model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=6)], verbose=0)
        weights.append(model.variables_by_name["w"].numpy())
    assert np.abs(weights[1]).sum() > 0.1
    np.testing.assert_allclose(weights[0], weights[1], rtol=1e-5)


def accumulating_model_fn(features, labels, mode, params):
    """Gradients accumulated over two steps, applied in a `tf.cond` branch on odd steps."""
    w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.zeros_initializer())
    accum = tf.compat.v1.get_variable(
        "accum", [4, 1], initializer=tf.compat.v1.zeros_initializer(), trainable=False
    )
    loss = tf.reduce_mean(tf.square(tf.matmul(features["x"], w) - labels))
    step = tf.compat.v1.train.get_or_create_global_step()
    gradient = tf.compat.v1.gradients(loss, [w])[0]  # the replica mean (tf1/cross_replica.py)

    def apply():  # no optimizer: a merge_call inside a cond is a TensorFlow limitation
        with tf.control_dependencies([w.assign_sub(0.05 * accum / 2.0)]):
            return tf.group(accum.assign(tf.zeros_like(accum)))

    with tf.control_dependencies([accum.assign_add(gradient)]):
        maybe_apply = tf.cond(tf.equal(step % 2, 1), apply, tf.no_op)
    with tf.control_dependencies([maybe_apply]):
        train_op = tf.group(step.assign_add(1))
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def test_a_stateful_branch_of_a_fetched_cond_runs(strategy):
    model = kte.EstimatorModel(accumulating_model_fn, strategy=strategy, train_batch_size=16,
                               steps_per_execution=1)
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=1)], verbose=0)
    variables = model.variables_by_name
    assert np.abs(variables["accum"].numpy()).sum() > 0  # accumulated, not applied
    np.testing.assert_array_equal(variables["w"].numpy(), 0.0)
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(max_steps=2)], verbose=0)
    np.testing.assert_array_equal(variables["accum"].numpy(), 0.0)  # applied, then reset
    assert np.abs(variables["w"].numpy()).sum() > 0
    assert model.global_step == 2


weight = tf.Variable(1.0)


def increments_seen(make_train_op):
    """`always_increments` for the train_op `make_train_op(loss, step)` builds in a traced graph."""
    step = tf.Variable(0, dtype=tf.int64)
    seen = []

    @tf.function(autograph=False)
    def trace():
        before = step.read_value()
        loss = tf.square(weight)
        seen.append(always_increments(make_train_op(loss, step), before))

    trace.get_concrete_function()
    return seen[0]


def test_always_increments_sees_only_a_sure_increment_of_that_variable():
    sgd = tf.compat.v1.train.GradientDescentOptimizer

    assert increments_seen(lambda loss, step: sgd(0.1).minimize(loss, global_step=step, var_list=[weight]))
    assert not increments_seen(lambda loss, step: sgd(0.1).minimize(loss, var_list=[weight]))  # left alone
    assert not increments_seen(lambda loss, step: step.assign_add(0))
    assert not increments_seen(lambda loss, step: tf.group(step.assign_add(1), step.assign_add(-1)))
    assert not increments_seen(  # a branch may skip it
        lambda loss, step: tf.cond(loss > 0, lambda: step.assign_add(1), lambda: step.read_value()))
    assert not increments_seen(  # another write to the step
        lambda loss, step: tf.group(step.assign_add(1), step.assign(5)))
    other = tf.Variable(0, dtype=tf.int64)
    assert not increments_seen(lambda loss, step: other.assign_add(1))
    assert not increments_seen(  # a sure increment, and a branch that may reset it
        lambda loss, step: tf.group(
            step.assign_add(1), tf.cond(loss > 5, lambda: step.assign(0), lambda: step.read_value())))

    @tf.function(autograph=False)
    def rewind(step):
        return step.assign_sub(1)

    assert not increments_seen(lambda loss, step: tf.group(step.assign_add(1), rewind(step)))  # a function call


def test_a_train_op_that_increments_the_global_step_on_some_steps_still_counts_each_step():
    def model_fn(features, labels, mode, params):
        step = tf.compat.v1.train.get_or_create_global_step()
        w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.zeros_initializer())
        loss = tf.reduce_mean(tf.square(tf.matmul(features["x"], w) - labels))
        update = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss)
        with tf.control_dependencies([update]):  # counts odd steps only: the model counts the others
            train_op = tf.cond(step % 2 == 1, lambda: step.assign_add(1), lambda: step.read_value()).op
        return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    model = models.make_model(model_fn=model_fn, k=4)  # (a merge_call in a branch: no MirroredStrategy)
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=7)], verbose=0)
    assert model.global_step == 7
