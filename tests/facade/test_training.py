"""`train_and_evaluate`, `TrainSpec` and `EvalSpec` (facade/training.py) behave as the original's.

The cases of `tests/fixtures/training_cases.py` run here on `keras_tpu_estimator.estimator`
and are compared with what the original (TF 2.15) gave for the same code
(`tests/recorded/training_numbers_generated.py`): the exception type and message (this
library may add help after it), return values, evaluated steps and losses,
export directories. Then what only this library can show: the throttle's
timing on a fake clock, the distributed task types, and an evaluator task
next to real trainer processes (marked `multiworker`).
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import time
import types

import keras
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from tests.fixtures import training_cases as cases
from tests.fixtures.training_checks import (
    PREFIXES,
    api_for,
    assert_same,
    case_names,
    run_default_case,
    run_error_case,
)
from tests.recorded import training_numbers_generated as recorded

ROOT = pathlib.Path(__file__).resolve().parents[2]


ERROR_CASES = case_names(cases.ERRORS, "test_training")
DEFAULT_CASES = case_names(cases.DEFAULTS, "test_training")


@pytest.mark.parametrize("name", ERROR_CASES)
def test_errors_are_the_originals(name, tmp_path):
    model_dir = run_error_case(name, tmp_path)
    assert not [p for p in model_dir.iterdir() if p.name.startswith(("model.ckpt", "eval", "export"))]


@pytest.mark.parametrize("name", DEFAULT_CASES)
def test_results_are_the_originals(name, tmp_path):
    assert_same(run_default_case(name, tmp_path), recorded.DEFAULTS[name], name)


def test_every_case_was_recorded():
    assert sorted(cases.ERRORS) == sorted(recorded.ERRORS)
    assert sorted(cases.DEFAULTS) == sorted(recorded.DEFAULTS)
    for table in (cases.ERRORS, cases.DEFAULTS):  # each case runs in exactly one test file
        runs = [name for test_file in PREFIXES for name in case_names(table, test_file)]
        assert sorted(runs) == sorted(table)


def test_specs_take_keras_callbacks_as_hooks():
    callback = keras.callbacks.Callback()
    assert kte.estimator.TrainSpec(cases.program.input_fn, hooks=[callback]).hooks == (callback,)
    assert kte.estimator.EvalSpec(cases.program.input_fn, hooks=[callback]).hooks == (callback,)
    with pytest.raises(TypeError, match="keras.callbacks.Callback objects"):
        kte.estimator.TrainSpec(cases.program.input_fn, hooks=[object()])


# --- the throttle, on a fake clock and a duck-typed estimator ---------------------------------------

class FakeEstimator:
    """An estimator with the public methods train_and_evaluate uses; `train` saves at `saves` at `times`."""

    def __init__(self, model_dir, saves, times, final_step=None):
        self.model_dir, self.saves, self.times, self.final_step = str(model_dir), saves, times, final_step
        self.config = kte.RunConfig(model_dir=str(model_dir), save_checkpoints_steps=1)
        self.evaluated, self.exported, self._latest = [], [], None

    def train(self, input_fn, hooks=None, steps=None, max_steps=None, saving_listeners=None):
        for listener in saving_listeners:
            listener.begin()
        for step, now in zip(self.saves, self.times, strict=True):
            self.now = now
            self._latest = f"{self.model_dir}/model.ckpt-{step}"
            for listener in saving_listeners:
                listener.after_save(None, step)
        for listener in saving_listeners:
            listener.end(None, self.final_step or self.saves[-1])
        return self

    def latest_checkpoint(self):
        return self._latest

    def evaluate(self, input_fn, steps=None, hooks=None, checkpoint_path=None, name=None):
        step = int(checkpoint_path.rsplit("-", 1)[1])
        self.evaluated.append(step)
        return {"loss": 1.0 / step, "global_step": step}

    def export_saved_model(self, export_dir_base, serving_input_receiver_fn, assets_extra=None, as_text=False,
                           checkpoint_path=None):
        self.exported.append((os.path.basename(export_dir_base), checkpoint_path.rsplit("-", 1)[1]))
        return b"/exported"


def test_throttle_secs_skips_saves_within_the_throttle_and_evaluates_the_last_step(tmp_path, monkeypatch):
    estimator = FakeEstimator(tmp_path, saves=[2, 4, 6, 8, 10], times=[100.0, 105.0, 111.0, 112.0, 113.0])
    monkeypatch.setattr(time, "time", lambda: estimator.now if hasattr(estimator, "now") else 0.0)
    exporter = kte.estimator.LatestExporter("latest", lambda: None)
    result = kte.estimator.train_and_evaluate(
        estimator, kte.estimator.TrainSpec(lambda: None, max_steps=10),
        kte.estimator.EvalSpec(lambda: None, exporters=[exporter], throttle_secs=10))
    # 2 (the first save), 6 (11 s after 2), and 10 at the end (the last step, throttled at its save).
    assert estimator.evaluated == [2, 6, 10]
    assert estimator.exported == [("latest", "2"), ("latest", "6"), ("latest", "10")]
    assert result == ({"loss": 0.1, "global_step": 10}, [b"/exported"])


def test_the_last_save_is_not_evaluated_twice(tmp_path, monkeypatch):
    estimator = FakeEstimator(tmp_path, saves=[3, 6], times=[1.0, 2.0])
    monkeypatch.setattr(time, "time", lambda: estimator.now)
    kte.estimator.train_and_evaluate(estimator, kte.estimator.TrainSpec(lambda: None, max_steps=6),
                                     kte.estimator.EvalSpec(lambda: None, throttle_secs=0))
    assert estimator.evaluated == [3, 6]


def test_training_that_ends_without_a_new_checkpoint_is_the_originals_runtime_error(tmp_path, monkeypatch):
    # The saver's end() reports a step whose checkpoint was already evaluated under another name.
    estimator = FakeEstimator(tmp_path, saves=[3], times=[1.0], final_step=4)
    monkeypatch.setattr(time, "time", lambda: estimator.now)
    with pytest.raises(RuntimeError, match="There was no new checkpoint after the training. Eval status: no new"):
        kte.estimator.train_and_evaluate(estimator, kte.estimator.TrainSpec(lambda: None, max_steps=4),
                                         kte.estimator.EvalSpec(lambda: None, throttle_secs=0))


def test_a_duck_typed_estimator_missing_methods_names_them(tmp_path):
    class Partial:
        config = kte.RunConfig()
        model_dir = str(tmp_path)

        def train(self, *args, **kwargs):
            return self

    with pytest.raises(TypeError, match=r"Got: <class .*Partial'>. .*evaluate, export_saved_model, latest_checkpoint"):
        kte.estimator.train_and_evaluate(Partial(), kte.estimator.TrainSpec(lambda: None),
                                         kte.estimator.EvalSpec(lambda: None))


# --- distributed task types -------------------------------------------------------------------------

def estimator_under(tf_config, model_dir, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    return cases.estimator_for(api_for(model_dir), 2)


def specs():
    return (kte.estimator.TrainSpec(cases.repeated_input_fn, max_steps=4),
            kte.estimator.EvalSpec(cases.program.input_fn, steps=1, throttle_secs=0))


@pytest.mark.parametrize("task,cluster", [
    ("ps", {"chief": ["localhost:1"], "ps": ["localhost:2"]}),
    ("chief", {"chief": ["localhost:1"], "ps": ["localhost:2"]}),
])
def test_parameter_servers_are_refused_naming_multi_worker_mirrored_strategy(task, cluster, tmp_path, monkeypatch):
    estimator = estimator_under({"cluster": cluster, "task": {"type": task, "index": 0}}, tmp_path, monkeypatch)
    with pytest.raises(ValueError, match="parameter servers.*MultiWorkerMirroredStrategy.*'chief' and 'worker'"):
        kte.estimator.train_and_evaluate(estimator, *specs())
    assert not list(tmp_path.iterdir())


def test_a_master_alone_trains_and_evaluates_as_locally_and_returns_none(tmp_path, monkeypatch):
    cluster = {"master": ["localhost:1"]}
    estimator = estimator_under({"cluster": cluster, "task": {"type": "master", "index": 0}}, tmp_path, monkeypatch)
    assert kte.estimator.train_and_evaluate(estimator, *specs()) is None
    assert [step for step, _ in cases.eval_steps(estimator.eval_dir())] == [2, 4]


def test_a_master_with_workers_is_refused_naming_the_chief_and_evaluator(tmp_path, monkeypatch):
    cluster = {"master": ["localhost:1"], "worker": ["localhost:2"]}
    estimator = estimator_under({"cluster": cluster, "task": {"type": "master", "index": 0}}, tmp_path, monkeypatch)
    with pytest.raises(ValueError, match="Name the task 'chief' and evaluate in an 'evaluator' task"):
        kte.estimator.train_and_evaluate(estimator, *specs())


def test_task_types_the_original_did_not_run(tmp_path):
    estimator = FakeEstimator(tmp_path, [1], [1.0])
    for task_type, message in [(None, "must have task_type set"), ("local", "cannot be `local`"),
                               ("driver", r"Task type driver is not supported. Supported task types are \['chief'")]:
        estimator.config = types.SimpleNamespace(task_type=task_type, task_id=0, cluster_spec={"chief": ["h:1"]})
        with pytest.raises(ValueError, match=message):
            kte.estimator.train_and_evaluate(estimator, *specs())


def test_a_worker_trains_without_the_chiefs_saving_listeners(tmp_path):
    seen = []

    class Listener(tf.compat.v1.train.CheckpointSaverListener):
        pass

    class Trainer(FakeEstimator):
        def train(self, input_fn, hooks=None, steps=None, max_steps=None, saving_listeners=None):
            seen.append((self.config.task_type, list(saving_listeners), max_steps))
            return self

    listener = Listener()
    for task_type, is_chief in (("chief", True), ("worker", False)):
        estimator = Trainer(tmp_path, [1], [1.0])
        estimator.config = types.SimpleNamespace(task_type=task_type, task_id=0, is_chief=is_chief,
                                                 cluster_spec={"chief": ["h:1"], "worker": ["h:2"]})
        train_spec = kte.estimator.TrainSpec(lambda: None, max_steps=7, saving_listeners=[listener])
        assert kte.estimator.train_and_evaluate(estimator, train_spec, specs()[1]) is None
    assert seen == [("chief", [listener], 7), ("worker", [], 7)]


def test_train_and_evaluate_runs_eagerly_in_a_graph_mode_program(tmp_path):
    estimator = cases.estimator_for(api_for(tmp_path), 2)
    with tf.Graph().as_default():
        assert not tf.executing_eagerly()
        metrics, exports = kte.estimator.train_and_evaluate(estimator, *specs())
    assert int(metrics["global_step"]) == 4 and exports == []


def test_the_module_paths_programs_import_are_this_librarys():
    check = """
