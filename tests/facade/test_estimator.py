"""The TPUEstimator facade: constructor checks, model_dir, train/evaluate/predict semantics."""

import logging
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from tests.fixtures import models


def make(model_dir, k=4, params=None, **config):
    """Adam unless params say otherwise; a checkpoint every k steps (each execution) by default."""
    config.setdefault("save_checkpoints_steps", k)
    return models.make_estimator(model_dir, params=params or {"optimizer": "adam"}, k=k, **config)


def saved_steps(model_dir):
    state = tf.train.get_checkpoint_state(str(model_dir))
    return [int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths]


# ------------------------------------------------------------------ constructor
@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"config": None}, ValueError, "`config` must be provided with type"),
        ({"params": {"context": 1}}, ValueError, "are reserved keys but existed in params"),
        ({"train_batch_size": None}, ValueError, "`train_batch_size` cannot be `None`"),
        ({"train_batch_size": 0}, ValueError, "^train_batch_size must be positive, got 0$"),
        ({"train_batch_size": 1.0}, TypeError, "^train_batch_size must be int, got <class 'float'>$"),
        ({"eval_batch_size": -1}, ValueError, "^eval_batch_size must be positive, got -1$"),
        ({"export_saved_model_api_version": 3}, ValueError, "export_saved_model_api_version should be 1 or 2; got 3"),
        ({"export_saved_model_api_version": "2"}, ValueError, "should be 1 or 2"),
        ({"embedding_config_spec": object()}, ValueError, "not supported"),
        ({"model_dir": "/tmp/a", "config": kte.RunConfig(model_dir="/tmp/b")}, ValueError,
         "^`model_dir` are set both in constructor and `RunConfig`, but with different values"),
        ({"model_fn": lambda features, labels, mode, params, foo: None}, ValueError,
         r"^model_fn \(<function .*\) has following not expected args: \['foo'\]$"),
    ],
)
def test_constructor_errors(kwargs, error, message):
    arguments = {"model_fn": models.get_variable_mlp, "config": kte.RunConfig(), "train_batch_size": 16}
    arguments.update(kwargs)
    with pytest.raises(error, match=message):
        kte.TPUEstimator(**arguments)


def test_both_export_flags_false_fail_at_export_time_as_the_original(tmp_path):
    estimator = kte.TPUEstimator(models.get_variable_mlp, config=kte.RunConfig(model_dir=str(tmp_path)),
                                 train_batch_size=16, export_to_tpu=False, export_to_cpu=False)
    with pytest.raises(ValueError, match="^One of export_to_cpu and export_to_tpu must be true.$"):
        estimator.export_saved_model(str(tmp_path / "export"), lambda: None)


def test_use_tpu_false_skips_batch_checks_and_model_dir_defaults_to_a_temp_dir():
    estimator = kte.TPUEstimator(models.get_variable_mlp, config=kte.RunConfig(), use_tpu=False)
    assert os.path.isdir(estimator.model_dir)
    assert estimator.config.model_dir == estimator.model_dir
    assert kte.TPUEstimator(models.get_variable_mlp, config=kte.RunConfig(), train_batch_size=8,
                            export_saved_model_api_version=2).export_saved_model_api_version is kte.ExportSavedModelApiVersion.V2


# ------------------------------------------------------------------ train
def test_step_sequences_and_checkpoints_follow_the_seed(tmp_path):
    recorder = models.ExecutionRecorder()
    make(tmp_path).train(models.input_fn, steps=10, hooks=[recorder])
    assert recorder.sizes == [4, 4, 2]
    assert saved_steps(tmp_path) == [4, 8, 10]
    # A new estimator on the same model_dir continues from step 10.
    recorder = models.ExecutionRecorder()
    make(tmp_path).train(models.input_fn, steps=10, hooks=[recorder])
    assert recorder.steps[0] == 10 and recorder.sizes == [4, 4, 2]
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-20")
    # max_steps already reached: nothing runs.
    make(tmp_path).train(models.input_fn, max_steps=20, hooks=[recorder])
    assert recorder.steps[-1] == 20


def test_max_steps_from_a_checkpoint_at_3(tmp_path):
    make(tmp_path).train(models.input_fn, steps=3)
    recorder = models.ExecutionRecorder()
    make(tmp_path).train(models.input_fn, max_steps=10, hooks=[recorder])
    assert recorder.steps[0] == 3 and recorder.sizes == [4, 3]


def test_saves_only_at_execution_boundaries_and_at_the_end(tmp_path):
    make(tmp_path, save_checkpoints_steps=5, keep_checkpoint_max=None).train(models.input_fn, steps=20)
    steps = saved_steps(tmp_path)
    assert steps[-1] == 20 and all(step % 4 == 0 for step in steps)
    assert steps == [8, 16, 20]


