"""`tf.estimator.experimental`'s hooks (facade/early_stopping.py) behave as the original's.

The hook cases of `tests/fixtures/training_cases.py` are compared with what the
original gave (`tests/recorded/training_numbers_generated.py`; two deliberate
differences, pinned below); then what the original's TPU path did (a hook
run per loop of `iterations_per_loop` steps), the in-memory evaluator under
`MirroredStrategy`, and the hooks' own checks.
"""

from __future__ import annotations

import types

import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from tests.fixtures import models
from tests.fixtures import training_cases as cases
from tests.fixtures.training_checks import (
    api_for,
    assert_same,
    case_names,
    run_default_case,
    run_error_case,
)
from tests.recorded import training_numbers_generated as recorded

# The original failed here by accident of its implementation: its hooks added a variable
# (signal_early_stopping/STOP) that a checkpoint written without the hook lacks. These hooks add none.
NO_STOP_VARIABLE = "stop_if_lower_hook resuming a checkpoint written without one"
# The in-memory evaluation runs through estimator.evaluate on a snapshot checkpoint, which writes a
# checkpoint_path text summary per evaluation (the original wrote none); the metrics are the original's.
IN_MEMORY = "InMemoryEvaluatorHook, every 2 runs"

ERROR_CASES = [n for n in case_names(cases.ERRORS, "test_early_stopping") if n != NO_STOP_VARIABLE]
DEFAULT_CASES = [n for n in case_names(cases.DEFAULTS, "test_early_stopping") if n != IN_MEMORY]


@pytest.mark.parametrize("name", ERROR_CASES)
def test_errors_are_the_originals(name, tmp_path):
    run_error_case(name, tmp_path)


@pytest.mark.parametrize("name", DEFAULT_CASES)
def test_results_are_the_originals(name, tmp_path):
    assert_same(run_default_case(name, tmp_path), recorded.DEFAULTS[name], name)


def test_a_hook_added_when_resuming_works_where_the_originals_restore_failed(tmp_path):
    assert recorded.ERRORS[NO_STOP_VARIABLE][0] == "tf.errors.NotFoundError"
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    stopped_at = cases.ERRORS[NO_STOP_VARIABLE](api_for(model_dir))
    assert stopped_at == recorded.DEFAULTS["stop_if_lower_hook with evaluations on disk"]  # as with the variable
    assert "signal_early_stopping/STOP" not in [n for n, _ in tf.train.list_variables(str(model_dir))]


def test_the_in_memory_evaluator_gives_the_originals_evaluations(tmp_path):
    ours, original = run_default_case(IN_MEMORY, tmp_path), recorded.DEFAULTS[IN_MEMORY]
    assert_same(ours["evaluations"], original["evaluations"])
    assert original["checkpoint_path"] == 0 and ours["checkpoint_path"] == len(ours["evaluations"])
    assert not list((tmp_path / "model").glob("**/keras_tpu_estimator_in_memory_*"))


# --- the strategy path: one run per execution, as the original's TPU loop ---------------------------

def strategy_estimator(model_dir, k, strategy=None):
    return models.make_estimator(model_dir, strategy=strategy, k=k, save_checkpoints_steps=k)


def test_on_the_strategy_path_a_stop_comes_after_the_execution(tmp_path):
    estimator = strategy_estimator(tmp_path, 3)
    estimator.train(models.input_fn, max_steps=3)
    estimator.evaluate(models.input_fn, steps=1)
    checks = []

    def should_stop():
        checks.append(int(tf.train.load_variable(str(tmp_path), "global_step")))
        return len(checks) == 2

    hook = kte.estimator.experimental.make_early_stopping_hook(estimator, should_stop, run_every_secs=None,
                                                              run_every_steps=4)
    estimator.train(models.input_fn, max_steps=30, hooks=[hook])
    # Runs begin at 3, 6, 9: the hook checks after the runs that began at 3 and (4 steps on) 9, when the
    # saver has just written 6 and 12; the second check stops training there.
    assert hook.stopped_at == 9 and int(estimator.get_variable_value("global_step")) == 12
    assert checks == [6, 12]
    threshold = kte.estimator.experimental.stop_if_lower_hook(estimator, "loss", 1e9)
    estimator.train(models.input_fn, max_steps=30, hooks=[threshold])  # the first run checks
    assert int(estimator.get_variable_value("global_step")) == 15


@pytest.mark.parametrize("where", ["default", "mirrored4"])
def test_the_in_memory_evaluator_counts_executions_and_evaluates_the_current_weights(where, tmp_path, mirrored):
    strategy = mirrored if where == "mirrored4" else None
    estimator = strategy_estimator(tmp_path, 2, strategy)
    hook = kte.estimator.experimental.InMemoryEvaluatorHook(estimator, models.input_fn, steps=2, name="mem",
                                                           every_n_iter=2)
    estimator.train(models.input_fn, max_steps=10, hooks=[hook])
    evaluated = list(models.summary_values(estimator.eval_dir("mem")))
    losses = {step: float(tf.make_ndarray(v.tensor)) for step, v in evaluated if v.tag == "loss"}
    assert sorted({step for step, v in evaluated if v.tag == "loss"}) == [0, 4, 8, 10]
    # The evaluation at step 10 saw the weights that the final checkpoint holds.
    assert losses[10] == pytest.approx(float(estimator.evaluate(models.input_fn, steps=2)["loss"]), rel=1e-6)


# --- the hooks' own checks --------------------------------------------------------------------------

def stand_in(train_distribute):
    config = types.SimpleNamespace(train_distribute=train_distribute, is_chief=True)
    return types.SimpleNamespace(evaluate=None, eval_dir=lambda: "/unused", model_dir="/unused", config=config)


def test_a_time_based_check_is_refused_under_a_multi_worker_train_distribute():
    class MultiWorkerMirroredStrategy:  # stands in for the class the original checked by name
        pass

    estimator = stand_in(MultiWorkerMirroredStrategy())
    with pytest.raises(ValueError, match="run_every_secs should not be set when using MultiWorkerMirroredStrategy"):
        kte.estimator.experimental.stop_if_no_decrease_hook(estimator, "loss", 100)
    assert kte.estimator.experimental.stop_if_no_decrease_hook(estimator, "loss", 100, run_every_secs=None,
                                                                 run_every_steps=10) is not None
    kte.estimator.experimental.stop_if_no_decrease_hook(stand_in(tf.distribute.get_strategy()), "loss", 100)


def test_hooks_are_keras_callbacks_that_the_facade_and_fit_take(tmp_path):
    estimator = strategy_estimator(tmp_path, 2)
    hook = kte.estimator.experimental.make_early_stopping_hook(estimator, lambda: True)
    model = models.make_model(k=2)
    model.fit(models.input_fn, steps_per_epoch=6, epochs=1, callbacks=[hook], verbose=0)
    assert model.global_step == 2 and hook.stopped_at == 0


def test_stop_at_checkpoint_step_is_a_stop_at_step_hook_on_every_worker(tmp_path):
    estimator = strategy_estimator(tmp_path, 2)
    worker = types.SimpleNamespace(config=types.SimpleNamespace(is_chief=False), model_dir=str(tmp_path))
    for owner in (estimator, worker):
        hook = kte.estimator.experimental.make_stop_at_checkpoint_step_hook(owner, last_step=5)
        assert isinstance(hook, tf.compat.v1.train.StopAtStepHook)
    with pytest.raises(ValueError, match="last_step must be specified"):
        kte.estimator.experimental.make_stop_at_checkpoint_step_hook(worker, last_step=None)
