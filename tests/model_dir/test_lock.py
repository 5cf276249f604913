"""One writer per model_dir: the lock file, its takeover rules, heartbeat and object stores."""

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
import tensorflow as tf

from keras_tpu_estimator.model_dir import lock as model_dir_lock
from keras_tpu_estimator.model_dir.lock import (
    LOCK_FILE,
    STALE_AFTER_SECONDS,
    ModelDirLock,
    ModelDirLockedError,
)
from tests.fixtures import models

HOST = socket.gethostname()
STARTED_TEXT = "2031-02-03T04:05:06+00:00"


@pytest.fixture
def caplog(caplog):
    caplog.set_level(logging.INFO, logger="keras_tpu_estimator")
    return caplog


@pytest.fixture
def live_pid():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process.pid
    process.kill()
    process.wait()


@pytest.fixture
def dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    process.kill()
    process.wait()  # Reaped: the pid no longer exists.
    return process.pid


def write_lock(model_dir, host=HOST, pid=1, heartbeat=None, token="theirs", age=0.0):
    """A lock file as another trainer writes it; `age` seconds old by heartbeat and mtime."""
    then = time.time() - age
    path = os.path.join(model_dir, LOCK_FILE)
    with open(path, "w") as f:
        json.dump({
            "host": host, "pid": pid, "started": then - 5, "started_text": STARTED_TEXT,
            "heartbeat": then if heartbeat is None else heartbeat, "token": token,
        }, f)
    os.utime(path, (then, then))
    return path


def read_lock(model_dir):
    with open(os.path.join(model_dir, LOCK_FILE)) as f:
        return json.load(f)


def test_acquire_writes_this_host_and_pid_and_release_removes_it(tmp_path):
    model_dir = tmp_path / "model"  # Created if missing.
    lock = ModelDirLock(model_dir).acquire()
    try:
        assert lock.held
        contents = read_lock(model_dir)
        assert (contents["host"], contents["pid"]) == (HOST, os.getpid())
        assert abs(contents["heartbeat"] - time.time()) < 60
        assert contents["started"] == contents["heartbeat"] and len(contents["token"]) == 32
        assert contents["started_text"].startswith(time.strftime("%Y-"))
    finally:
        lock.release()
    assert not lock.held
    assert os.listdir(model_dir) == []
    lock.release()  # Idempotent.


def test_context_manager_releases_when_the_block_raises(tmp_path):
    with pytest.raises(KeyError):
        with ModelDirLock(tmp_path) as lock:
            assert os.path.exists(tmp_path / LOCK_FILE)
            raise KeyError("fit failed")
    assert not lock.held and not os.path.exists(tmp_path / LOCK_FILE)


def test_a_live_trainer_on_this_host_makes_the_second_fail_naming_it(tmp_path, live_pid):
    path = write_lock(tmp_path, pid=live_pid, age=3)
    before = open(path).read()
    with pytest.raises(ModelDirLockedError) as raised:
        ModelDirLock(tmp_path).acquire()
    message = str(raised.value)
    assert isinstance(raised.value, RuntimeError)
    assert f"host {HOST}, pid {live_pid}, started {STARTED_TEXT}" in message
    assert str(tmp_path) in message and f"delete {path}" in message
    assert "last heartbeat 3 s ago" in message and "Evaluators and predict" in message
    error = raised.value
    assert (error.host, error.pid, error.started_text) == (HOST, live_pid, STARTED_TEXT)
    assert error.lock_path == path and 2 < error.heartbeat_age < 60
    assert open(path).read() == before  # Left alone.


def test_a_dead_pid_on_this_host_is_taken_over_with_a_warning(tmp_path, dead_pid, caplog):
    write_lock(tmp_path, pid=dead_pid)
    with ModelDirLock(tmp_path):
        assert read_lock(tmp_path)["pid"] == os.getpid()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert f"pid {dead_pid}" in warnings[0].getMessage()
    assert f"process {dead_pid} no longer exists" in warnings[0].getMessage()


