"""Every session-hook method runs in its hook graph, as TF1 ran hooks in the Estimator's graph.

`tests/fixtures/hook_graph_programs.py`'s `GraphProbe` records, in `begin`, `after_create_session`,
`before_run`, `after_run` and `end`: `get_global_step()`, the default graph (the one of `begin`),
the variable collections, `session.run(get_global_step())` and `session.run` of a None fetch.

- CPU path (`use_tpu=False`): everything equals the original's on TF 2.15
  (`tests/recorded/hook_graph_numbers_generated.py`), a hook run per step: `[1, 2, ..., 10]`.
- Strategy path (`use_tpu=True`, default and MirroredStrategy(4)): the same graph facts and
  errors; a hook run per execution of `iterations_per_loop=4` steps, the step read after each
  (`TPU_*` below).
"""

import types

import pytest

import keras_tpu_estimator as kte
from tests.fixtures import hook_graph_programs
from tests.recorded.hook_graph_numbers_generated import RESULTS

# The original on a TPU (its hooks ran around the session.run of each loop of iterations_per_loop
# steps, `_TPUStopAtStepHook` sizing the last loop; the hook reads the step after the loop):
# train(steps=10) at iterations_per_loop=4 ran loops of 4, 4, 2 ...
TPU_TRAIN_STEPS = [4, 8, 10]
# ... and after 3 earlier steps, loops of 4, 4, 2 from step 3.
TPU_RESUMED_STEPS = [7, 11, 13]
# evaluate(steps=3) ran its 3 steps in one loop (the evaluation loop took the steps, not
# iterations_per_loop); every run of an evaluation reads the evaluated checkpoint's step, 5.
TPU_EVALUATION_STEPS = [5]
# evaluate(steps=6) at iterations_per_loop=4: one loop of 6 (_SetEvalIterationsHook), after which
# _increase_eval_step_op added 6 - 1 to the Estimator's own +1: a hook reads eval_step 0, then 6.
TPU_EVAL_STEP = {"calls": ["before_run", "after_run"], "values": {"before_run": [0], "after_run": [6], "end": 6}}

NONE_ERROR = ["TypeError", 'Argument `fetch` = None has invalid type "NoneType". Cannot be None']


def run(name, model_dir, use_tpu=False, strategy=None):
    api = types.SimpleNamespace(tpu=kte, model_dir=str(model_dir), use_tpu=use_tpu, strategy=strategy)
    return hook_graph_programs.CASES[name](api)


def per_execution(original, steps):
    """`original`'s record with one `before_run`/`after_run` per execution, each reading `steps`."""
    calls = ["begin", "after_create_session"] + ["before_run", "after_run"] * len(steps) + ["end"]
    return dict(original, calls=calls, steps=dict(original["steps"], after_run=steps))


# ------------------------------------------------------------------------------- CPU path
def test_the_recorded_original_read_the_step_at_every_run_and_refused_none():
    assert RESULTS["train"]["passed"]["steps"] == {"after_create_session": 0, "after_run": list(range(1, 11)), "end": 10}
    assert RESULTS["train_resumed"]["steps"]["after_run"] == list(range(4, 14))
    assert RESULTS["evaluation"]["passed"]["steps"]["after_run"] == [5, 5, 5]
    none_fetches = RESULTS["train"]["passed"]["none_fetches"]
    assert none_fetches == {"none": NONE_ERROR, "list": NONE_ERROR, "nested": NONE_ERROR, "empty": ["no error", "[]"]}
    for method, facts in RESULTS["train"]["passed"]["facts"].items():  # one view in every method
        assert len(facts) == 1 and facts[0]["global_step"] == "global_step" and facts[0]["graph_of_begin"], method


@pytest.mark.parametrize("name", ["train", "train_resumed", "evaluation", "evaluation_eval_step", "prediction"])
def test_the_cpu_path_gives_the_originals_graph_in_every_method(tmp_path, name):
    assert run(name, tmp_path) == RESULTS[name]


# -------------------------------------------------------------------------- strategy path
def test_training_hooks_read_the_step_after_each_execution(tmp_path, strategy):
    original = RESULTS["train"]
    recorded = run("train", tmp_path / "train", True, strategy)
    for probe in ("passed", "spec"):
        assert recorded[probe] == per_execution(original[probe], TPU_TRAIN_STEPS), probe
    resumed = run("train_resumed", tmp_path / "resumed", True, strategy)
    assert resumed == per_execution(RESULTS["train_resumed"], TPU_RESUMED_STEPS)


