"""MultiWorkerMirroredStrategy across local processes: parity, chief-only writes, faults, resume.

Each test starts worker processes on free localhost ports (tests.fixtures.multiworker_script).
Marked `multiworker`: CI runs them as a separate step.
"""

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.multiworker


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ",".join(map(str, ports))


def start(index, ports, model_dir, max_steps=20, seconds=0.0, fail=None, tmpdir=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
    if tmpdir:
        env["TMPDIR"] = str(tmpdir)
    args = [str(index), ports, str(model_dir), str(max_steps), str(seconds)] + ([fail] if fail else [])
    return subprocess.Popen(
        [sys.executable, "-m", "tests.fixtures.multiworker_script", *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def finish(processes, timeout=240):
    outputs = []
    for process in processes:
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
            raise AssertionError(f"worker hung:\n{output[-3000:]}") from None
        outputs.append(output)
    return [p.returncode for p in processes], outputs


def weights(path):
    with np.load(path) as loaded:
        return {name: loaded[name] for name in loaded.files}


def progress(model_dir, index):
    try:
        return int((model_dir / f"progress-{index}").read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def start_slow_pair_and_wait(model_dir, worker, step):
    """Two workers at 0.2 s per execution; returns once `worker` has reached `step`."""
    ports = free_ports(2)
    processes = [start(i, ports, model_dir, max_steps=400, seconds=0.2) for i in range(2)]
    deadline = time.time() + 180
    while progress(model_dir, worker) < step and time.time() < deadline:
        time.sleep(0.05)
    return processes


def test_two_workers_train_like_one_process_and_only_the_chief_writes(tmp_path):
    single, multi, scratch = tmp_path / "single", tmp_path / "multi", tmp_path / "scratch"
    single.mkdir(), multi.mkdir(), scratch.mkdir()
    codes, outputs = finish([start(-1, "0", single)])
    assert codes == [0], outputs[0][-3000:]
    ports = free_ports(2)
    codes, outputs = finish([start(i, ports, multi, tmpdir=scratch) for i in range(2)])
    assert codes == [0, 0], "\n".join(o[-3000:] for o in outputs)

    alone, chief, worker = (weights(d / f"final-{i}.npz") for d, i in ((single, -1), (multi, 0), (multi, 1)))
    assert chief.keys() == alone.keys() and "mlp.hidden.kernel.Adam" in chief
    for name in alone:
        np.testing.assert_array_equal(chief[name], worker[name], err_msg=name)
        np.testing.assert_allclose(chief[name], alone[name], atol=1e-5, err_msg=name)
    assert chief["global_step"] == 20
    assert tf.train.latest_checkpoint(str(multi)).endswith("model.ckpt-20")
    assert sorted(os.listdir(scratch)) == []  # the worker's temporary copies are gone


def test_two_workers_with_xla_train_like_one_process_without(tmp_path):
    single, multi = tmp_path / "single", tmp_path / "multi"
    single.mkdir(), multi.mkdir()
    codes, outputs = finish([start(-1, "0", single)])
    assert codes == [0], outputs[0][-3000:]
    ports = free_ports(2)
    codes, outputs = finish([start(i, ports, multi, fail="xla") for i in range(2)])
    assert codes == [0, 0], "\n".join(o[-3000:] for o in outputs)
    alone, chief = weights(single / "final--1.npz"), weights(multi / "final-0.npz")
    assert chief.keys() == alone.keys()
    for name in alone:
        np.testing.assert_allclose(chief[name], alone[name], atol=1e-5, err_msg=name)
    assert chief["global_step"] == 20


def test_a_killed_worker_ends_the_other_and_both_resume_from_the_checkpoint(tmp_path):
    processes = start_slow_pair_and_wait(tmp_path, worker=0, step=12)
    processes[1].send_signal(signal.SIGKILL)
    killed_at = time.time()
    codes, outputs = finish(processes[:1], timeout=120)
    assert time.time() - killed_at < 60, "the surviving worker took too long to fail"
    assert codes[0] != 0, outputs[0][-2000:]
    processes[1].wait()
    latest = tf.train.latest_checkpoint(str(tmp_path))
    resumed_from = int(latest.rsplit("-", 1)[1])
    assert resumed_from >= 12

    ports = free_ports(2)
    codes, outputs = finish([start(i, ports, tmp_path, max_steps=resumed_from + 8) for i in range(2)])
    assert codes == [0, 0], "\n".join(o[-3000:] for o in outputs)
    for output in outputs:
        assert f"START {resumed_from}" in output
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith(f"model.ckpt-{resumed_from + 8}")


@pytest.mark.parametrize("fail", ["input_fn", "host_call"])
def test_an_error_in_one_worker_ends_every_worker(fail, tmp_path):
    ports = free_ports(2)
    processes = [start(0, ports, tmp_path, max_steps=400, seconds=0.05),
                 start(1, ports, tmp_path, max_steps=400, seconds=0.05, fail=fail)]
    started = time.time()
    codes, outputs = finish(processes, timeout=150)
    assert time.time() - started < 150
    assert codes[0] != 0 and codes[1] != 0
    expected = "input_fn failed on purpose" if fail == "input_fn" else "ZeroDivisionError"
    assert expected in outputs[1], outputs[1][-2000:]
    # The healthy worker reports the failing worker's error, not only "collective aborted".
    assert "another worker failed" in outputs[0] and expected in outputs[0], outputs[0][-2000:]


def test_sigterm_to_one_worker_stops_both_at_the_same_execution_with_a_checkpoint(tmp_path):
    processes = start_slow_pair_and_wait(tmp_path, worker=1, step=12)
    processes[1].send_signal(signal.SIGTERM)
    codes, outputs = finish(processes, timeout=60)
    assert codes == [42, 42], "\n".join(o[-2000:] for o in outputs)
    stopped_at = int(tf.train.latest_checkpoint(str(tmp_path)).rsplit("-", 1)[1])
    assert stopped_at % 4 == 0 and stopped_at >= 12
    assert progress(tmp_path, 0) == progress(tmp_path, 1) == stopped_at
