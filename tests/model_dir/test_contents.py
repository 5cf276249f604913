"""model_dir never loses work: damaged checkpoints fall back, a lost state file is rebuilt, leftovers go."""

import logging
import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.model_dir.checkpoints import (
    DamagedCheckpointError,
    checkpoint_step,
    write_checkpoint,
)
from keras_tpu_estimator.model_dir.contents import remove_leftovers, scanned_checkpoints
from keras_tpu_estimator.model_dir.lock import LOCK_FILE, ModelDirLockedError
from tests.facade.test_estimator import make
from tests.fixtures import models
from tests.fixtures.model_dir_script import model_fn

KERNEL = "mlp/hidden/kernel"


def trained(model_dir, max_steps=8):
    estimator = make(model_dir, tf_random_seed=7)
    estimator.train(models.input_fn, max_steps=max_steps)
    return estimator


def truncate(path, size):
    with open(path, "r+b") as file:
        file.truncate(size)


def damage(model_dir, step, part):
    prefix = f"{model_dir}/model.ckpt-{step}"
    path = f"{prefix}.index" if part == "index" else f"{prefix}.data-00000-of-00001"
    truncate(path, os.path.getsize(path) // 2 if part == "data" else 10)


def files(model_dir):
    """{name: contents} of the files directly in `model_dir`."""
    return {n: (model_dir / n).read_bytes() for n in os.listdir(model_dir) if (model_dir / n).is_file()}


def resumed_from(checkpoint_dir, step, target, max_steps):
    """An uninterrupted run from `model.ckpt-<step>` of `checkpoint_dir`, in `target`."""
    os.makedirs(target)
    for name in os.listdir(checkpoint_dir):
        if name.startswith(f"model.ckpt-{step}."):
            shutil.copy(f"{checkpoint_dir}/{name}", target)
    return trained(target, max_steps)


@pytest.mark.parametrize("part", ["data", "index"])
def test_a_damaged_latest_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog, part):
    model_dir = tmp_path / "model"
    trained(model_dir, 8)
    damage(model_dir, 8, part)
    with caplog.at_level(logging.WARNING, logger="keras_tpu_estimator"):
        estimator = trained(model_dir, 12)
    assert f"The checkpoint {model_dir}/model.ckpt-8 cannot be read (" in caplog.text
    assert "trying the next older one" in caplog.text
    # The damaged checkpoint is set aside, not overwritten by the new step-8 save.
    assert [n for n in os.listdir(model_dir) if ".set-aside-" in n]
    assert "set aside the newer checkpoint(s)" in caplog.text
    assert estimator.latest_checkpoint().endswith("model.ckpt-12")
    straight = resumed_from(model_dir, 4, tmp_path / "straight", 12)
    np.testing.assert_array_equal(estimator.get_variable_value(KERNEL), straight.get_variable_value(KERNEL))


def test_evaluate_and_predict_fall_back_and_an_explicit_damaged_checkpoint_is_an_error(tmp_path, caplog):
    model_dir = tmp_path / "model"
    estimator = trained(model_dir, 8)
    damage(model_dir, 8, "data")
    before = files(model_dir)
    with caplog.at_level(logging.WARNING, logger="keras_tpu_estimator"):
        results = estimator.evaluate(models.input_fn, steps=2)
    assert results["global_step"] == 4
    assert "model.ckpt-8 cannot be read" in caplog.text
    assert len(list(estimator.predict(models.predict_input_fn))) == 64
    with pytest.raises(DamagedCheckpointError, match=r"model\.ckpt-8 \(checkpoint_path\) cannot be read"):
        estimator.evaluate(models.input_fn, steps=2, checkpoint_path=f"{model_dir}/model.ckpt-8")
    assert files(model_dir) == before  # readers change nothing: no set-aside, no rewritten state file
    assert not [n for n in os.listdir(model_dir) if ".set-aside-" in n]
    damage(model_dir, 4, "index")
    with pytest.raises(DamagedCheckpointError, match=r"No checkpoint in model_dir can be read. Tried, newest "
                       r"first: .*model\.ckpt-8: .*; .*model\.ckpt-4: "):
        estimator.train(models.input_fn, max_steps=12)


