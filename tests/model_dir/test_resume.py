"""Kill training with SIGKILL mid-run; a restart resumes and ends with the same weights."""

import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(model_dir, seconds, wait=True, max_steps=40, save_steps=4):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
    args = [str(model_dir), str(max_steps), str(seconds), str(save_steps)]
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fixtures.resume_script", *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    if wait:
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, output.decode()[-3000:]
    return process


def test_sigkill_then_restart_resumes_exactly(tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    run(straight, 0.0)
    process = run(killed, 0.3, wait=False)
    deadline = time.time() + 240
    while time.time() < deadline:
        latest = tf.train.latest_checkpoint(str(killed))
        if latest and int(latest.rsplit("-", 1)[1]) >= 12:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    latest = tf.train.latest_checkpoint(str(killed))
    stopped_at = int(latest.rsplit("-", 1)[1])
    assert 12 <= stopped_at < 40, stopped_at
    tf.train.load_checkpoint(latest)  # never a broken checkpoint
    run(killed, 0.0)
    assert tf.train.latest_checkpoint(str(killed)).endswith("model.ckpt-40")
    np.testing.assert_array_equal(np.load(straight / "final.npy"), np.load(killed / "final.npy"))


def progress(model_dir):
    try:
        return int((model_dir / "progress").read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def test_sigterm_saves_at_an_execution_boundary_and_a_restart_ends_the_same(tmp_path):
    straight, preempted = tmp_path / "straight", tmp_path / "preempted"
    run(straight, 0.0, max_steps=200, save_steps=1000)
    process = run(preempted, 0.05, wait=False, max_steps=200, save_steps=1000)
    deadline = time.time() + 240
    while progress(preempted) < 40 and time.time() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 42, output.decode()[-3000:]  # PreemptionCheckpointHandler's code
    assert "Received SIGTERM: stopping after the current execution" in output.decode()
    stopped_at = int(tf.train.latest_checkpoint(str(preempted)).rsplit("-", 1)[1])
    assert 40 <= stopped_at < 200 and stopped_at % 4 == 0, stopped_at  # no save_checkpoints_steps hit
    assert stopped_at == progress(preempted)
    run(preempted, 0.0, max_steps=200, save_steps=1000)
    assert tf.train.latest_checkpoint(str(preempted)).endswith("model.ckpt-200")
    np.testing.assert_array_equal(np.load(straight / "final.npy"), np.load(preempted / "final.npy"))