import keras_tpu_estimator as kte
from keras_tpu_estimator.facade import early_stopping
from keras_tpu_estimator.facade import training
kte.install()
import tensorflow as tf
from tensorflow_estimator.python.estimator import early_stopping as imported_early_stopping
from tensorflow_estimator.python.estimator import exporter, training as imported_training
assert imported_training is training and imported_early_stopping is early_stopping
assert exporter.LatestExporter is kte.estimator.LatestExporter is tf.estimator.LatestExporter
assert tf.estimator.train_and_evaluate is training.train_and_evaluate
assert tf.compat.v1.estimator.experimental.stop_if_no_decrease_hook is early_stopping.stop_if_no_decrease_hook
"""
    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))  # install() changes tensorflow
    assert done.returncode == 0, done.stderr[-3000:]


# --- an evaluator task beside real trainer processes ------------------------------------------------

def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start(task, index, cluster, model_dir, max_steps, seconds, **env):
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT), **env)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.fixtures.train_and_evaluate_script", task, str(index), json.dumps(cluster),
         str(model_dir), str(max_steps), str(seconds)],
        cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(processes, timeout=300):
    outputs = []
    for process in processes:
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            output, _ = process.communicate()
            raise AssertionError(f"a task hung:\n{output[-3000:]}") from None
        assert process.returncode == 0, output[-4000:]
        outputs.append(output)
    return outputs


def assert_evaluated_new_checkpoints_until_max_steps(model_dir, max_steps):
    report = json.loads((model_dir / "evaluator.json").read_text())
    evaluated = report["evaluated"]
    checkpoints = sorted(int(p.name.split("-")[1].split(".")[0]) for p in model_dir.glob("model.ckpt-*.index"))
    assert evaluated == sorted(set(evaluated)) and evaluated[-1] == max_steps, evaluated
    assert set(evaluated) <= set(checkpoints), (evaluated, checkpoints)
    final = report["exports"]["final"]
    assert [call for call in final if call[2]] == [[max_steps, True, True]]  # exported once, at the end
    assert all(call[1] == (call[0] >= max_steps) for call in final)
    assert len(list((model_dir / "export" / "latest").iterdir())) == min(2, len(evaluated))
    assert not report["is_chief"]


@pytest.mark.multiworker
def test_an_evaluator_task_evaluates_each_new_checkpoint_of_a_chief_until_max_steps(tmp_path):
    cluster = {"chief": [f"localhost:{free_ports(1)[0]}"]}
    model_dir = tmp_path / "model"
    evaluator = start("evaluator", 0, cluster, model_dir, 12, 0.0)
    chief = start("chief", 0, cluster, model_dir, 12, 0.4)
    chief_output, evaluator_output = finish([chief, evaluator])
    assert "RETURNED None" in chief_output and "RETURNED None" in evaluator_output
    assert_evaluated_new_checkpoints_until_max_steps(model_dir, 12)
    # The chief only trains (the original's run_chief): every evaluation is the evaluator's.
    assert "Running training and evaluation locally" not in chief_output


@pytest.mark.multiworker
def test_an_evaluator_beside_two_multi_worker_trainers(tmp_path):
    chief_port, worker_port = free_ports(2)
    cluster = {"chief": [f"localhost:{chief_port}"], "worker": [f"localhost:{worker_port}"]}
    model_dir = tmp_path / "model"
    processes = [start("evaluator", 0, cluster, model_dir, 10, 0.0), start("chief", 0, cluster, model_dir, 10, 0.4),
                 start("worker", 0, cluster, model_dir, 10, 0.4)]
    outputs = finish(processes)
    assert all("RETURNED None" in output for output in outputs)
    assert_evaluated_new_checkpoints_until_max_steps(model_dir, 10)


@pytest.mark.multiworker
def test_an_early_stop_decided_by_the_chief_stops_every_worker_at_the_same_step(tmp_path):
    chief_port, worker_port = free_ports(2)
    cluster = {"chief": [f"localhost:{chief_port}"], "worker": [f"localhost:{worker_port}"]}
    model_dir = tmp_path / "model"
    processes = [start(task, 0, cluster, model_dir, 20, 0.0, STOP_AFTER_CHECKS="3") for task in ("chief", "worker")]
    outputs = finish(processes)
    assert all("STOPPED 2" in output for output in outputs), outputs  # checked at 0, 1, 2: stop after the run
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("model.ckpt-3")
