"""Session hooks run as callbacks, once per execution, as TPUEstimator ran them."""

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from tests.fixtures import models
from tests.fixtures.models import make_estimator, make_model


class Recorder(tf.compat.v1.train.SessionRunHook):
    """Records its calls, the global step fetched for each run (as the run began, TF1's timing)
    and the step read in `after_run` (`steps`); may request a stop at a step."""

    def __init__(self, stop_at=None):
        self.calls, self.fetched, self.steps, self.stop_at = [], [], [], stop_at

    def begin(self):
        self.calls.append("begin")
        self.step = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session, coord):
        self.calls.append(("after_create_session", int(session.run(self.step))))

    def before_run(self, run_context):
        self.calls.append("before_run")
        return tf.compat.v1.train.SessionRunArgs(self.step)

    def after_run(self, run_context, run_values):
        self.calls.append("after_run")
        self.fetched.append(int(run_values.results))
        self.steps.append(int(run_context.session.run(self.step)))
        if self.stop_at is not None and self.steps[-1] >= self.stop_at:
            run_context.request_stop()

    def end(self, session):
        self.calls.append(("end", int(session.run("global_step:0"))))


def test_a_hook_runs_around_each_execution(tmp_path, strategy):
    hook = Recorder()
    make_estimator(tmp_path, strategy=strategy).train(models.input_fn, steps=10, hooks=[hook])
    assert hook.steps == [4, 8, 10]
    assert hook.fetched == [0, 4, 8]
    assert hook.calls == ["begin", ("after_create_session", 0)] + ["before_run", "after_run"] * 3 + [("end", 10)]


def test_request_stop_ends_training_after_the_execution_with_a_checkpoint(tmp_path, strategy):
    estimator = make_estimator(tmp_path, strategy=strategy)
    estimator.train(models.input_fn, steps=100, hooks=[Recorder(stop_at=8)])
    assert kte.checkpoint_step(estimator.latest_checkpoint()) == 8


def test_stop_at_step_hook_stops_exactly(tmp_path, strategy):
    hook = Recorder()
    estimator = make_estimator(tmp_path, strategy=strategy)
    estimator.train(models.input_fn, steps=100, hooks=[tf.compat.v1.train.StopAtStepHook(last_step=6), hook])
    assert hook.steps == [4, 6]  # executions of 4, then 2
    estimator.train(models.input_fn, steps=100, hooks=[tf.compat.v1.train.StopAtStepHook(num_steps=3)])
    assert kte.checkpoint_step(estimator.latest_checkpoint()) == 9


def loss_named_model_fn(features, labels, mode, params):
    spec = models.get_variable_mlp(features, labels, mode, params)
    if spec.loss is None:
        return spec
    loss = tf.identity(spec.loss, name="my_loss")
    return spec._replace(loss=loss)


def test_logging_tensor_hook_logs_the_real_losses_by_name(tmp_path, strategy):
    logged = []
    hook = tf.compat.v1.train.LoggingTensorHook(
        {"loss": "my_loss:0", "step": "global_step:0"}, every_n_iter=1,
        formatter=lambda values: logged.append((int(values["step"]), float(values["loss"]))) or "",
    )
    config = kte.RunConfig(model_dir=str(tmp_path), train_distribute=strategy, tf_random_seed=7,
                           tpu_config=kte.TPUConfig(iterations_per_loop=4))
    estimator = kte.TPUEstimator(loss_named_model_fn, config=config, train_batch_size=16)
    estimator.train(models.input_fn, steps=8, hooks=[hook])
    assert [step for step, _ in logged] == [0, 4]  # the step as each run began, as TF1 fetched it
    # The loss of each execution's last step (steps 4 and 8): a model trained one step at a time gives it.
    for step, loss in logged:
        reference = make_model(loss_named_model_fn, strategy, k=1, seed=7, batch=None, train_batch_size=16)
        history = reference.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=step + 4)], verbose=0)
        assert reference.last_step_loss == pytest.approx(loss, rel=1e-5)
        del history


