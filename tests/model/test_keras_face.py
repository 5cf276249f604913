"""Stock Keras habits on `EstimatorModel`: callbacks keep their meaning, Keras input forms, honest input."""

import logging
import os
import pathlib
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from tests.fixtures import models

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_backup_script(backup_dir, out_dir, *kill_after_epoch):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
    args = [str(backup_dir), str(out_dir), *map(str, kill_after_epoch)]
    return subprocess.run([sys.executable, "-m", "tests.fixtures.backup_script", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_backup_and_restore_after_sigkill_resumes_the_epoch_and_the_step(tmp_path):
    straight = run_backup_script(tmp_path / "straight_backup", tmp_path)
    assert straight.returncode == 0, straight.stderr[-3000:]
    expected = dict(np.load(tmp_path / "result.npz"))
    assert list(expected["epochs"]) == [0, 1, 2] and expected["step"] == 12

    killed = run_backup_script(tmp_path / "backup", tmp_path, 1)
    assert killed.returncode == -signal.SIGKILL
    resumed = run_backup_script(tmp_path / "backup", tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    result = dict(np.load(tmp_path / "result.npz"))
    assert list(result["epochs"]) == [2]  # epochs 0 and 1 were done before the kill
    assert result["step"] == 12  # not 20: the finished epochs are not trained again
    np.testing.assert_allclose(result["kernel"], expected["kernel"], rtol=1e-6)


def nan_input_fn(params):
    features, labels = models.data(160)
    labels[16 * 6] = np.nan  # the 7th batch's loss is NaN
    return tf.data.Dataset.from_tensor_slices((features, labels)).batch(params["batch_size"], drop_remainder=True)


def test_terminate_on_nan_stops_training_its_own_way_and_no_nan_checkpoint_is_kept(tmp_path):
    model = kte.EstimatorModel(models.get_variable_mlp, params={}, train_batch_size=16, use_tpu=False,
                               steps_per_execution=2)
    saver = kte.CheckpointSaver(str(tmp_path), save_steps=2)
    model.fit(nan_input_fn, callbacks=[saver, keras.callbacks.TerminateOnNaN(), kte.StopAtStep(steps=10)],
              verbose=0)  # returns: no NanLossError
    assert model.stop_training
    assert model.global_step == 8  # the execution of steps 7 and 8 gave the NaN
    assert np.isnan(model.history.history["loss"][-1])
    assert saver.saved_steps == [2, 4, 6]  # never the NaN weights
    latest = tf.train.latest_checkpoint(str(tmp_path))
    assert latest.endswith("-6")
    kernel = tf.train.load_checkpoint(latest).get_tensor("mlp/hidden/kernel")
    assert np.isfinite(kernel).all()


def test_without_terminate_on_nan_a_nan_loss_still_raises():
    model = kte.EstimatorModel(models.get_variable_mlp, params={}, train_batch_size=16, use_tpu=False,
                               steps_per_execution=2)
    with pytest.raises(FloatingPointError, match="global step 8"):
        model.fit(nan_input_fn, callbacks=[kte.StopAtStep(steps=10)], verbose=0)


def keras_optimizer_model_fn(features, labels, mode, params):
    output = keras.layers.Dense(1, kernel_initializer="ones", name="dense")(features["x"])
    loss = tf.reduce_mean(tf.square(output - labels))
    train_op = None
    if mode == kte.ModeKeys.TRAIN:
        optimizer = keras.optimizers.SGD(0.01)
        variables = tf.compat.v1.trainable_variables()
        train_op = optimizer.apply_gradients(zip(tf.gradients(loss, variables), variables, strict=True))
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def test_learning_rate_scheduler_reaches_a_keras_optimizer_made_in_model_fn():
    model = kte.EstimatorModel(keras_optimizer_model_fn, train_batch_size=16, use_tpu=False)
    scheduler = keras.callbacks.LearningRateScheduler(lambda epoch, rate: 0.0)
    model.fit(models.input_fn, steps_per_epoch=3, callbacks=[scheduler], verbose=0)
    assert isinstance(model.optimizer, keras.optimizers.SGD)
    assert float(model.optimizer.learning_rate) == 0.0
    np.testing.assert_array_equal(model.variables_by_name["dense/kernel"].numpy(), np.ones([4, 1]))
    assert model.global_step == 3
    # The same fit without the scheduler trains.
    model = kte.EstimatorModel(keras_optimizer_model_fn, train_batch_size=16, use_tpu=False)
    model.fit(models.input_fn, steps_per_epoch=3, verbose=0)
    assert not np.allclose(model.variables_by_name["dense/kernel"].numpy(), 1.0)


def test_reduce_lr_on_plateau_lowers_the_model_fn_optimizers_rate():
    model = kte.EstimatorModel(keras_optimizer_model_fn, train_batch_size=16, use_tpu=False)
    plateau = keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=0, min_delta=1e9)
    model.fit(models.input_fn, steps_per_epoch=2, epochs=3, callbacks=[plateau], verbose=0)
    assert float(model.optimizer.learning_rate) == pytest.approx(0.01 * 0.5**2)  # epoch 0 sets the best loss


def test_a_tf1_optimizer_shows_the_global_step_as_iterations_and_refuses_rate_schedules(tmp_path):
    model = kte.EstimatorModel(models.get_variable_mlp, params={}, train_batch_size=16, use_tpu=False)
    scheduler = keras.callbacks.LearningRateScheduler(lambda epoch, rate: rate)
    with pytest.raises(ValueError, match="LearningRateScheduler: .*no Keras optimizer.*exponential_decay"):
        model.fit(models.input_fn, steps_per_epoch=2, callbacks=[scheduler], verbose=0)
    board = keras.callbacks.TensorBoard(str(tmp_path), write_steps_per_second=True)
    model.fit(models.input_fn, steps_per_epoch=4, callbacks=[board], verbose=0)
    assert int(model.optimizer.iterations) == model.global_step == 4
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "train"), size_guidance={"tensors": 0})
    events.Reload()
    assert "epoch_steps_per_second" in events.Tags()["tensors"]
    rate = tf.make_ndarray(events.Tensors("epoch_steps_per_second")[0].tensor_proto)
    assert rate > 0


