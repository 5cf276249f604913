"""Runs `tests/training_cases.py` on this library and compares with `tests/recorded_training_numbers.py`."""

from __future__ import annotations

import json
import types

import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.facade import early_stopping
from tests import recorded_training_numbers as recorded
from tests import training_cases as cases
from tests.same_results import assert_same  # noqa: F401  (the test files take it from here)

# Which test file runs which cases, by the start of their names.
PREFIXES = {
    "test_training": ("TrainSpec", "EvalSpec", "train_and_evaluate"),
    "test_exporters": ("LatestExporter", "BestExporter", "FinalExporter", "Exporter"),
    "test_early_stopping": ("make_early_stopping_hook", "stop_if", "InMemoryEvaluatorHook",
                            "make_stop_at_checkpoint_step_hook", "read_eval_metrics"),
}


def case_names(table: dict, test_file: str) -> list[str]:
    """The names in `table` (ERRORS or DEFAULTS) that `test_file` runs."""
    return [name for name in table if name.startswith(PREFIXES[test_file])]


def api_for(model_dir) -> types.SimpleNamespace:
    """The cases' `api` on this library."""
    return types.SimpleNamespace(estimator=kte.estimator, early_stopping=early_stopping, model_dir=str(model_dir))


def run_error_case(name, tmp_path):
    """Runs ERRORS[name]: the original's exception type and message first (help may follow); its model_dir."""
    kind, message = recorded.ERRORS[name]
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    with pytest.raises(Exception) as raised:
        cases.ERRORS[name](api_for(model_dir))
    error = raised.value
    expected = getattr(tf.errors, kind.removeprefix("tf.errors."), None) if kind.startswith("tf.errors.") else None
    assert isinstance(error, expected) if expected else type(error).__name__ == kind, (type(error), kind)
    assert cases.normalise(str(error), str(model_dir)).startswith(message), (str(error), message)
    return model_dir


def run_default_case(name, tmp_path):
    """Runs DEFAULTS[name] here; its value as JSON would hold it."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    return json.loads(json.dumps(cases.DEFAULTS[name](api_for(model_dir))))