def test_a_lost_state_file_is_rebuilt_by_scanning_and_nothing_is_overwritten(tmp_path, caplog):
    model_dir = tmp_path / "model"
    trained(model_dir, 8)
    older = (model_dir / "model.ckpt-4.data-00000-of-00001").read_bytes()
    os.remove(model_dir / "checkpoint")
    assert tf.train.latest_checkpoint(str(model_dir)) is None  # what TF alone would resume from
    with caplog.at_level(logging.WARNING, logger="keras_tpu_estimator"):
        estimator = trained(model_dir, 12)
    assert "state file" in caplog.text and "model.ckpt-8" in caplog.text
    recorder = models.ExecutionRecorder()
    estimator.train(models.input_fn, max_steps=16, hooks=[recorder])
    assert recorder.steps[0] == 12  # resumed, not restarted
    assert (model_dir / "model.ckpt-4.data-00000-of-00001").read_bytes() == older
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("model.ckpt-16")
    straight = trained(tmp_path / "straight", 8)  # the same calls, with the state file kept
    straight.train(models.input_fn, max_steps=12)
    straight.train(models.input_fn, max_steps=16)
    np.testing.assert_array_equal(estimator.get_variable_value(KERNEL), straight.get_variable_value(KERNEL))


def test_a_stale_state_file_does_not_hide_a_newer_checkpoint(tmp_path):
    model_dir = tmp_path / "model"
    estimator = trained(model_dir, 8)
    tf.compat.v1.train.update_checkpoint_state(str(model_dir), f"{model_dir}/model.ckpt-4")  # as a crash before its update
    assert estimator.latest_checkpoint().endswith("model.ckpt-8")
    assert estimator.evaluate(models.input_fn, steps=1)["global_step"] == 8


def test_leftovers_of_interrupted_saves_are_removed_and_nothing_else(tmp_path):
    model_dir = tmp_path / "model"
    trained(model_dir, 4)
    (model_dir / "model.ckpt-6_temp").mkdir()
    (model_dir / "model.ckpt-6_temp" / "part.data-00000-of-00001.tempstate123").write_bytes(b"x")
    (model_dir / "checkpoint.tmp0123456789abcdef0123456789abcdef").write_text("x")
    (model_dir / "model.ckpt-6.data-00000-of-00001").write_bytes(b"x")  # merged data, no index yet
    (model_dir / f"{LOCK_FILE}.{'a' * 32}.tmp").write_text("x")  # a heartbeat write cut short
    (model_dir / "notes.txt").write_text("mine")
    kept = {"model.ckpt-4.index", "model.ckpt-4.data-00000-of-00001", "checkpoint", "notes.txt"}
    removed = remove_leftovers(str(model_dir))
    assert sorted(removed) == sorted(["model.ckpt-6_temp", "checkpoint.tmp0123456789abcdef0123456789abcdef",
                                      "model.ckpt-6.data-00000-of-00001", f"{LOCK_FILE}.{'a' * 32}.tmp"])
    assert kept <= set(os.listdir(model_dir))
    assert not [n for n in os.listdir(model_dir) if "temp" in n or "tmp" in n]


def test_a_failed_save_removes_its_own_temporary_files_and_names_the_path(tmp_path):
    prefix = str(tmp_path / "model.ckpt-1")
    os.makedirs(prefix + ".index")  # the merge cannot write the index
    with pytest.raises(tf.errors.OpError, match=r"Could not write the checkpoint .*model\.ckpt-1 \(its partial"):
        write_checkpoint(prefix, {"w": tf.Variable([1.0])})
    assert not os.path.exists(prefix + "_temp")


def test_a_model_dir_that_is_a_file_is_named_in_the_error(tmp_path):
    path = tmp_path / "not_a_dir"
    path.write_text("x")
    estimator = make(path)
    for call in (lambda: estimator.train(models.input_fn, max_steps=4),
                 lambda: estimator.evaluate(models.input_fn, steps=1)):
        with pytest.raises(ValueError, match=f"model_dir {path} is a file, not a directory"):
            call()


