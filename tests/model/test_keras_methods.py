"""Inherited keras.Model methods: estimator meaning, or one error naming the supported way."""

import functools
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

import keras_tpu_estimator as kte
from tests.fixtures import models

MLP_NAMES = ["mlp/hidden/kernel", "mlp/hidden/bias", "mlp/out/kernel"]


make_model = functools.partial(models.make_model, k=2)  # executions of 2 steps in this file


def train(model, steps):
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=steps)], verbose=0)


def values(variables):
    return [np.array(v.numpy()) for v in variables]


# ------------------------------------------------------------------ paths
def test_variable_paths_are_tf1_names(strategy):
    model = make_model(models.keras_layers_model, strategy)
    train(model, 2)
    assert [v.path for v in model.trainable_variables] == ["dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"]
    assert {v.path for v in model.weights} == set(model.variables_by_name)
    assert all(v.path == name for name, v in model.variables_by_name.items())
    assert "dense/kernel/Adam" in {v.path for v in model.non_trainable_variables}


def test_keras_optimizer_slots_follow_the_tf1_paths():
    model = make_model(params={"optimizer": "keras"}, optimizer=keras.optimizers.SGD(0.05, momentum=0.9))
    train(model, 2)
    slots = sorted(name for name in model.checkpoint_variables if name.startswith("keras_optimizer/"))
    assert [name for name in slots if "momentum" in name] == [
        "keras_optimizer/mlp_hidden_bias_momentum",
        "keras_optimizer/mlp_hidden_kernel_momentum",
        "keras_optimizer/mlp_out_kernel_momentum",
    ]
    assert model.global_step == 2
    printed = []
    model.summary(print_fn=printed.append)
    assert " Optimizer params: 98 (396.00 B)" in printed[0]  # 96 momentums, the iterations, the rate
    assert " Total params: 195 " in printed[0]


# ------------------------------------------------------------------ summary
def test_summary_lists_every_model_fn_variable_and_the_totals(capsys):
    model = make_model()
    printed = []
    model.summary(print_fn=printed.append)
    assert printed == ['Model: "estimator_model"\n nothing built yet: call fit/evaluate/predict or trace first.']

    train(model, 1)
    printed.clear()
    model.summary(print_fn=printed.append)
    (text,) = printed
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]] for line in text.splitlines() if line.startswith("│")}
    assert rows["Variable (TF1 name)"] == ["Shape", "Dtype", "Trainable", "Param #"]
    assert rows["mlp/hidden/kernel"] == ["(4, 16)", "float32", "Y", "64"]
    assert rows["mlp/hidden/bias"] == ["(16,)", "float32", "Y", "16"]
    assert rows["global_step"] == ["()", "int64", "N", "1"]
    assert set(rows) == {"Variable (TF1 name)", "global_step", *MLP_NAMES}
    assert " Total params: 97 (392.00 B)" in text
    assert " Trainable params: 96 (384.00 B)" in text
    assert " Non-trainable params: 1 (8.00 B)" in text

    model.summary()  # print, by default
    assert "│ mlp/out/kernel " in capsys.readouterr().out

    printed.clear()
    model.summary(print_fn=printed.append, line_length=100, positions=[0.4, 0.6, 0.75, 0.88, 1.0], layer_range=["mlp/hidden", "mlp/hidden/bias"])
    lines = printed[0].splitlines()
    assert {len(line) for line in lines[1:-3]} == {100}
    assert [line.split("│")[1].strip() for line in lines if line.startswith("│")][1:] == MLP_NAMES[:2]


# ------------------------------------------------------------------ weights
def test_set_weights_keeps_the_global_step(strategy):
    model = make_model(strategy=strategy)
    train(model, 2)
    saved = model.get_weights()
    before = values(model.trainable_variables)
    train(model, 2)
    assert not np.allclose(before[0], model.trainable_variables[0].numpy())
    model.set_weights(saved)
    assert model.global_step == 4
    for variable, value in zip(model.trainable_variables, before, strict=True):
        for component in strategy.experimental_local_results(variable.value):
            np.testing.assert_array_equal(component.numpy(), value)
    with pytest.raises(ValueError, match="expecting 4 weights"):
        model.set_weights(saved[:2])


def test_early_stopping_restore_best_weights_keeps_the_global_step():
    class AtEpochEnd(keras.callbacks.Callback):
        weights = {}

        def on_epoch_end(self, epoch, logs=None):
            self.weights[epoch] = values(self.model.trainable_variables)

    model = make_model()
    recorder = AtEpochEnd()
    # An impossible min_delta: epoch 0 stays the best, epoch 1 stops training.
    stopper = keras.callbacks.EarlyStopping(monitor="loss", restore_best_weights=True, patience=1, min_delta=1e9)
    history = model.fit(models.input_fn, epochs=5, steps_per_epoch=3, callbacks=[recorder, stopper], verbose=0)
    assert len(history.history["loss"]) == 2
    assert model.global_step == 6
    for variable, value in zip(model.trainable_variables, recorder.weights[0], strict=True):
        np.testing.assert_array_equal(variable.numpy(), value)


