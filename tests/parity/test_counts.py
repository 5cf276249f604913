"""Count arguments take any integral number on every path, with the original's errors for the rest.

(Also the TPU path's RuntimeError for a plain EstimatorSpec's `eval_metric_ops`.)

Each case of `tests/fixtures/counts_cases.py` runs here and is compared with
`tests/recorded/counts_numbers_generated.py` (the original, TF 2.15): a result must be
equal, an error of the same type with a message starting with the original's.
A `use_tpu=True` case the original accepted (recorded as `Stop`: its graph
needs a TPU to run) must run here as the original's CPU path ran it.
"""

import types

import numpy as np
import pytest

import keras_tpu_estimator as kte
from tests.fixtures import counts_cases as cases
from tests.fixtures import original_api_cases as base
from tests.parity.test_original_api import is_of_type
from tests.recorded import counts_numbers_generated as recorded


def api_for(model_dir, strategy=None) -> types.SimpleNamespace:
    return types.SimpleNamespace(estimator=kte.estimator, model_dir=str(model_dir), on_original=False,
                                 strategy=strategy)


# Where this library deliberately differs (README: "Where the API deliberately differs"):
# case -> (why, [type, message start] this library raises instead).
_AT_ONCE = "refused when the estimator is built, naming the fix, instead of failing in input_fn's Dataset.batch"
DELIBERATE = {
    f"constructor.cpu.{field}={label}": (_AT_ONCE, ["ValueError", f"`{field}` must be a positive integer"])
    for field in ("train_batch_size", "eval_batch_size", "predict_batch_size")
    for label in ("2.5", "'2'", "0")
}
# With save_checkpoints_steps=0 (and no save_checkpoints_secs) the original wrote no checkpoint at all,
# so the next call found no model ("Could not find trained model"); this library still writes the final
# one at the end of train() (README: Checkpoint timing), so the case reads the trained step, 3.
_FINAL_CHECKPOINT = "the final checkpoint is written at the end of train() even without a save schedule"
DELIBERATE.update({
    f"RunConfig.{path}.save_checkpoints_steps=0": (_FINAL_CHECKPOINT, ["ok", 3]) for path in ("cpu", "tpu")
})


# On a TPU the original ran an evaluation's steps in one loop (`_SetEvalIterationsHook`): these
# cases' evaluation hook ran once, where the CPU path ran it once per step.
ONE_LOOP_EVALUATIONS = ("evaluate.tpu.", "constructor.tpu.eval_batch_size")


def expected_for(name: str) -> list:
    if name in DELIBERATE:
        return DELIBERATE[name][1]
    expected = recorded.RESULTS[name]
    if expected[0] == "Stop":  # accepted on the original's TPU path: run as its CPU path ran
        expected = recorded.RESULTS[cases.cpu_twin(name)]
        if expected[0] == "ok" and name.startswith(ONE_LOOP_EVALUATIONS):
            expected = ["ok", 1]
    return expected


def check(name: str, api: types.SimpleNamespace) -> None:
    expected = expected_for(name)
    try:
        got = ["ok", cases.CASES[name](api)]
    except Exception as error:
        message = base.normalise(str(error), api.model_dir)
        assert is_of_type(error, expected[0]), f"{name}: expected {expected}, got {type(error).__name__}: {message}"
        assert message.startswith(expected[1]), f"{name}: expected {expected}, got {message!r}"
        return
    assert got == expected, name


def test_the_recorded_results_are_current():
    """`tests/recorded/counts_numbers_generated.py` is current: rerun `scripts/record_counts_numbers.py` after editing."""
    assert list(recorded.RESULTS) == list(cases.CASES)


@pytest.mark.parametrize("name", list(cases.CASES))
def test_count_argument_as_the_original(name, tmp_path):
    check(name, api_for(tmp_path))


NUMPY_CASES = [n for n in cases.CASES if ".tpu." in n and "np.int" in n]
STRATEGY_CASES = [*NUMPY_CASES, "evaluate.tpu.EstimatorSpec(eval_metric_ops=...)"]


def test_deliberate_differences_are_errors_of_the_original():
    """Each deliberate difference is a case the original refused too (later, with another error)."""
    assert all(recorded.RESULTS[name][0] != "ok" for name in DELIBERATE)


