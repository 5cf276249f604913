"""Count arguments take any integral number on every path, with the original's errors for the rest.

(Also the TPU path's RuntimeError for a plain EstimatorSpec's `eval_metric_ops`.)

Each case of `tests/counts_cases.py` runs here and is compared with
`tests/recorded_counts_numbers.py` (the original, TF 2.15): a result must be
equal, an error of the same type with a message starting with the original's.
A `use_tpu=True` case the original accepted (recorded as `Stop`: its graph
needs a TPU to run) must run here as the original's CPU path ran it.
"""

import types

import numpy as np
import pytest

import keras_tpu_estimator as kte
from tests import counts_cases as cases
from tests import original_api_cases as base
from tests import recorded_counts_numbers as recorded
from tests.test_original_api import is_of_type


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
# Not done: with save_checkpoints_steps=0 (and no save_checkpoints_secs) the original wrote no checkpoint
# at all, so get_variable_value found no model; this library still writes the final one.
NOT_DONE = {"RunConfig.cpu.save_checkpoints_steps=0", "RunConfig.tpu.save_checkpoints_steps=0"}


def expected_for(name: str) -> list:
    if name in DELIBERATE:
        return DELIBERATE[name][1]
    expected = recorded.RESULTS[name]
    if expected[0] == "Stop":  # accepted on the original's TPU path: run as its CPU path ran
        expected = recorded.RESULTS[cases.cpu_twin(name)]
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
    """`tests/recorded_counts_numbers.py` is current: rerun `scripts/record_counts_numbers.py` after editing."""
    assert list(recorded.RESULTS) == list(cases.CASES)


@pytest.mark.parametrize("name", list(cases.CASES))
def test_count_argument_as_the_original(name, tmp_path):
    if name in NOT_DONE:
        pytest.xfail("no checkpoint at all with save_checkpoints_steps=0: not done")
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