def test_save_and_load_weights_round_trip_with_the_global_step(strategy, tmp_path):
    path = str(tmp_path / "m.weights.h5")
    model = make_model(strategy=strategy)
    train(model, 2)
    model.save_weights(path)
    saved = values(model.weights)
    train(model, 2)
    model.load_weights(path)  # as BackupAndRestore does
    assert model.global_step == 2
    for variable, value in zip(model.weights, saved, strict=True):
        np.testing.assert_array_equal(variable.numpy(), value)

    class LoadAtEpochEnd(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            self.model.load_weights(path)
            self.step = self.model.global_step

    loader = LoadAtEpochEnd()
    model.fit(models.input_fn, epochs=1, steps_per_epoch=2, callbacks=[loader], verbose=0)
    assert loader.step == 2 and model.global_step == 2


# ------------------------------------------------------------------ saving
def test_keras_saving_raises_one_error_naming_the_supported_ways(tmp_path):
    model = make_model()
    train(model, 1)
    supported = r"(?s)model.export\(path\).*save_weights\('x.weights.h5'\).*CheckpointSaver\(model_dir\)"
    for call in (
        lambda: model.save(str(tmp_path / "m.keras")),
        lambda: model.save(str(tmp_path / "m.h5")),
        lambda: keras.saving.save_model(model, str(tmp_path / "direct.keras")),  # through get_config
        model.get_config,
        model.to_json,
        lambda: kte.EstimatorModel.from_config({}),
        lambda: model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=1), keras.callbacks.ModelCheckpoint(str(tmp_path / "c.keras"))], verbose=0),
    ):
        with pytest.raises(NotImplementedError, match=supported):
            call()
    with pytest.raises(ValueError, match=supported):
        model.save(str(tmp_path / "m"))
    assert not {"m.keras", "m.h5", "c.keras", "m"} & set(os.listdir(tmp_path))

    weights = str(tmp_path / "c.weights.h5")
    checkpoint = keras.callbacks.ModelCheckpoint(weights, save_weights_only=True)
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=1), checkpoint], verbose=0)
    assert os.path.exists(weights)


# ------------------------------------------------------------------ export
def test_export_writes_a_serving_saved_model_at_the_path(tmp_path):
    model = make_model()
    with pytest.raises(ValueError, match="nothing is built yet"):
        model.export(str(tmp_path / "unbuilt"), verbose=False)
    train(model, 3)
    with pytest.raises(ValueError, match="only format='tf_saved_model'"):
        model.export(str(tmp_path / "onnx"), format="onnx")
    path = str(tmp_path / "serving")
    model.export(path, verbose=False)  # features from the TRAIN input
    assert sorted(os.listdir(tmp_path)) == ["serving"]
    assert "saved_model.pb" in os.listdir(path)

    predictions = model.predict(models.predict_input_fn, verbose=0)
    features, _ = models.data(64)
    served = tf.saved_model.load(path).signatures["serving_default"](x=tf.constant(features["x"]), id=tf.constant(features["id"]))
    np.testing.assert_allclose(served["y"].numpy(), predictions["y"], rtol=1e-6)
    np.testing.assert_array_equal(served["id"].numpy(), predictions["id"])

    train(model, 1)
    model.export(path, verbose=False)  # replaces it, features from the PREDICT input
    assert sorted(os.listdir(tmp_path)) == ["serving"]
    predictions = model.predict(models.predict_input_fn, verbose=0)
    signature = tf.saved_model.load(path).signatures["serving_default"]
    served = signature(x=tf.constant(features["x"][:5]), id=tf.constant(features["id"][:5]))
    np.testing.assert_allclose(served["y"].numpy(), predictions["y"][:5], rtol=1e-6)


def test_export_with_a_receiver_fn_or_an_input_signature(tmp_path):
    model = make_model()
    train(model, 1)
    expected = model.predict(models.predict_input_fn, verbose=0)["y"][:3]
    x = models.data(3)[0]["x"]

    def receiver_fn():
        rows = tf.compat.v1.placeholder(tf.float32, [None, 4], name="rows")
        return kte.export.ServingInputReceiver({"x": rows, "id": tf.zeros_like(rows[:, 0], tf.int64)}, {"rows": rows})

    model.export(str(tmp_path / "receiver"), verbose=False, serving_input_receiver_fn=receiver_fn)
    served = tf.saved_model.load(str(tmp_path / "receiver")).signatures["serving_default"](rows=tf.constant(x))
    np.testing.assert_allclose(served["y"].numpy(), expected, rtol=1e-6)

    signature = [{"x": tf.TensorSpec([None, 4], tf.float32), "id": tf.TensorSpec([None], tf.int64)}]
    model.export(str(tmp_path / "signature"), verbose=False, input_signature=signature)
    served = tf.saved_model.load(str(tmp_path / "signature")).signatures["serving_default"](
        x=tf.constant(x), id=tf.constant([0, 1, 2], tf.int64)
    )
    np.testing.assert_allclose(served["y"].numpy(), expected, rtol=1e-6)


# ------------------------------------------------------------------ TensorBoard
def test_tensorboard_writes_a_histogram_per_variable_per_epoch(tmp_path):
    model = make_model(models.keras_layers_model)
    board = keras.callbacks.TensorBoard(str(tmp_path), histogram_freq=1)
    model.fit(models.input_fn, epochs=2, steps_per_epoch=2, callbacks=[board], verbose=0)
    (view,) = model.layers
    assert [w.path for w in view.weights] == [w.path for w in model.weights]
    assert len(model.weights) == len(model.variables_by_name) == 15  # nothing counted twice

    accumulator = event_accumulator.EventAccumulator(str(tmp_path / "train"), size_guidance={"tensors": 0})
    accumulator.Reload()
    histograms = {tag[: -len("/histogram")] for tag in accumulator.Tags()["tensors"] if tag.endswith("/histogram")}
    # Keras 3.15 names histograms by `path` (the TF1 name); 3.11 by `name` (`dense__kernel`).
    by_path = histograms == set(model.variables_by_name)
    assert by_path or histograms == {w.name for w in model.weights}
    for name in ("dense/kernel", "dense_1/bias/Adam", "global_step"):
        tag = name if by_path else name.replace("/", "__")
        assert [event.step for event in accumulator.Tensors(f"{tag}/histogram")] == [0, 1]