@pytest.mark.parametrize("name", STRATEGY_CASES)
def test_on_a_strategy(name, tmp_path, strategy):
    """NumPy counts (tensorflow/tpu's resnet_main resumes so), and the original's RuntimeError for a plain
    EstimatorSpec's eval_metric_ops, under the default strategy and MirroredStrategy."""
    check(name, api_for(tmp_path, strategy))


def test_resnet_main_resume_with_numpy_max_steps(tmp_path, strategy):
    """resnet_main.py: `train(max_steps=np.int64(...))` after an earlier train, as on every resume."""
    api = api_for(tmp_path, strategy)
    estimator = cases._estimator(api, True, tpu_fields={"iterations_per_loop": np.int64(2)})
    estimator.train(cases.input_fn, max_steps=np.int64(2))
    estimator.train(cases.input_fn, max_steps=np.int64(3))
    assert int(estimator.get_variable_value("global_step")) == 3


def _trained_step(model_dir) -> int:
    import tensorflow as tf

    return int(tf.train.load_checkpoint(str(model_dir)).get_tensor("global_step"))


def test_the_keras_face_takes_numpy_counts(tmp_path, strategy):
    """`EstimatorModel`: NumPy batch sizes, steps_per_execution, `StopAtStep` and `evaluate(steps=)`."""
    api = api_for(tmp_path)
    config = cases._config(api, False)
    with strategy.scope():
        model = kte.EstimatorModel(
            base.model_fn_for(api), config=config, strategy=strategy, train_batch_size=np.int64(4),
            eval_batch_size=np.int32(4), predict_batch_size=np.int64(4), steps_per_execution=np.int64(2),
        )
    stop = kte.StopAtStep(max_steps=np.int64(3))
    assert type(stop.max_steps) is int
    model.fit(cases.input_fn, callbacks=[stop, kte.StopAtStep(steps=np.int32(5))])
    assert int(model.global_step) == 3
    model.evaluate(cases.input_fn, steps=np.int64(2))
    assert len(model.predict(base.predict_input_fn)["y"]) == 4


def test_the_plain_estimator_takes_numpy_counts(tmp_path):
    """`tf.compat.v1.estimator.Estimator`'s train(steps/max_steps) and evaluate(steps) with NumPy ints."""

    def model_fn(features, labels, mode):
        api = api_for(tmp_path)
        spec = base.model_fn_for(api)(features, labels, mode, {})
        return kte.estimator.EstimatorSpec(mode, loss=spec.loss, train_op=spec.train_op,
                                           predictions=spec.predictions)

    config = kte.estimator.RunConfig(model_dir=str(tmp_path), save_checkpoints_steps=np.int64(2),
                                     save_summary_steps=np.int32(1), log_step_count_steps=np.int64(1))
    estimator = kte.estimator.Estimator(model_fn, config=config)

    def input_fn():
        return cases.input_fn({"batch_size": 2})

    estimator.train(input_fn, max_steps=np.int64(3))
    estimator.train(input_fn, steps=np.int32(2))
    assert _trained_step(tmp_path) == 5
    hook = cases._CountRuns()
    estimator.evaluate(input_fn, steps=np.int64(2), hooks=[hook])
    assert hook.runs == 2


def test_train_and_evaluate_specs_take_numpy_counts(tmp_path, strategy):
    """`TrainSpec(max_steps=np.int64)` / `EvalSpec(steps=np.int64)` on the strategy path (use_tpu=True)."""
    api = api_for(tmp_path, strategy)
    estimator = cases._estimator(api, True, run_fields={"save_checkpoints_steps": np.int64(3)})
    train_spec = kte.estimator.TrainSpec(cases.input_fn, max_steps=np.int64(3))
    eval_spec = kte.estimator.EvalSpec(cases.input_fn, steps=np.int64(2), throttle_secs=0)
    kte.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
    assert _trained_step(tmp_path) == 3


def test_counts_reach_keras_and_tf_as_python_ints():
    """What the library hands on is a plain int, whatever integral type came in."""
    assert type(kte.StopAtStep(steps=np.int64(12)).steps) is int
    config = kte.TPUConfig(iterations_per_loop=np.int32(4), experimental_host_call_every_n_steps=np.int64(2))
    assert type(config.experimental_host_call_every_n_steps) is int
    assert config.parsed_iterations_per_loop == (4, "count")
    assert type(config.parsed_iterations_per_loop.value) is int
    with pytest.raises(ValueError, match="must be a positive integer"):
        kte.StopAtStep(steps=True)  # a bool is no count for the Keras callback (train(steps=True) is 1 step)
