"""model_dir interoperability: TF1 Saver checkpoints, init_from_checkpoint, warm start, summaries."""

import logging

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.callbacks.restore import RestoreOrWarmStart
from keras_tpu_estimator.model_dir.checkpoints import write_checkpoint
from tests.facade.test_estimator import make
from tests.fixtures import models

HIDDEN = np.full([4, 16], 0.25, np.float32)


def write_tf1_checkpoint(path, step=5, hidden=HIDDEN, extra=None):
    """Writes a checkpoint the TF1 way: a graph, a Session and tf.compat.v1.train.Saver."""
    graph = tf.Graph()
    with graph.as_default():
        with tf.compat.v1.variable_scope("mlp"):
            tf.compat.v1.get_variable("hidden/kernel", initializer=hidden)
            tf.compat.v1.get_variable("hidden/bias", initializer=np.zeros([16], np.float32))
            tf.compat.v1.get_variable("out/kernel", initializer=np.ones([16, 1], np.float32))
        for name, value in (extra or {}).items():
            tf.compat.v1.get_variable(name, initializer=value)
        step_var = tf.compat.v1.train.get_or_create_global_step()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(step_var.assign(step))
            return saver.save(session, str(path), global_step=step)


def test_a_tf1_saver_checkpoint_in_model_dir_is_continued(tmp_path):
    write_tf1_checkpoint(tmp_path / "model.ckpt", step=5)
    estimator = make(tmp_path, params={"optimizer": "sgd"})
    assert estimator.evaluate(models.input_fn, steps=1)["global_step"] == 5
    estimator.train(models.input_fn, max_steps=9)
    assert estimator.get_variable_value("global_step") == 9
    assert not np.allclose(estimator.get_variable_value("mlp/hidden/kernel"), HIDDEN)


def test_a_checkpoint_missing_variables_is_a_clear_error(tmp_path):
    write_tf1_checkpoint(tmp_path / "model.ckpt", step=5)
    estimator = make(tmp_path, params={"optimizer": "adam"})  # Adam slots are not in it
    with pytest.raises(ValueError, match=r"has no value for .* variable\(s\) of the model: \['beta1_power'"):
        estimator.train(models.input_fn, steps=1)
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-5")


def test_init_from_checkpoint_in_scaffold_fn_sets_weights_exactly(tmp_path, strategy):
    pretrained = write_tf1_checkpoint(tmp_path / "pretrained" / "model.ckpt", extra={"other/w": np.ones([2], np.float32)})
    scaffold_calls = []

    def model_fn(features, labels, mode, params):
        spec = models.get_variable_mlp(features, labels, mode, params)

        def scaffold_fn():
            scaffold_calls.append(mode)
            tf.compat.v1.train.init_from_checkpoint(pretrained, {"mlp/hidden/": "mlp/hidden/"})
            return tf.compat.v1.train.Scaffold()

        return spec._replace(scaffold_fn=scaffold_fn)

    model = kte.EstimatorModel(model_fn, strategy=strategy, train_batch_size=16, eval_batch_size=16)
    model.evaluate(models.input_fn, steps=1, verbose=0)
    assert scaffold_calls == ["eval"]
    np.testing.assert_array_equal(model.variables_by_name["mlp/hidden/kernel"].numpy(), HIDDEN)
    assert not np.allclose(model.variables_by_name["mlp/out/kernel"].numpy(), 1.0)


def test_scaffold_fn_returning_none_is_the_seed_error(strategy):
    def model_fn(features, labels, mode, params):
        return models.get_variable_mlp(features, labels, mode, params)._replace(scaffold_fn=lambda: None)

    model = kte.EstimatorModel(model_fn, strategy=strategy, eval_batch_size=16)
    with pytest.raises(ValueError, match="scaffold_fn returns None, which is not allowed"):
        model.evaluate(models.input_fn, steps=1, verbose=0)


