"""TF1 session hooks as public TPU programs wrote them, pinned against the original on TF 2.15.

The cases are `tests/fixtures/hook_programs.py`'s, recorded by `scripts/record_hooks_numbers.py`
(`TPUEstimator(use_tpu=False)`). On the CPU path (`use_tpu=False`) hooks run at every step and
see what the original's saw. On the strategy path (`use_tpu=True`) they run once per execution
(`iterations_per_loop=2`): the state as the execution began, and the loss and in-step tensors of
its last step, on replica 0.
"""

import copy
import glob
import os
import types

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from tests.fixtures import hook_programs
from tests.fixtures.same_results import assert_same
from tests.recorded.hooks_numbers_generated import RESULTS


def run(name, model_dir, use_tpu=False, strategy=None):
    api = types.SimpleNamespace(tpu=kte, model_dir=str(model_dir), use_tpu=use_tpu, strategy=strategy)
    return hook_programs.CASES[name](api)


def profiles(output):
    """`{run directory name: number of planes}` of the XSpace profiles under output/plugins/profile."""
    found = {}
    for path in glob.glob(os.path.join(output, "plugins", "profile", "*", "*.xplane.pb")):
        with open(path, "rb") as f:
            data = f.read()
        assert data
        try:  # TensorBoard's profile plugin reads this proto
            from tensorflow.tsl.profiler.protobuf import xplane_pb2
        except ImportError:
            found[os.path.basename(os.path.dirname(path))] = None
            continue
        space = xplane_pb2.XSpace()
        space.ParseFromString(data)
        found[os.path.basename(os.path.dirname(path))] = len(space.planes)
    return found


def replica_0_mae(w, steps):
    """The batch MAE of replica 0 (the first 2 of 8 rows) in the given 0-based eval steps."""
    x, y = hook_programs.data()
    w = np.array(w, np.float32)
    return [float(np.mean(np.abs(x[8 * s:8 * s + 2] @ w - y[8 * s:8 * s + 2]))) for s in steps]


# ------------------------------------------------------------------------------- CPU path
def test_logging_tensor_hook_fetches_the_global_step_variables_loss_and_step_tensors(tmp_path):
    expected = copy.deepcopy(RESULTS["logging_tensors"])
    # The original read the step variable while its run incremented it (one recording showed
    # 0, 1, 3, 3; another 0, 1, 2, 3): here the value as the run began, as its reads of w show.
    for index, entry in enumerate(expected["spec"]):
        assert entry["step"] in (index, index + 1)
        entry["step"] = index
    assert_same(run("logging_tensors", tmp_path), expected)


@pytest.mark.parametrize("name", ["eval_logging", "prediction_logging", "variables_in_begin", "summary_saver_in_evaluation", "load_ema_hook"])
def test_the_cpu_path_gives_the_originals_hook_values(tmp_path, name):
    assert_same(run(name, tmp_path), RESULTS[name])


def test_profiler_hook_writes_a_profile_of_each_step_it_names(tmp_path):
    assert_same(run("profiler", tmp_path), RESULTS["profiler"])  # timeline-2, 4, 6.json
    found = profiles(tmp_path / "profile")
    steps = sorted(int(name.rsplit("_step_", 1)[1]) for name in found)
    assert steps == [2, 4, 6]
    assert all(planes is None or planes > 0 for planes in found.values())


def test_load_ema_hook_changes_only_that_evaluation(tmp_path):
    result = run("load_ema_hook", tmp_path)
    assert result["ema"] != result["raw"] and result["raw_again"] == result["raw"]


def test_restore_variables_assigns_the_models_variables_by_name(tmp_path):
    class Restore(tf.compat.v1.train.SessionRunHook):
        def __init__(self, names):
            self.names = names

        def after_create_session(self, session, coord):
            session.restore_variables(tf.train.latest_checkpoint(str(tmp_path)), self.names)

    hook_programs.API["tpu"] = kte
    est = kte.TPUEstimator(hook_programs.ema_model_fn, use_tpu=False, train_batch_size=8, eval_batch_size=8,
                           config=kte.RunConfig(model_dir=str(tmp_path)))
    est.train(hook_programs.input_fn, steps=6)
    loss = est.evaluate(hook_programs.input_fn, steps=2, hooks=[Restore({"w": "w/ExponentialMovingAverage"})])["loss"]
    assert_same(float(loss), RESULTS["load_ema_hook"]["ema"])
    with pytest.raises(ValueError, match="no variable 'v'"):
        est.evaluate(hook_programs.input_fn, steps=1, hooks=[Restore({"v": "w"})])
    with pytest.raises(tf.errors.NotFoundError, match="nothing"):
        est.evaluate(hook_programs.input_fn, steps=1, hooks=[Restore({"w": "nothing"})])


