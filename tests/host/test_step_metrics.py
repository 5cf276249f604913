"""eval_metrics on the CPU path run in the EVAL step, as the original's CPU path ran them."""

import keras
import numpy as np
import tensorflow as tf

import keras_tpu_estimator as kte
from tests.fixtures import models


def metric_fn(labels, y):
    return {
        "mse": tf.compat.v1.metrics.mean_squared_error(labels, y),
        "mean_y": tf.compat.v1.metrics.mean(y),
    }


def model_fn(features, labels, mode, params):
    w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.glorot_uniform_initializer(seed=1))
    y = tf.matmul(features["x"], w)
    loss = tf.reduce_mean(tf.square(y - labels))
    return kte.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, y]))


def finite_input(params):
    features, labels = models.data(100)
    return tf.data.Dataset.from_tensor_slices((features, labels)).batch(params["batch_size"])


def expected(model):
    features, labels = models.data(100)
    y = features["x"] @ model.variables_by_name["w"].numpy()
    return {"mse": np.mean((y - labels) ** 2), "mean_y": np.mean(y)}


def test_cpu_path_runs_metric_fn_in_the_step_with_the_host_path_numbers():
    cpu = models.make_model(model_fn, use_tpu=False, seed=7)
    strategy_path = models.make_model(model_fn, seed=7)  # the same initial weights
    cpu_logs = cpu.evaluate(finite_input, verbose=0, return_dict=True)
    host_logs = strategy_path.evaluate(finite_input, verbose=0, return_dict=True)
    assert cpu._runner.metrics.eval_metrics_in_step
    assert cpu._runner.host.metrics is None  # no host session runs metric_fn
    assert not strategy_path._runner.metrics.eval_metrics_in_step
    assert set(cpu_logs) == {"loss", "mse", "mean_y"}
    for name, value in expected(cpu).items():  # 100 rows in batches of 16: a partial last batch
        np.testing.assert_allclose(cpu_logs[name], value, rtol=1e-5)
        np.testing.assert_allclose(host_logs[name], cpu_logs[name], rtol=1e-6)
    # A second evaluate starts the accumulators from zero: the same values again.
    assert cpu.evaluate(finite_input, verbose=0, return_dict=True) == cpu_logs


def test_values_are_read_after_the_last_step_of_the_last_execution():
    by_three = models.make_model(model_fn, use_tpu=False, k=3, seed=7)
    one_execution = models.make_model(model_fn, use_tpu=False, k=100, seed=7)
    logs = by_three.evaluate(finite_input, verbose=0, return_dict=True)
    whole = one_execution.evaluate(finite_input, verbose=0, return_dict=True)
    assert (whole["mse"], whole["mean_y"]) == (logs["mse"], logs["mean_y"])  # 3, 3, 1 steps or 7 in one
    np.testing.assert_allclose(logs["mse"], expected(by_three)["mse"], rtol=1e-5)
    two_steps = by_three.evaluate(finite_input, steps=2, verbose=0, return_dict=True)
    features, labels = models.data(32)
    y = features["x"] @ by_three.variables_by_name["w"].numpy()
    np.testing.assert_allclose(two_steps["mean_y"], np.mean(y), rtol=1e-5)


def test_keras_metric_objects_stay_on_the_host():
    accuracy = keras.metrics.MeanSquaredError(name="mse")

    def keras_metric_fn(labels, y):
        accuracy.update_state(labels, y)
        return {"mse": accuracy}

    def keras_model_fn(features, labels, mode, params):
        spec = model_fn(features, labels, mode, params)
        return spec._replace(eval_metrics=(keras_metric_fn, [labels, spec.eval_metrics[1][1]]))

    model = models.make_model(keras_model_fn, use_tpu=False)
    logs = model.evaluate(finite_input, verbose=0, return_dict=True)
    assert not model._runner.metrics.eval_metrics_in_step
    np.testing.assert_allclose(logs["mse"], expected(model)["mse"], rtol=1e-5)