def test_hooks_in_the_spec_run_in_their_modes(tmp_path, strategy):
    seen = {"train": Recorder(), "eval": Recorder(), "infer": Recorder()}

    def model_fn(features, labels, mode, params):
        spec = models.get_variable_mlp(features, labels, mode, params)
        field = {"train": "training_hooks", "eval": "evaluation_hooks", "infer": "prediction_hooks"}[mode]
        return spec._replace(**{field: (seen[mode],)})

    estimator = make_estimator(tmp_path, model_fn, strategy, k=2)
    estimator.train(models.input_fn, steps=4)
    estimator.evaluate(models.input_fn, steps=3)
    list(estimator.predict(models.predict_input_fn))
    assert seen["train"].steps == [2, 4]
    assert seen["eval"].steps == seen["eval"].fetched == [4]
    assert seen["eval"].calls.count("before_run") == 1  # one loop of the 3 steps, as on a TPU
    assert seen["infer"].calls[-1] == ("end", 4) and seen["infer"].calls.count("after_run") >= 1


class Listener(tf.compat.v1.train.CheckpointSaverListener):
    def __init__(self):
        self.calls = []

    def begin(self):
        self.calls.append("begin")

    def before_save(self, session, global_step_value):
        self.calls.append(("before_save", global_step_value, int(session.run("global_step:0"))))

    def after_save(self, session, global_step_value):
        self.calls.append(("after_save", global_step_value))

    def end(self, session, global_step_value):
        self.calls.append(("end", global_step_value))


def test_saving_listeners_see_every_save(tmp_path, strategy):
    listener = Listener()
    estimator = make_estimator(tmp_path, strategy=strategy, save_checkpoints_steps=4)
    estimator.train(models.input_fn, steps=10, saving_listeners=[listener])
    saves = [call[1] for call in listener.calls if call[0] == "after_save"]
    assert saves == [4, 8, 10]
    assert listener.calls[0] == "begin" and listener.calls[-1] == ("end", 10)
    assert ("before_save", 8, 8) in listener.calls


def test_a_checkpoint_saver_hook_replaces_the_saver_as_in_the_estimator(tmp_path):
    listener = Listener()
    hook = tf.compat.v1.train.CheckpointSaverHook(str(tmp_path / "elsewhere"), save_steps=2, listeners=[listener])
    make_estimator(tmp_path / "model").train(models.input_fn, steps=4, hooks=[hook])
    assert [c[1] for c in listener.calls if c[0] == "after_save"] == [4]  # K=4: the boundary after step 4
    assert kte.checkpoint_step(tf.train.latest_checkpoint(str(tmp_path / "elsewhere"))) == 4


def test_the_keras_face_takes_hooks_as_callbacks(strategy):
    hook = Recorder()
    model = make_model(strategy=strategy, batch=None, train_batch_size=16)
    model.fit(models.input_fn, callbacks=[hook, kte.StopAtStep(steps=6)], verbose=0)
    assert hook.steps == [4, 6]


def test_the_cpu_path_runs_a_hook_at_every_step_as_the_original(tmp_path):
    hook = Recorder()
    estimator = kte.TPUEstimator(models.get_variable_mlp, use_tpu=False, train_batch_size=16,
                                 config=kte.RunConfig(model_dir=str(tmp_path),
                                                      tpu_config=kte.TPUConfig(iterations_per_loop=4)))
    estimator.train(models.input_fn, steps=5, hooks=[hook])
    assert hook.steps == [1, 2, 3, 4, 5]
    estimator.train(models.input_fn, steps=4)  # without hooks: executions of 4 again
    assert kte.checkpoint_step(estimator.latest_checkpoint()) == 9


def test_what_cannot_run_is_a_clear_error(tmp_path):
    unknown = tf.compat.v1.train.LoggingTensorHook({"x": "no_such_tensor:0"}, every_n_iter=1)
    with pytest.raises(ValueError, match="no_such_tensor"):
        make_estimator(tmp_path).train(models.input_fn, steps=1, hooks=[unknown])
    model = kte.EstimatorModel(models.get_variable_mlp, train_batch_size=16)
    saver_hook = tf.compat.v1.train.CheckpointSaverHook(str(tmp_path / "c"), save_steps=1)
    with pytest.raises(NotImplementedError, match="CheckpointSaverHook.*saving_listeners"):
        model.fit(models.input_fn, callbacks=[saver_hook, kte.StopAtStep(steps=1)], verbose=0)