# -------------------------------------------------------------------------- strategy path
def test_the_strategy_path_runs_hooks_per_execution_on_the_last_steps_values(tmp_path, strategy):
    spec = RESULTS["logging_tensors"]["spec"]
    logged = run("logging_tensors", tmp_path / "log", True, strategy)
    expected = [dict(spec[1], step=0, w=spec[0]["w"]), dict(spec[3], step=2, w=spec[2]["w"])]
    assert_same(logged, {"spec": expected, "by_name": [{"lr": spec[1]["learning_rate"]}]})

    evaluated = run("eval_logging", tmp_path / "eval", True, strategy)
    original = RESULTS["eval_logging"]
    # steps=3: one loop of 3 steps as on a TPU (_SetEvalIterationsHook), so one log of step 3's values
    mae = [e["mae"] for e in original["logged"][2:]]
    if strategy.num_replicas_in_sync > 1:
        mae = replica_0_mae(spec[2]["w"], [2])
    expected = [dict(e, mae=m) for e, m in zip(original["logged"][2:], mae, strict=True)]
    assert_same(evaluated, dict(original, logged=expected))

    summaries = run("summary_saver_in_evaluation", tmp_path / "summary", True, strategy)
    assert_same(summaries, {"events": [[2, "batch_mae_1", round(m, 5)] for m in mae]})


def test_prediction_hooks_on_the_strategy_path_see_the_last_batch_of_each_execution(tmp_path, strategy):
    original = RESULTS["prediction_logging"]
    logged = [original["logged"][b] for b in (1, 3, 4)]  # 5 batches in executions of 2, 2, 1
    if strategy.num_replicas_in_sync > 1:  # replica 0: the first 2 of each batch's 8 rows
        x = hook_programs.data()[0]
        logged = [dict(e, feature_sum=float(x[8 * b:8 * b + 2].sum())) for e, b in zip(logged, (1, 3, 4), strict=True)]
    assert_same(run("prediction_logging", tmp_path, True, strategy), dict(original, logged=logged))


def test_a_reused_model_refuses_a_new_step_tensor_after_its_step_was_traced():
    model = kte.EstimatorModel(hook_programs.model_fn, params={"hooks": hook_programs._no_hooks}, train_batch_size=8)
    hook_programs.API["tpu"] = kte
    model.fit(hook_programs.input_fn, callbacks=[kte.StopAtStep(steps=1)], verbose=0)
    hook = tf.compat.v1.train.LoggingTensorHook(["learning_rate:0"], every_n_iter=1)
    with pytest.raises(ValueError, match="already traced without it"):
        model.fit(hook_programs.input_fn, callbacks=[hook, kte.StopAtStep(steps=2)], verbose=0)


@pytest.mark.parametrize("name", ["variables_in_begin", "load_ema_hook"])
def test_the_strategy_path_gives_the_originals_variables(tmp_path, strategy, name):
    assert_same(run(name, tmp_path, True, strategy), RESULTS[name])


def test_profiler_hook_on_the_strategy_path_profiles_the_executions_it_names(tmp_path, strategy):
    # Executions of 2 steps: the hook's own timer names the one ending at step 4, as on a TPU.
    assert run("profiler", tmp_path, True, strategy) == {"timelines": ["timeline-4.json"]}
    found = profiles(tmp_path / "profile")
    assert [name.rsplit("_step_", 1)[1] for name in found] == ["4"]
    assert all(planes is None or planes > 0 for planes in found.values())


def test_the_hooks_of_a_call_share_one_graph_and_their_own_variables_live_in_its_session(tmp_path):
    class Maker(tf.compat.v1.train.SessionRunHook):
        def begin(self):
            tf.identity(tf.compat.v1.train.get_global_step(), name="made_by_another_hook")

    class Counter(tf.compat.v1.train.SessionRunHook):
        def begin(self):
            self.made = tf.compat.v1.get_default_graph().get_tensor_by_name("made_by_another_hook:0")
            self.runs = tf.compat.v1.get_variable("runs", [], tf.int64, tf.compat.v1.zeros_initializer(),
                                                  trainable=False, use_resource=True)
            self.count = self.runs.assign_add(1)

        def before_run(self, run_context):
            return tf.compat.v1.train.SessionRunArgs({"count": self.count, "step": self.made})

        def after_run(self, run_context, run_values):
            self.seen = run_values.results

    counter = Counter()
    est = hook_programs.estimator(types.SimpleNamespace(tpu=kte, model_dir=str(tmp_path), use_tpu=False,
                                                        strategy=None), hook_programs._no_hooks)
    est.train(hook_programs.input_fn, steps=3, hooks=[Maker(), counter])
    assert counter.seen == {"count": 3, "step": 2}  # its own variable counted 3 runs; the step as run 3 began


def test_the_keras_face_fetches_the_models_variables_and_an_eager_global_step():
    from tests.fixtures import models

    logged = []
    step = tf.compat.v1.train.get_or_create_global_step()  # made eagerly, outside model_fn: found by name
    model = models.make_model(train_batch_size=16)
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=1)], verbose=0)
    w = model.variables_by_name["mlp/out/kernel"]  # a keras.Variable
    hook = tf.compat.v1.train.LoggingTensorHook(
        {"step": step, "w": w}, every_n_iter=1, formatter=lambda v: logged.append((int(v["step"]), v["w"].copy())) or "")
    before = w.numpy()
    model.fit(models.input_fn, callbacks=[hook, kte.StopAtStep(steps=5)], verbose=0)
    assert [s for s, _ in logged] == [1, 5]  # executions of 4 then 1 (k=4), as each began
    np.testing.assert_array_equal(logged[0][1], before)