def test_evaluation_hooks_read_the_evaluated_checkpoints_step(tmp_path, strategy):
    original = RESULTS["evaluation"]
    recorded = run("evaluation", tmp_path, True, strategy)
    assert recorded["global_step"] == original["global_step"] == 5
    for probe in ("passed", "spec"):
        assert recorded[probe] == per_execution(original[probe], TPU_EVALUATION_STEPS), probe


def test_evaluation_hooks_see_eval_step_after_one_loop_of_all_steps(tmp_path, strategy):
    original = RESULTS["evaluation_eval_step"]
    assert original["values"]["after_run"] == [1, 2, 3, 4, 5, 6]  # the CPU path: one step per run
    recorded = run("evaluation_eval_step", tmp_path, True, strategy)
    assert recorded == dict(original, **TPU_EVAL_STEP)  # the same local int64 `eval_step:0`


def test_prediction_hooks_read_the_checkpoints_step_in_every_execution(tmp_path, strategy):
    original = RESULTS["prediction"]
    recorded = run("prediction", tmp_path, True, strategy)
    assert recorded["predictions"] == original["predictions"] == 40
    for probe in ("passed", "spec"):  # 5 batches in executions of 4 and 1
        assert recorded[probe] == per_execution(original[probe], [5, 5]), probe


# ------------------------------------------------------------------------ None fetches
def test_a_none_fetch_in_before_run_raises_tf1s_error_and_sessionrunargs_none_gives_none(tmp_path):
    import tensorflow as tf

    class AsksNone(tf.compat.v1.train.SessionRunHook):
        def before_run(self, run_context):
            return tf.compat.v1.train.SessionRunArgs({"step": tf.compat.v1.train.get_global_step(), "x": None})

    class AsksNothing(tf.compat.v1.train.SessionRunHook):
        def before_run(self, run_context):
            return tf.compat.v1.train.SessionRunArgs(None)

        def after_run(self, run_context, run_values):
            self.results = run_values.results

    est = hook_graph_programs._estimator(types.SimpleNamespace(tpu=kte, model_dir=str(tmp_path), use_tpu=True,
                                                               strategy=None))
    nothing = AsksNothing()
    est.train(hook_graph_programs.hook_programs.input_fn, steps=2, hooks=[nothing])
    assert nothing.results is None
    with pytest.raises(TypeError, match="Cannot be None"):
        est.train(hook_graph_programs.hook_programs.input_fn, steps=2, hooks=[AsksNone()])


# ------------------------------------------------------------------- a call that failed
def test_a_call_that_failed_leaves_no_hook_graph_to_the_next_call_of_the_same_model():
    import tensorflow as tf

    from tests.fixtures import models

    class Fails(tf.compat.v1.train.SessionRunHook):
        def begin(self):
            self.runs = tf.compat.v1.get_variable("runs", [], tf.int64, tf.compat.v1.zeros_initializer(),
                                                  trainable=False, use_resource=True)

        def after_run(self, run_context, run_values):
            raise RuntimeError("failed in after_run")

    model = models.make_model(train_batch_size=16)
    with pytest.raises(RuntimeError, match="failed in after_run"):
        model.fit(models.input_fn, callbacks=[Fails(), kte.StopAtStep(steps=2)], verbose=0)
    again, probe = Fails(), hook_graph_programs.GraphProbe()  # a TF1 train() built a new graph
    with pytest.raises(RuntimeError, match="failed in after_run"):  # not "Variable runs already exists"
        model.fit(models.input_fn, callbacks=[again, probe, kte.StopAtStep(steps=2)], verbose=0)
    assert "runs" in probe.facts["begin"][0]["global_variables"]
    assert probe.facts["begin"][0]["global_variables"].count("runs") == 1
    model.fit(models.input_fn, callbacks=[probe, kte.StopAtStep(steps=2)], verbose=0)
    assert "runs" not in probe.facts["begin"][-1]["global_variables"]


@pytest.mark.parametrize("use_tpu", [False, True])
def test_saving_listeners_run_in_the_hook_graph_as_in_the_originals(tmp_path, strategy, use_tpu):
    original = RESULTS["saving_listener"]
    recorded = run("saving_listener", tmp_path, use_tpu, strategy)
    assert recorded["facts"] == original["facts"]  # get_global_step(), the variables, session.graph: every method
    # the original also saved (and called the listeners) at step 0: no checkpoint precedes the first step here
    assert original["steps"]["before_save"][0] == [0, 0]
    expected = {key: value[1:] if key != "end" else value for key, value in original["steps"].items()}
    assert recorded["steps"] == expected == {"before_save": [[5, 5], [10, 10]], "after_save": [[5, 5], [10, 10]],
                                             "end": [10, 10]}