def test_warm_start_by_regex_warms_only_matching_variables(tmp_path):
    pretrained = write_tf1_checkpoint(tmp_path / "pretrained" / "model.ckpt")
    settings = kte.WarmStartSettings(pretrained, vars_to_warm_start="mlp/hidden/.*")
    config = kte.RunConfig(model_dir=str(tmp_path / "run"), tpu_config=kte.TPUConfig(iterations_per_loop=1))
    estimator = kte.TPUEstimator(models.get_variable_mlp, config=config, params={"optimizer": "sgd"},
                                 train_batch_size=16, warm_start_from=settings)
    seen = {}

    class Capture(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if not seen:
                seen.update({n: v.numpy().copy() for n, v in self.model.variables_by_name.items()})

    estimator.train(models.input_fn, steps=1, hooks=[Capture()])
    np.testing.assert_array_equal(seen["mlp/hidden/kernel"], HIDDEN)
    np.testing.assert_array_equal(seen["mlp/hidden/bias"], np.zeros([16]))
    assert not np.allclose(seen["mlp/out/kernel"], 1.0)
    assert seen["global_step"] == 0


def test_warm_start_with_renamed_variables(tmp_path):
    pretrained = write_tf1_checkpoint(tmp_path / "model.ckpt", extra={"old/kernel": np.full([16, 1], 3.0, np.float32)})
    settings = kte.WarmStartSettings(pretrained, vars_to_warm_start=["mlp/out/kernel"],
                                     var_name_to_prev_var_name={"mlp/out/kernel": "old/kernel"})
    model = kte.EstimatorModel(models.get_variable_mlp, eval_batch_size=16)
    model.evaluate(models.input_fn, steps=1, verbose=0)
    assert settings.apply(model.variables_by_name) == ["mlp/out/kernel"]
    np.testing.assert_array_equal(model.variables_by_name["mlp/out/kernel"].numpy(), 3.0)


def _scalars(logdir):
    steps = {}
    for step, value in models.summary_values(logdir):
        steps.setdefault(value.tag, []).append(step)
    return steps


def test_tensorboard_events_at_the_true_global_step(tmp_path):
    make(tmp_path, save_summary_steps=8).train(models.input_fn, steps=20)
    scalars = _scalars(tmp_path)
    # Executions end at 4, 8, ..., 20; a write needs 8 steps since the last one.
    assert scalars["loss"] == [8, 16]
    assert scalars["global_step/sec"] == [8, 16] and scalars["examples/sec"] == [8, 16]
    make(tmp_path).evaluate(models.input_fn, steps=2, name="holdout")
    assert _scalars(tmp_path / "eval_holdout")["loss"] == [20]


def test_examples_per_sec_is_global_batch_times_steps_per_sec(tmp_path):
    make(tmp_path, save_summary_steps=4).train(models.input_fn, steps=8)
    rates = {}
    for step, value in models.summary_values(tmp_path):
        rates.setdefault(step, {})[value.tag] = float(tf.make_ndarray(value.tensor))
    assert sorted(rates) == [4, 8]
    for tags in rates.values():
        assert tags["examples/sec"] == pytest.approx(16 * tags["global_step/sec"], rel=1e-5)


def test_step_log_lines_every_log_step_count_steps(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="keras_tpu_estimator")
    make(tmp_path, log_step_count_steps=10).train(models.input_fn, steps=24)
    steps = [int(r.getMessage().split("step = ")[1].split()[0]) for r in caplog.records if "step = " in r.getMessage()]
    # ceil(10 / 4) = 3 executions between lines: steps 12 and 24.
    assert steps == [12, 24]


def scaffold_model_fn(**parts):
    def model_fn(features, labels, mode, params):
        scaffold = tf.compat.v1.train.Scaffold(**parts)
        return models.get_variable_mlp(features, labels, mode, params)._replace(scaffold_fn=lambda: scaffold)

    return model_fn


def test_scaffold_initialization_is_accepted_and_unused_parts_named(caplog):
    # init_fn runs when a call restores nothing (tests/tf1/test_scaffold_init.py).
    model = kte.EstimatorModel(scaffold_model_fn(init_fn=lambda scaffold, session: None), eval_batch_size=32)
    model.evaluate(models.input_fn, steps=1, verbose=0)
    model = kte.EstimatorModel(scaffold_model_fn(ready_op=tf.constant([], tf.string)), eval_batch_size=32)
    with caplog.at_level(logging.WARNING):
        model.evaluate(models.input_fn, steps=1, verbose=0)
    assert "sets ['ready_op'], which keras_tpu_estimator does not use" in caplog.text


def test_keras_optimizer_variables_saved_by_version_0_1_still_restore(tmp_path):
    # 0.1 saved `keras_optimizer/<optimizer name>/<slot named after mlp__hidden__kernel>`.
    def make():
        model = kte.EstimatorModel(models.get_variable_mlp, params={"optimizer": "keras"}, use_tpu=False,
                                   train_batch_size=16, optimizer=keras.optimizers.SGD(0.1, momentum=0.9))
        model.trace(models.input_fn)
        return model

    trained = make()
    trained.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=3)], verbose=0)
    variables = trained.checkpoint_variables
    slot = "keras_optimizer/mlp_hidden_kernel_momentum"  # no optimizer name: Keras numbers those
    assert slot in variables
    old_names = {
        name.replace("keras_optimizer/", "keras_optimizer/sgd_7/").replace("mlp_hidden_kernel", "mlp__hidden__kernel"): v
        for name, v in variables.items()
    }
    prefix = write_checkpoint(str(tmp_path / "model.ckpt-3"), old_names)
    restored = make()
    callback = RestoreOrWarmStart(prefix, None)
    callback.set_model(restored)
    callback.on_train_begin()
    np.testing.assert_array_equal(restored.checkpoint_variables[slot].numpy(), variables[slot].numpy())
    assert np.abs(variables[slot].numpy()).sum() > 0

    # A second model in the same process (its optimizer is `sgd_2` to Keras) resumes its own checkpoint.
    again = make()
    (tmp_path / "again").mkdir()
    write_checkpoint(str(tmp_path / "again" / "model.ckpt-3"), variables)
    callback = RestoreOrWarmStart(str(tmp_path / "again" / "model.ckpt-3"), None)
    callback.set_model(again)
    callback.on_train_begin()
    np.testing.assert_array_equal(again.checkpoint_variables[slot].numpy(), variables[slot].numpy())