def test_a_lock_this_process_left_is_taken_over_at_info(tmp_path, caplog):
    leaked = ModelDirLock(tmp_path).acquire()  # A notebook's fit raised before release.
    with ModelDirLock(tmp_path) as lock:
        assert lock.held and not leaked.held
        assert read_lock(tmp_path)["token"] == lock._token
        leaked.release()  # Does not delete the new holder's file.
        assert os.path.exists(tmp_path / LOCK_FILE)
    assert "this process left it" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    write_lock(tmp_path, pid=os.getpid(), age=1)  # Same pid, no object behind it.
    with ModelDirLock(tmp_path):
        assert read_lock(tmp_path)["token"] != "theirs"


def test_another_host_holds_until_its_heartbeat_is_stale(tmp_path, caplog):
    write_lock(tmp_path, host="other-host", pid=os.getpid(), age=STALE_AFTER_SECONDS - 30)
    with pytest.raises(ModelDirLockedError, match="host other-host"):
        ModelDirLock(tmp_path).acquire()
    # An old JSON heartbeat with a fresh mtime (another host's slow clock) still holds.
    path = write_lock(tmp_path, host="other-host", heartbeat=1.0)
    with pytest.raises(ModelDirLockedError):
        ModelDirLock(tmp_path).acquire()
    write_lock(tmp_path, host="other-host", age=STALE_AFTER_SECONDS + 30)
    with ModelDirLock(tmp_path):
        assert read_lock(tmp_path)["host"] == HOST
    assert "Taking over the lock" in caplog.text and "host other-host" in caplog.text
    assert f"heartbeat is {STALE_AFTER_SECONDS + 30:.0f} s old" in caplog.text
    assert not os.path.exists(path)


def test_an_unparsable_lock_holds_while_fresh_and_is_taken_over_when_old(tmp_path, caplog):
    path = tmp_path / LOCK_FILE
    path.write_text('{"host": "half-wri')
    with pytest.raises(ModelDirLockedError, match="cannot be read yet") as raised:
        ModelDirLock(tmp_path).acquire()
    assert raised.value.pid is None and raised.value.host == "unknown"
    old = time.time() - STALE_AFTER_SECONDS - 10
    os.utime(path, (old, old))
    with ModelDirLock(tmp_path):
        assert read_lock(tmp_path)["pid"] == os.getpid()
    assert "cannot be parsed" in caplog.text


def test_losing_the_takeover_race_raises_naming_the_winner(tmp_path, dead_pid, monkeypatch):
    write_lock(tmp_path, pid=dead_pid)
    remove = model_dir_lock._remove

    def remove_then_another_trainer_creates(path):
        remove(path)
        write_lock(tmp_path, host="winner-host", pid=7)

    monkeypatch.setattr(model_dir_lock, "_remove", remove_then_another_trainer_creates)
    with pytest.raises(ModelDirLockedError, match="host winner-host, pid 7"):
        ModelDirLock(tmp_path).acquire()


def test_a_lock_replaced_after_it_was_judged_is_not_deleted(tmp_path, dead_pid, monkeypatch):
    write_lock(tmp_path, pid=dead_pid)
    judge = ModelDirLock._takeover_reason

    def judge_then_another_trainer_takes_over(holder, age):
        reason = judge(holder, age)
        write_lock(tmp_path, host="faster-host", pid=8, token="faster")
        return reason

    monkeypatch.setattr(ModelDirLock, "_takeover_reason", staticmethod(judge_then_another_trainer_takes_over))
    with pytest.raises(ModelDirLockedError, match="host faster-host, pid 8"):
        ModelDirLock(tmp_path).acquire()
    assert read_lock(tmp_path)["token"] == "faster"


def wait_for(condition, seconds=5.0):
    deadline = time.time() + seconds
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.01)