def test_fit_evaluate_predict_take_arrays_and_dicts_as_keras_does():
    features, labels = models.data(130)
    model = kte.EstimatorModel(models.get_variable_mlp, params={}, use_tpu=False)
    history = model.fit(features, labels, batch_size=50, epochs=2, verbose=0)
    assert model.global_step == 6  # 50, 50 and the last 30 rows, twice: Keras keeps the partial batch
    assert len(history.history["loss"]) == 2
    loss = model.evaluate(features, labels, batch_size=50, verbose=0)
    predictions = model.predict(features, batch_size=50, verbose=0)
    assert predictions["y"].shape == (130, 1)
    np.testing.assert_allclose(loss, np.mean([np.mean((predictions["y"][i:i + 50] - labels[i:i + 50]) ** 2)
                                              for i in (0, 50, 100)]), rtol=1e-5)
    # Keras' default batch size when none is given anywhere: 32.
    assert model.predict(features, verbose=0)["y"].shape == (130, 1)


def test_keras_arguments_without_estimator_meaning_are_refused_by_name():
    features, labels = models.data(64)
    model = kte.EstimatorModel(models.get_variable_mlp, params={}, train_batch_size=16, use_tpu=False)
    with pytest.raises(ValueError, match=r"does not take \['sample_weight'\].*features\['weight'\]"):
        model.fit(features, labels, sample_weight=np.ones(64), verbose=0)
    with pytest.raises(ValueError, match="`y` is only for array input"):
        model.fit(models.input_fn, labels, verbose=0)


def test_single_batch_methods_run_one_step_with_estimator_meaning():
    features, labels = models.data(32)
    batch = tf.data.Dataset.from_tensors((features, labels))
    model = kte.EstimatorModel(models.get_variable_mlp, params={}, use_tpu=False)
    first_loss = model.test_on_batch(features, labels)
    assert first_loss == pytest.approx(model.evaluate(features, labels, batch_size=32, verbose=0))
    before = {name: v.numpy() for name, v in model.variables_by_name.items()}
    loss = model.train_on_batch(features, labels)
    assert model.global_step == 1
    assert loss == pytest.approx(first_loss)  # the step's loss, before its update
    # The same step through fit, from the same weights, gives the same weights.
    twin = kte.EstimatorModel(models.get_variable_mlp, params={}, use_tpu=False, train_batch_size=32)
    twin.trace(batch)
    for name, variable in twin.variables_by_name.items():
        variable.assign(before[name])
    twin.fit(batch, verbose=0)
    np.testing.assert_allclose(model.variables_by_name["mlp/hidden/kernel"].numpy(),
                               twin.variables_by_name["mlp/hidden/kernel"].numpy(), rtol=1e-6)
    assert model.train_on_batch(features, labels, return_dict=True).keys() == {"loss"}
    np.testing.assert_allclose(model.predict_on_batch(features)["y"],
                               model.predict(features, batch_size=32, verbose=0)["y"])
    with pytest.raises(ValueError, match="one batch of NumPy arrays"):
        model.train_on_batch(models.input_fn)