def test_scanning_orders_by_step_not_by_name(tmp_path):
    for step in (9, 10, 100):
        write_checkpoint(str(tmp_path / f"model.ckpt-{step}"), {"w": tf.Variable([float(step)])})
    assert [p.rsplit("-", 1)[1] for p in scanned_checkpoints(str(tmp_path))] == ["100", "10", "9"]


# ------------------------------------------------------------------ processes
ROOT = pathlib.Path(__file__).resolve().parents[2]


def start_trainer(model_dir, max_steps, seconds, big):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
    args = [str(model_dir), str(max_steps), str(seconds), str(big)]
    return subprocess.Popen([sys.executable, "-m", "tests.fixtures.model_dir_script", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def finish(process):
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output.decode()[-3000:]
    return output.decode()


def temporary_names(model_dir):
    return [n for n in os.listdir(model_dir) if "_temp" in n or "tempstate" in n or n.startswith("checkpoint.tmp")]


@pytest.mark.slow
def test_sigkill_during_a_save_leaves_temporary_files_that_the_restart_removes(tmp_path):
    model_dir = tmp_path / "model"
    for _attempt in range(3):  # the kill must land inside a save: retry if the save won the race
        process = start_trainer(model_dir, 40, 0.02, 25_000_000)  # 100 MB per save
        deadline = time.time() + 240
        while process.poll() is None and time.time() < deadline:
            if os.path.isdir(model_dir) and scanned_checkpoints(str(model_dir)) and temporary_names(model_dir):
                process.kill()
                break
            time.sleep(0.001)
        process.wait(timeout=30)
        if temporary_names(model_dir):
            break
    assert temporary_names(model_dir), "no kill landed during a save"
    killed_at = max(int(p.rsplit("-", 1)[1]) for p in scanned_checkpoints(str(model_dir)))
    output = finish(start_trainer(model_dir, killed_at + 4, 0.0, 25_000_000))
    assert "Removed what interrupted checkpoint saves left" in output
    assert temporary_names(model_dir) == []
    assert tf.train.latest_checkpoint(str(model_dir)).endswith(f"model.ckpt-{killed_at + 4}")


@pytest.mark.slow
def test_a_second_trainer_fails_fast_and_takes_over_after_the_first_is_killed(tmp_path, caplog):
    model_dir = tmp_path / "model"
    first = start_trainer(model_dir, 400, 0.2, 1)
    progress = tmp_path / "progress"
    deadline = time.time() + 240
    while not (progress.exists() and progress.read_text() and int(progress.read_text()) >= 4):
        assert time.time() < deadline and first.poll() is None
        time.sleep(0.05)
    estimator = kte.TPUEstimator(model_fn, config=kte.RunConfig(
        model_dir=str(model_dir), save_checkpoints_steps=2, tf_random_seed=5,
        tpu_config=kte.TPUConfig(iterations_per_loop=2)), params={"optimizer": "sgd", "big": 1},
        train_batch_size=16, eval_batch_size=16)
    with pytest.raises(ModelDirLockedError, match=rf"pid {first.pid}"):
        estimator.train(models.input_fn, max_steps=400)
    assert estimator.evaluate(models.input_fn, steps=1)["global_step"] >= 2  # evaluators are not blocked
    first.kill()
    first.wait(timeout=30)
    resumed_from_step = checkpoint_step(tf.train.latest_checkpoint(str(model_dir)))
    recorder = models.ExecutionRecorder()
    with caplog.at_level(logging.WARNING, logger="keras_tpu_estimator"):
        estimator.train(models.input_fn, max_steps=resumed_from_step + 4, hooks=[recorder])
    assert recorder.steps[0] == resumed_from_step > 0
    assert "Taking over the lock on model_dir" in caplog.text and "no longer exists" in caplog.text
    assert not (model_dir / LOCK_FILE).exists()  # released at the end