def test_heartbeat_advances_and_stops_when_another_process_takes_over(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(model_dir_lock, "HEARTBEAT_SECONDS", 0.05)
    lock = ModelDirLock(tmp_path).acquire()
    try:
        first = read_lock(tmp_path)
        wait_for(lambda: read_lock(tmp_path)["heartbeat"] > first["heartbeat"] + 0.1)
        assert read_lock(tmp_path)["token"] == first["token"]
        assert sorted(os.listdir(tmp_path)) == [LOCK_FILE]  # No temporary file left behind.
        old = time.time() - 1000
        os.utime(tmp_path / LOCK_FILE, (old, old))
        wait_for(lambda: os.stat(tmp_path / LOCK_FILE).st_mtime > old + 900)
        write_lock(tmp_path, host="other-host", token="taker")
        wait_for(lambda: not lock.held)
    finally:
        lock.release()
    assert read_lock(tmp_path)["token"] == "taker"  # Not deleted, not rewritten.
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "held by host other-host" in errors[0].getMessage()


def test_object_stores_are_not_locked_with_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    lock = ModelDirLock("ram://model")
    with lock:
        assert not lock.held
        lock.acquire()  # One warning per lock.
    assert os.listdir(tmp_path) == []
    assert not tf.io.gfile.exists(f"ram://model/{LOCK_FILE}")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "a lock cannot be held" in warnings[0] and "Only one trainer" in warnings[0]


def test_a_model_dir_that_is_a_file_is_refused(tmp_path):
    path = tmp_path / "model"
    path.write_text("")
    with pytest.raises(ValueError, match=f"model_dir {path} is a file, not a directory"):
        ModelDirLock(path).acquire()


def test_readers_do_not_need_the_lock(tmp_path, live_pid):
    with ModelDirLock(tmp_path):
        prefix = tf.train.Checkpoint(v=tf.Variable(3.0)).save(str(tmp_path / "model.ckpt"))
        # An evaluator reads while the trainer holds the lock, and takes none.
        assert tf.train.latest_checkpoint(str(tmp_path)) == prefix
        assert tf.train.load_variable(prefix, "v/.ATTRIBUTES/VARIABLE_VALUE") == 3.0
        assert LOCK_FILE in tf.io.gfile.listdir(str(tmp_path))
    # This library's readers, on a model_dir a live trainer holds: they run and leave its lock alone.
    estimator = models.make_estimator(tmp_path / "model")
    estimator.train(models.input_fn, steps=4)
    path = write_lock(tmp_path / "model", pid=live_pid)
    before = open(path).read()
    assert estimator.evaluate(models.input_fn, steps=1)["global_step"] == 4
    assert len(list(estimator.predict(models.predict_input_fn))) == 64
    assert open(path).read() == before
    with pytest.raises(ModelDirLockedError):  # while a trainer is refused
        estimator.train(models.input_fn, steps=1)


def test_a_training_that_fails_gives_the_lock_back(tmp_path):
    # A step that raises (here a failed tf.debugging assertion at global step 2) ends `train`
    # where Keras calls no on_train_end: another trainer (a script beside a notebook whose
    # kernel lives on) must find model_dir free, and this process trains on.
    def model_fn(features, labels, mode, params):
        spec = models.get_variable_mlp(features, labels, mode, params)
        step = tf.compat.v1.train.get_global_step()
        with tf.control_dependencies([tf.debugging.assert_less(step, tf.constant(2, tf.int64))]):
            return spec._replace(loss=tf.identity(spec.loss))

    estimator = models.make_estimator(tmp_path, model_fn=model_fn, params={"optimizer": "sgd"}, k=1)
    with pytest.raises(tf.errors.InvalidArgumentError):
        estimator.train(models.input_fn, steps=8)
    assert LOCK_FILE not in os.listdir(tmp_path)
    lock_path = os.path.join(str(tmp_path), LOCK_FILE)
    assert not [t for t in threading.enumerate() if t.name == f"lock {lock_path}"]
    other = subprocess.run(
        [sys.executable, "-c", "import sys; from keras_tpu_estimator.model_dir import ModelDirLock; "
         "ModelDirLock(sys.argv[1]).acquire().release()", str(tmp_path)],
        capture_output=True, text=True, check=False,
    )
    assert other.returncode == 0, other.stderr[-2000:]