def test_keep_checkpoint_max(tmp_path):
    make(tmp_path, save_checkpoints_steps=4, keep_checkpoint_max=2).train(models.input_fn, steps=20)
    assert saved_steps(tmp_path) == [16, 20]
    assert len([f for f in os.listdir(tmp_path) if f.endswith(".index")]) == 2


def test_checkpoints_are_keyed_by_tf1_names(tmp_path):
    estimator = make(tmp_path)
    estimator.train(models.input_fn, steps=4)
    names = estimator.get_variable_names()
    assert {"global_step", "mlp/hidden/kernel", "mlp/hidden/kernel/Adam", "beta1_power"} <= set(names)
    assert estimator.get_variable_value("global_step") == 4


def test_train_steps_validation(tmp_path):
    estimator = make(tmp_path)
    with pytest.raises(ValueError, match="one of `steps` or `max_steps` must be set"):
        estimator.train(models.input_fn)
    with pytest.raises(ValueError, match="^Must specify steps > 0, given: 0$"):
        estimator.train(models.input_fn, steps=0)
    with pytest.raises(TypeError, match="^Train steps must be int, got <class 'float'>$"):
        estimator.train(models.input_fn, steps=12.3)
    with pytest.raises(ValueError, match="both steps and max_steps"):
        estimator.train(models.input_fn, steps=1, max_steps=2)
    with pytest.raises(TypeError, match="^Hooks must be a SessionRunHook, given: 3"):
        estimator.train(models.input_fn, steps=1, hooks=[3])
    assert estimator.latest_checkpoint() is None


# ------------------------------------------------------------------ evaluate / predict
def test_evaluate_and_predict_without_a_checkpoint_initialise(tmp_path, caplog):
    """As the original: a log line, then the initial variables (no checkpoint is written)."""
    estimator = make(tmp_path)
    with caplog.at_level(logging.INFO):
        result = estimator.evaluate(models.input_fn, steps=2)
        prediction = next(estimator.predict(models.predict_input_fn))
    assert result["global_step"] == 0 and np.isfinite(result["loss"])
    assert "y" in prediction
    for action in ("evaluate", "predict"):
        assert (
            f"Could not find trained model in model_dir: {tmp_path}, running initialization to {action}."
            in caplog.text
        )
    assert os.listdir(tmp_path) == ["eval"]


def test_evaluate_and_predict_use_the_latest_or_given_checkpoint(tmp_path):
    estimator = make(tmp_path, keep_checkpoint_max=None)
    estimator.train(models.input_fn, steps=12)
    latest = estimator.evaluate(models.input_fn, steps=4)
    assert latest["global_step"] == 12
    early = estimator.evaluate(models.input_fn, steps=4, checkpoint_path=str(tmp_path / "model.ckpt-4"))
    assert early["global_step"] == 4 and early["loss"] > latest["loss"]
    rows = list(estimator.predict(models.predict_input_fn, predict_keys=["id"]))
    assert len(rows) == 64 and set(rows[0]) == {"id"}
    assert [int(r["id"]) for r in rows] == list(range(64))
    batches = list(estimator.predict(models.predict_input_fn, yield_single_examples=False))
    assert [len(b["y"]) for b in batches] == [16] * 4


def test_use_tpu_false_trains_with_the_global_batch(tmp_path):
    seen = []

    def model_fn(features, labels, mode, params):
        seen.append(params["batch_size"])
        return models.get_variable_mlp(features, labels, mode, params)

    estimator = kte.TPUEstimator(model_fn, config=kte.RunConfig(model_dir=str(tmp_path)), use_tpu=False,
                                 train_batch_size=16, eval_batch_size=16)
    estimator.train(models.input_fn, steps=2)
    assert set(seen) == {16}
    assert estimator.evaluate(models.input_fn, steps=1)["global_step"] == 2


def test_tf_random_seed_makes_runs_repeatable(tmp_path):
    results = []
    for run in range(2):
        estimator = make(tmp_path / str(run), tf_random_seed=11)
        estimator.train(models.input_fn, steps=4)
        results.append(estimator.get_variable_value("mlp/hidden/kernel"))
    np.testing.assert_array_equal(results[0], results[1])


def test_nan_loss_stops_training_before_a_checkpoint_is_written(tmp_path):
    def model_fn(features, labels, mode, params):
        spec = models.get_variable_mlp(features, labels, mode, params)
        step = tf.compat.v1.train.get_global_step()
        nan_after_6 = tf.where(step >= 6, tf.constant(np.nan), tf.constant(0.0))
        return spec._replace(loss=spec.loss + nan_after_6)

    config = kte.RunConfig(model_dir=str(tmp_path), save_checkpoints_steps=4,
                           tpu_config=kte.TPUConfig(iterations_per_loop=4))
    estimator = kte.TPUEstimator(model_fn, config=config, params={"optimizer": "sgd"}, train_batch_size=16)
    with pytest.raises(FloatingPointError, match="ending at global step 8.*no checkpoint holds these weights"):
        estimator.train(models.input_fn, steps=12)
    assert saved_steps(tmp_path) == [4]
    assert np.isfinite(estimator.get_variable_value("mlp/hidden/kernel")).all()