def test_a_hook_built_in_model_fn_fetches_its_loss_and_tensors_of_the_last_step(tmp_path):
    logged = []

    def model_fn(features, labels, mode, params):
        spec = models.get_variable_mlp(features, labels, mode, params)
        tensors = {"loss": spec.loss} if params["ok"] else {"x": features["x"] * 2.0}
        hook = tf.compat.v1.train.LoggingTensorHook(tensors, every_n_iter=1, formatter=lambda v: logged.append(v) or "")
        return spec._replace(training_hooks=(hook,))

    def estimator(ok):
        config = kte.RunConfig(model_dir=str(tmp_path / str(ok)), tpu_config=kte.TPUConfig(iterations_per_loop=2))
        return kte.TPUEstimator(model_fn, config=config, params={"ok": ok}, train_batch_size=16)

    fetching = estimator(True)
    assert fetching.train(models.input_fn, steps=4) is fetching  # train returns the estimator, as the original
    assert len(logged) == 2 and all(np.isfinite(v["loss"]) for v in logged)
    logged.clear()
    estimator(False).train(models.input_fn, steps=4)  # an in-step tensor: the execution's last step's
    x = models.data()[0]["x"]
    assert len(logged) == 2
    np.testing.assert_array_equal(logged[0]["x"], x[16:32] * 2.0)
    np.testing.assert_array_equal(logged[1]["x"], x[48:64] * 2.0)


def test_step_counter_hook_writes_global_step_per_sec(tmp_path, strategy):
    output = tmp_path / "counter"
    hook = tf.compat.v1.train.StepCounterHook(every_n_steps=4, output_dir=str(output))
    make_estimator(tmp_path / "model", strategy=strategy).train(models.input_fn, steps=12, hooks=[hook])
    tf.compat.v1.summary.FileWriterCache.get(str(output)).flush()  # the hook's writer, as TF1 flushed it
    steps = [step for step, value in models.summary_values(output) if value.tag == "global_step/sec"]
    assert steps and all(step in (8, 12) for step in steps)


class EvalStepRecorder(tf.compat.v1.train.SessionRunHook):
    """Records its before_run/after_run calls and `eval_step` (the `EVAL_STEP` collection's variable) in after_run."""

    def __init__(self):
        self.calls, self.eval_steps = [], []

    def begin(self):
        (self.eval_step,) = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.EVAL_STEP)

    def before_run(self, run_context):
        self.calls.append("before_run")

    def after_run(self, run_context, run_values):
        self.calls.append("after_run")
        self.eval_steps.append(int(run_context.session.run(self.eval_step)))


def test_evaluate_runs_its_steps_in_one_loop_as_on_a_tpu(tmp_path, strategy):
    # The original on a TPU: _SetEvalIterationsHook(steps) set the loop's trip count to `steps`, so
    # one loop of 6 steps whatever iterations_per_loop (4); _increase_eval_step_op added steps - 1
    # and the Estimator's own update 1: eval_step is 6 in after_run.
    estimator = make_estimator(tmp_path, strategy=strategy, k=4)
    estimator.train(models.input_fn, steps=4)
    hook = EvalStepRecorder()
    results = estimator.evaluate(models.input_fn, steps=6, hooks=[hook])
    assert hook.calls == ["before_run", "after_run"]
    assert hook.eval_steps == [6]
    assert hook.eval_step.name == "eval_step:0" and hook.eval_step.dtype == tf.int64
    assert hook.eval_step in hook.eval_step.graph.get_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES)
    # the loss is still the mean over the 6 steps: the CPU path (one step per run) agrees
    cpu = kte.TPUEstimator(models.get_variable_mlp, config=estimator.config, use_tpu=False,
                           train_batch_size=16, eval_batch_size=16)
    cpu_hook = EvalStepRecorder()
    cpu_results = cpu.evaluate(models.input_fn, steps=6, hooks=[cpu_hook])
    assert results["loss"] == pytest.approx(cpu_results["loss"], rel=1e-5)
    assert cpu_hook.eval_steps == [1, 2, 3, 4, 5, 6]  # the original's CPU path: eval_step per session.run
