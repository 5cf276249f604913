"""The global step host functions read: each step's own, fed to the host runner and in fit / evaluate."""


import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from tests.fixtures import models
from tests.host.test_host_functions import make
from tests.host.test_runner import executions, metric_runner, runner_with_host_call


def step_recorder(seen, make_variable=False):
    """A host fn recording `tf.compat.v1.train.get_global_step()`; with a variable no loop can build."""

    def fn(labels, predictions, weights, scores, offset):
        if make_variable:
            tf.compat.v1.get_variable("count", initializer=tf.constant(0, tf.int64), use_resource=True)
        step = tf.compat.v1.train.get_global_step()
        return tf.numpy_function(lambda s: seen.append(int(s)) or np.int64(0), [step], tf.int64)

    return fn


@pytest.mark.parametrize("make_variable", [False, True], ids=["loop", "per_step"])
def test_a_host_call_reads_the_global_step_of_its_step(make_variable):
    """In TRAIN, each step's global step before its update (the original's CPU path mostly read that)."""
    seen = []
    runner = runner_with_host_call(step_recorder(seen, make_variable), every_n_steps=2)
    assert runner._host_calls["train"].over_steps is not make_variable
    arrays = executions(seed=9, steps=(3, 4))
    with runner.running("train"):
        runner.submit("train", arrays[0], first_step=10, steps=3)
        runner.submit("train", arrays[1], first_step=13, steps=4)
    assert seen == [10, 12, 13, 15]  # indexes 0, 2 of each execution


@pytest.mark.parametrize("batched", [True, False])
def test_a_metric_fn_reads_the_model_s_global_step(batched):
    def metric_fn(labels, predictions, weights, scores, offset):
        step = tf.cast(tf.compat.v1.train.get_global_step(), tf.float32)
        return {"step": tf.compat.v1.metrics.mean(step), "last": (tf.identity(step), tf.no_op())}

    runner = metric_runner(metric_fn, batched=batched)
    with runner.running("eval"):
        for execution in executions(seed=10):
            runner.submit("eval", execution, first_step=42, steps=len(execution[0]))
        results = runner.metric_results()
    assert runner.metrics.batched is batched
    assert results == {"step": 42.0, "last": 42.0}


def test_host_functions_read_the_global_step_in_fit_and_evaluate(strategy):
    seen = {"train": [], "eval": []}

    def model_fn(features, labels, mode, params):
        spec = models.get_variable_mlp(features, labels, mode, params)

        def host_fn(ids):
            step = tf.compat.v1.train.get_global_step()
            return tf.numpy_function(lambda s: seen[mode].append(int(s)) or np.int64(0), [step], tf.int64)

        return spec._replace(host_call=(host_fn, [features["id"]]))

    model = make(model_fn, strategy, k=4)
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=6)], verbose=0)
    model.evaluate(models.input_fn, steps=3, verbose=0)
    assert seen == {"train": [0, 1, 2, 3, 4, 5], "eval": [6, 6, 6]}


def test_host_functions_see_a_global_step_that_moves_by_two_per_step():
    """Two `minimize(global_step=...)` calls per step (a GAN's two updates), as TF 2.15 showed: 0, 2, 4, 6."""
    seen = []

    def model_fn(features, labels, mode, params):
        spec = models.get_variable_mlp(features, labels, mode, params)
        step = tf.compat.v1.train.get_global_step()
        with tf.control_dependencies([spec.train_op]):
            second = step.assign_add(1)

        def host_fn(ids):
            return tf.numpy_function(
                lambda s: seen.append(int(s)) or np.int64(0), [tf.compat.v1.train.get_global_step()], tf.int64)

        return spec._replace(train_op=tf.group(spec.train_op, second), host_call=(host_fn, [features["id"]]))

    model = make(model_fn, tf.distribute.get_strategy(), k=4, experimental_host_call_every_n_steps=4)
    model.fit(lambda params: models.input_fn(params).take(6), verbose=0)  # executions of 4 and 2 steps
    assert model.global_step == 12 and seen == [0, 8]  # index 0 of each execution
