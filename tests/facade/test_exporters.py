"""The exporters (facade/exporters.py) and the eval event reader they share (model_dir/eval_events.py) behave as the original's.

The exporter cases of `tests/fixtures/training_cases.py` are compared with what the
original gave (`tests/recorded/training_numbers_generated.py`); then garbage collection,
export names, and the best-so-far read back from event files in both
writers' formats (the original's TF1 simple values, this library's TF2 scalars).
"""

from __future__ import annotations

import logging
import os
import time

import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.facade import exporters
from keras_tpu_estimator.model_dir import eval_events
from tests.fixtures import training_cases as cases
from tests.fixtures.training_checks import (
    api_for,
    assert_same,
    case_names,
    run_default_case,
    run_error_case,
)
from tests.recorded import training_numbers_generated as recorded

ERROR_CASES = case_names(cases.ERRORS, "test_exporters")
DEFAULT_CASES = case_names(cases.DEFAULTS, "test_exporters")


@pytest.mark.parametrize("name", ERROR_CASES)
def test_errors_are_the_originals(name, tmp_path):
    model_dir = run_error_case(name, tmp_path)
    # Nothing half-written; the one case that exports before its failing call keeps that export only.
    assert not list(model_dir.glob("export/*/temp-*"))
    assert len(list(model_dir.glob("export/*/*"))) == (name == "BestExporter.export, an eval_result without loss")


@pytest.mark.parametrize("name", DEFAULT_CASES)
def test_results_are_the_originals(name, tmp_path):
    assert_same(run_default_case(name, tmp_path), recorded.DEFAULTS[name], name)


def test_garbage_collection_keeps_the_newest_versions_and_leaves_other_names(tmp_path):
    for name in ("1000000001", "1000000003", "1000000002", "temp-1000000004", "123", "abcdefghij"):
        (tmp_path / name).mkdir()
    exporters.garbage_collect_exports(str(tmp_path), 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1000000002", "1000000003", "123", "abcdefghij",
                                                         "temp-1000000004"]
    exporters.garbage_collect_exports(str(tmp_path), None)
    assert len(list(tmp_path.iterdir())) == 5


def test_a_directory_that_vanished_before_its_deletion_is_logged(tmp_path, monkeypatch, caplog):
    for name in ("1000000001", "1000000002"):
        (tmp_path / name).mkdir()

    def gone(path):
        raise tf.errors.NotFoundError(None, None, f"{path} is gone")

    monkeypatch.setattr(tf.io.gfile, "rmtree", gone)
    with caplog.at_level(logging.WARNING, logger="keras_tpu_estimator"):
        exporters.garbage_collect_exports(str(tmp_path), 1)
    assert "Can not delete" in caplog.text and "1000000001 is gone" in caplog.text


class ExportRecorder:
    """Stands in for an estimator: `export_saved_model` makes `<base>/<unix time>` as the facade does."""

    model_dir = "/unused"

    def __init__(self):
        self.calls = []

    def export_saved_model(self, export_dir_base, serving_input_receiver_fn, assets_extra=None, as_text=False,
                           checkpoint_path=None):
        path = os.path.join(export_dir_base, str(int(time.time())))
        os.makedirs(path)
        self.calls.append(path)
        return os.fsencode(path)


def test_each_export_is_newer_than_every_kept_one(tmp_path):
    """Exports within a second, one kept: each is named after the newest kept (as the original waited for a
    new second), so the garbage collection keeps the new one, even past an export named in the future."""
    estimator = ExportRecorder()
    exporter = kte.estimator.LatestExporter("latest", lambda: None, exports_to_keep=1)
    future = int(time.time()) + 1
    (tmp_path / str(future)).mkdir()
    paths = [exporter.export(estimator, str(tmp_path), "ckpt", {}, False) for _ in range(3)]
    names = [int(os.path.basename(p)) for p in paths]
    assert future < names[0] < names[1] < names[2]
    assert [p.name for p in tmp_path.iterdir()] == [str(names[2])]


def test_the_best_so_far_is_read_from_this_librarys_and_the_originals_event_files(tmp_path):
    """TPUEstimator.evaluate's TF2 scalars (one event each) and TF1 events of simple values, one per evaluation."""
    api = api_for(tmp_path)
    estimator = cases.estimator_for(api, 1)
    estimator.train(cases.repeated_input_fn, max_steps=2)
    loss = estimator.evaluate(cases.program.input_fn, steps=1)["loss"]
    cases.write_tf1_events(estimator.eval_dir(), [(7, {"loss": 0.01, "mae": 2.0})])
    seen = []

    def lower_loss(best_eval_result, current_eval_result):
        seen.append((dict(best_eval_result), dict(current_eval_result)))
        return current_eval_result["loss"] < best_eval_result["loss"]

    exporter = kte.estimator.BestExporter("best", cases.program.serving_input_receiver_fn_for(api),
                                          compare_fn=lower_loss)
    exporter.export(estimator, str(tmp_path / "export" / "best"), estimator.latest_checkpoint(),
                    {"loss": 0.5, "global_step": 2}, False)  # the first export: always made
    assert seen == [({"loss": pytest.approx(float(loss))}, {"loss": pytest.approx(0.01), "mae": 2.0})]
    exporter.export(estimator, str(tmp_path / "export" / "best"), estimator.latest_checkpoint(),
                    {"loss": 0.6, "global_step": 2}, False)
    assert seen[-1] == ({"loss": 0.5, "global_step": 2}, {"loss": 0.6, "global_step": 2})


def test_tf2_scalars_of_one_step_are_one_evaluation(tmp_path):
    for step in (3, 5):
        with tf.summary.create_file_writer(str(tmp_path)).as_default(step=step):
            tf.summary.scalar("loss", 1.0 / step)
            tf.summary.scalar("accuracy", 0.5)
            tf.summary.scalar("count", tf.constant(4, tf.int64))
            tf.summary.text("checkpoint_path", "model.ckpt")
            tf.summary.histogram("weights", [1.0, 2.0])
    found = list(eval_events.evaluations(str(tmp_path / "events.out.tfevents.*")))
    assert found == [(3, {"loss": pytest.approx(1 / 3), "accuracy": 0.5, "count": 4.0}),
                     (5, {"loss": pytest.approx(0.2), "accuracy": 0.5, "count": 4.0})]


def test_a_corrupt_event_file_ends_its_reading_with_a_warning(tmp_path, caplog):
    cases.write_tf1_events(str(tmp_path), [(1, {"loss": 1.0}), (2, {"loss": 0.5})])
    (path,) = tmp_path.glob("events.out.tfevents.*")
    with open(path, "ab") as events:
        events.write(b"\x10\x00\x00\x00\x00\x00\x00\x00garbage that is no record")
    with caplog.at_level(logging.WARNING, logger="keras_tpu_estimator"):
        found = list(eval_events.evaluations(str(tmp_path / "events.out.tfevents.*")))
    assert found == [(1, {"loss": 1.0}), (2, {"loss": 0.5})]
    assert "Skipping rest of the file due to encountering data corruption error" in caplog.text


def test_exporters_are_the_namespace_classes():
    assert kte.estimator.Exporter is exporters.Exporter
    assert issubclass(kte.estimator.BestExporter, kte.estimator.Exporter)
    assert {"Exporter", "LatestExporter", "BestExporter", "FinalExporter"} <= set(kte.estimator.__all__)
