"""The TPU path on a machine without a TPU: a fake 8-core TPUStrategy builds and traces."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "fixtures" / "fake_tpu.py")],
        capture_output=True, text=True, env=env, timeout=300, cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_fake_resolver_builds_a_real_tpu_strategy_with_tpu_variables(report):
    assert report["strategy"].startswith("TPUStrategy")
    assert report["replicas"] == 8
    assert report["variables"] == ["TPUDistributedVariable"]
    assert "dense/kernel/Adam" in report["names"] and "global_step" in report["names"]


@pytest.mark.parametrize("mode, outputs", [("train", 4), ("eval", 6), ("infer", 3)])
def test_every_mode_traces_to_one_replicated_tpu_program(report, mode, outputs):
    """TRAIN (CrossShardOptimizer, host_call), EVAL (eval_metrics, host_call) and PREDICT."""
    counts = report[mode]
    assert counts["TPUReplicateMetadata"] == 1
    assert counts["TPUCompilationResult"] == 1
    assert counts["TPUReplicatedInput"] >= 8  # the batch, split over 8 cores
    assert counts["TPUReplicatedOutput"] >= outputs  # loss, weight, host and metric tensors


def test_a_host_call_reading_the_step_after_minimize_traces(report):
    """Its read of the global step is rewired to the step's first read inside the TPU program."""
    assert report["step_after"] == 1


@pytest.mark.parametrize("mode", ["train", "eval", "infer"])
def test_only_fetched_ops_are_in_the_tpu_program(report, mode):
    """TF1 fetch semantics inside the TPU computation: unfetched updates are not traced in."""
    counts = report["fetches"][mode]
    assert counts["TPUReplicateMetadata"] == 1
    assert counts["unfetched_counter"] == 0
    training = mode == "train"
    assert (counts["ResourceApplyAdam"] > 0) == training  # minimize() is built in every mode
    assert (counts["fetched_counter"] > 0) == training  # wired into train_op by control_dependencies


def test_an_exponential_moving_average_builds_and_traces(report):
    averaged = report["moving_average"]
    assert averaged["names"] == ["dense/bias/ExponentialMovingAverage", "dense/kernel/ExponentialMovingAverage"]
    assert averaged["TPUReplicateMetadata"] == 1
    assert averaged["AssignMovingAvg"] > 0  # the averages are in the TPU program, fetched by train_op


def test_tf1_identity_in_the_tpu_trace(report):
    """Both traces of TRAIN (the build, then the TPU program) see a fresh TF1 graph's collections and TF1 names."""
    seen = report["tf1_identity"]
    assert len(seen) == 2
    for mode, at_start, names, members in seen:
        assert mode == "train"
        assert at_start == ["global_step"]  # not the EMA shadows of an earlier trace
        assert names == ["dense/bias", "dense/kernel"]
        assert members == 4  # loss, output and the two variables, hashable


def test_running_needs_a_real_tpu(report):
    assert "No OpKernel was registered to support Op 'TPUReplicated" in report["fit"]


def test_a_dynamic_batch_is_refused_before_tracing(report):
    assert "must have static shape on a TPU" in report["dynamic_batch"]
    assert "drop_remainder=True" in report["dynamic_batch"]


def test_tf1_summaries_in_model_fn_are_dropped_on_a_tpu_with_a_warning(report):
    """TPUEstimator's TPU path wrote no `tf.compat.v1.summary.*` of model_fn: none is in the TPU program."""
    summaries = report["tf1_summaries"]
    assert summaries["TPUReplicateMetadata"] == 1
    assert summaries["summary_ops"] == 0
    assert len(summaries["warnings"]) == 1 and "on a TPU" in summaries["warnings"][0]
    assert "my_loss" in summaries["warnings"][0] and "host_call" in summaries["warnings"][0]


def test_the_context_on_a_tpu_strategy_is_the_originals_on_8_cores(report):
    """The original's values on an 8-core TPU (recorded on TF 2.15); device names compared as devices."""
    from tests.fixtures import tpu_context_programs as programs
    from tests.recorded import tpu_context_numbers_generated as recorded

    original = recorded.TPU["8_cores"]["PER_HOST_V1"]["train"]
    assert programs.as_devices(report["context"]["input_fn"]) == programs.as_devices(original["input_fn"][0])
    assert programs.as_devices(report["context"]["model_fn"]) == programs.as_devices(original["model_fn"][0])
    assert report["context"]["model_fn"]["device_for_replica(r)"][7] == ["/job:localhost/replica:0/task:0/device:CPU:0", 7]


def test_jit_compile_leaves_the_tpu_program_as_it_was(report):
    """Under a TPUStrategy the step is compiled already: jit_compile adds no XLA marks of its own."""
    assert report["jit_compile"] == {"TPUReplicateMetadata": 1, "xla_marks": 0}