@pytest.mark.parametrize("strategy_name", ["default", "mirrored4"])
def test_nan_in_a_variable_names_it_and_keeps_the_last_finite_checkpoint(strategy_name, tmp_path, mirrored):
    def model_fn(features, labels, mode, params):
        spec = models.get_variable_mlp(features, labels, mode, params)
        if mode != kte.ModeKeys.TRAIN:
            return spec
        step = tf.compat.v1.train.get_global_step()
        bias = [v for v in tf.compat.v1.trainable_variables() if v.name.startswith("mlp/hidden/bias")][0]
        # Poisoned by the last step of the execution ending at step 8 (read after its increment), so
        # no later gradient spreads the NaN (whether ReLU's gradient does depends on the CPU's kernels).
        with tf.control_dependencies([spec.train_op]):
            poison = bias.assign(tf.where(tf.equal(step, 8), bias * np.nan, bias))
        return spec._replace(train_op=tf.group(spec.train_op, poison))

    strategy = mirrored if strategy_name == "mirrored4" else tf.distribute.get_strategy()
    model = models.make_model(model_fn, strategy, params={"optimizer": "sgd"}, batch=None, train_batch_size=16)
    saver = kte.CheckpointSaver(str(tmp_path), save_steps=4)
    match = r"variable 'mlp/hidden/bias' holds NaN or Inf.*global step 8 \(1 bad in all"
    with pytest.raises(FloatingPointError, match=match):
        model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=12), saver], verbose=0)
    assert saved_steps(tmp_path) == [4]
    assert np.isfinite(tf.train.load_variable(str(tmp_path), "mlp/hidden/bias")).all()


def test_spec_training_hooks_run_as_callbacks(tmp_path):
    class Count(keras.callbacks.Callback):
        executions = 0

        def on_train_batch_end(self, batch, logs=None):
            Count.executions += 1

    def model_fn(features, labels, mode, params):
        spec = models.get_variable_mlp(features, labels, mode, params)
        return spec._replace(training_hooks=(Count(),))

    config = kte.RunConfig(model_dir=str(tmp_path), tpu_config=kte.TPUConfig(iterations_per_loop=4))
    kte.TPUEstimator(model_fn, config=config, train_batch_size=16).train(models.input_fn, steps=12)
    assert Count.executions == 3


def test_eval_on_tpu_false_evaluates_with_the_global_batch(tmp_path):
    seen = []

    def model_fn(features, labels, mode, params):
        if mode == kte.ModeKeys.EVAL:
            seen.append((params["batch_size"], params["use_tpu"]))
        return models.get_variable_mlp(features, labels, mode, params)

    config = kte.RunConfig(model_dir=str(tmp_path))
    estimator = kte.TPUEstimator(model_fn, config=config, train_batch_size=16, eval_batch_size=16, eval_on_tpu=False)
    estimator.train(models.input_fn, steps=2)
    estimator.evaluate(models.input_fn, steps=1)
    assert set(seen) == {(16, False)}


def test_save_checkpoints_secs_saves_at_execution_boundaries(tmp_path):
    make(tmp_path, save_checkpoints_steps=None, save_checkpoints_secs=1e-9,
         keep_checkpoint_max=None).train(models.input_fn, steps=12)
    assert saved_steps(tmp_path) == [4, 8, 12]
    assert kte.checkpoint_step(tf.train.latest_checkpoint(str(tmp_path))) == 12


@pytest.mark.parametrize("name, text", [
    ("loss", 'Metric with name "loss" is not allowed, because Estimator already defines a default metric'),
    ("global_step", "Metric with name `global_step` is not allowed, because Estimator already defines"),
])
def test_a_metric_named_like_a_default_one_is_the_originals_error(name, text, tmp_path):
    """The original's ValueError (Estimator._evaluate_build_graph), not a silent overwrite."""

    def model_fn(features, labels, mode, params):
        spec = models.get_variable_mlp(features, labels, mode, params)
        if mode != kte.ModeKeys.EVAL:
            return spec
        metric_fn = lambda y, p: {name: tf.compat.v1.metrics.mean_absolute_error(y, p)}  # noqa: E731
        return spec._replace(eval_metrics=(metric_fn, [labels, spec.loss * tf.ones_like(labels)]))

    config = kte.RunConfig(model_dir=str(tmp_path))
    estimator = kte.TPUEstimator(model_fn, config=config, params={"optimizer": "sgd"},
                                 train_batch_size=16, eval_batch_size=16)
    with pytest.raises(ValueError, match=re.escape(text)):
        estimator.evaluate(models.input_fn, steps=1)
