"""Kill training with SIGKILL mid-run; a restart resumes and ends with the same weights."""

import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run(model_dir, seconds, wait=True):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.resume_script", str(model_dir), "40", str(seconds)],
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