def test_a_finite_input_ending_before_the_stop_step_warns_and_the_progress_bar_shows_the_truth(caplog, capsys):
    features, labels = models.data(64)
    dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(16)
    model = kte.EstimatorModel(models.get_variable_mlp, params={}, use_tpu=False, train_batch_size=16)
    with caplog.at_level(logging.WARNING, logger="keras_tpu_estimator"):
        model.fit(dataset, callbacks=[kte.StopAtStep(steps=1000)], verbose=1)
    assert model.global_step == 4
    assert "ended at global step 4, before the stop step 1000" in caplog.text
    output = capsys.readouterr().out
    assert "4/1000" in output and "1000/1000" not in output


def test_an_empty_training_input_warns(caplog):
    features, labels = models.data(64)
    empty = tf.data.Dataset.from_tensor_slices((features, labels)).batch(16).take(0)
    model = kte.EstimatorModel(models.get_variable_mlp, params={}, use_tpu=False, train_batch_size=16)
    with caplog.at_level(logging.WARNING, logger="keras_tpu_estimator"):
        model.fit(empty, verbose=0)
    assert model.global_step == 0
    assert "The training input is empty: epoch 0 ran no step (global step 0)" in caplog.text


def test_an_uneven_last_batch_under_replicas_names_drop_remainder_before_any_nan(mirrored, tmp_path):
    features, labels = models.data(33)
    dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(16)  # 16, 16, then 1 row
    model = kte.EstimatorModel(models.get_variable_mlp, params={}, strategy=mirrored, train_batch_size=16)
    saver = kte.CheckpointSaver(str(tmp_path))
    with pytest.raises(ValueError, match="stopped at global step 2: .*4 replicas.*drop_remainder=True"):
        model.fit(dataset, callbacks=[saver], verbose=0)
    assert model.global_step == 2
    assert all(np.isfinite(v.numpy()).all() for v in model.trainable_variables)
    assert saver.saved_steps == [2]  # the two steps are kept
    # A last batch with a row for every replica trains, as Keras does.
    features, labels = models.data(36)
    model.fit(tf.data.Dataset.from_tensor_slices((features, labels)).batch(16), verbose=0)
    assert model.global_step == 5


def test_step_lines_follow_tensorflows_verbosity(caplog):
    old = tf.compat.v1.logging.get_verbosity()
    model = kte.EstimatorModel(models.get_variable_mlp, params={}, train_batch_size=16, use_tpu=False)
    seen = []
    handler = logging.Handler()
    handler.emit = seen.append
    tensorflow_logger = logging.getLogger("tensorflow")
    tensorflow_logger.addHandler(handler)
    try:
        tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.WARN)
        model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=4), kte.StepLogger(2)], verbose=0)
        assert not [r for r in seen if "step = " in r.getMessage()]
        tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)  # what old scripts do
        model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=4), kte.StepLogger(2)], verbose=0)
        lines = [r.getMessage() for r in seen if "step = " in r.getMessage()]
        assert [line.split("step = ")[1].split()[0] for line in lines] == ["6", "8"]
        assert lines[0].startswith("loss = ")
    finally:
        tensorflow_logger.removeHandler(handler)
        tf.compat.v1.logging.set_verbosity(old)


def test_terminate_on_nan_also_stops_on_non_finite_weights_with_a_finite_loss(caplog):
    def input_fn(params):  # a NaN feature: relu hides it from the loss, not from the gradient
        features, labels = models.data(160)
        features["x"][16 * 6] = np.nan
        return tf.data.Dataset.from_tensor_slices((features, labels)).batch(16, drop_remainder=True)

    model = kte.EstimatorModel(models.get_variable_mlp, params={}, train_batch_size=16, use_tpu=False,
                               steps_per_execution=2)
    with caplog.at_level(logging.WARNING, logger="keras_tpu_estimator"):
        model.fit(input_fn, callbacks=[keras.callbacks.TerminateOnNaN(), kte.StopAtStep(steps=10)], verbose=0)
    assert model.global_step == 8 and model.stop_training
    assert "'mlp/hidden/kernel' holds NaN or Inf after the execution ending at global step 8" in caplog.text


def test_csv_logger_and_lambda_callback_see_each_epoch(tmp_path):
    ends = []
    model = kte.EstimatorModel(models.get_variable_mlp, params={}, train_batch_size=16, use_tpu=False,
                               steps_per_execution=2)
    model.fit(models.input_fn, epochs=3, steps_per_epoch=4, verbose=0, callbacks=[
        keras.callbacks.CSVLogger(str(tmp_path / "log.csv")),
        keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: ends.append(batch)),
    ])
    rows = (tmp_path / "log.csv").read_text().splitlines()
    assert rows[0].startswith("epoch,loss") and [r.split(",")[0] for r in rows[1:]] == ["0", "1", "2"]
    assert ends == [1, 3] * 3  # the step index in the epoch at each execution boundary
