"""Each checkpoint carries its `.meta`, as the original's Saver wrote it, and model_dir treats it as a part.

`tf.compat.v1.train.import_meta_graph(ckpt + '.meta')` + `saver.restore` give
the original's variables, collections and saver; pinned against
`tests/recorded/input_numbers_generated.py` (`META`).
"""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator import estimator as kte_estimator
from keras_tpu_estimator.model_dir import meta_graph
from keras_tpu_estimator.model_dir.checkpoints import write_checkpoint
from keras_tpu_estimator.model_dir.contents import remove_leftovers
from tests.fixtures import input_programs as programs
from tests.fixtures import models
from tests.fixtures.input_programs import assert_close
from tests.fixtures.original_programs import estimator_namespace
from tests.model_dir.test_contents import damage, trained
from tests.recorded.input_numbers_generated import META

EST = estimator_namespace(kte_estimator)


def test_cpu_path_meta_is_the_originals(tmp_path):
    assert_close(programs.meta_run(EST, str(tmp_path)), META)


def test_strategy_path_meta_is_the_originals(strategy, tmp_path):
    ours = programs.meta_run(EST, str(tmp_path), use_tpu=True, strategy=strategy)
    assert ours["meta_files"] == META["meta_files"] and ours["facts"]["global_variables"] == (
        META["facts"]["global_variables"])
    # 4 replicas train like one replica on the global batch, within float32 round-off.
    for name, values in META["facts"]["values"].items():
        np.testing.assert_allclose(ours["facts"]["values"][name], values, rtol=1e-4, atol=1e-6, err_msg=name)


def test_restored_values_are_the_checkpoints_and_the_model_restores_them(tmp_path):
    estimator = trained(tmp_path / "model", 8)
    path = estimator.latest_checkpoint()
    facts = programs.meta_facts(path)
    assert {name for name, *_ in facts["global_variables"]} == set(estimator.get_variable_names())
    for name, values in facts["values"].items():
        np.testing.assert_array_equal(values, np.ravel(tf.train.load_variable(path, name)))
    # A TF1 program can save again through the imported saver; the library restores what it wrote.
    with tf.Graph().as_default() as graph:
        saver = tf.compat.v1.train.import_meta_graph(path + ".meta")
        with tf.compat.v1.Session(graph=graph) as session:
            saver.restore(session, path)
            kernel = next(v for v in tf.compat.v1.trainable_variables() if v.op.name == "mlp/hidden/kernel")
            session.run(kernel.assign(tf.ones_like(kernel)))
            os.makedirs(tmp_path / "tf1")
            saved = saver.save(session, str(tmp_path / "tf1" / "model.ckpt"), global_step=8)
    assert tf.train.load_variable(saved, "mlp/hidden/kernel").tolist() == np.ones((4, 16)).tolist()
    assert estimator.evaluate(models.input_fn, steps=1, checkpoint_path=saved)["global_step"] == 8


def test_keep_checkpoint_max_removes_the_meta_with_its_checkpoint_and_keeps_preserved_ones(tmp_path):
    kept = trained(tmp_path / "max", 12)  # save every 4, keep 5: all three kept
    assert sorted(n for n in os.listdir(tmp_path / "max") if n.endswith(".meta")) == [
        "model.ckpt-12.meta", "model.ckpt-4.meta", "model.ckpt-8.meta"]
    estimator = models.make_estimator(tmp_path / "one", params={"optimizer": "adam"}, save_checkpoints_steps=4,
                                      keep_checkpoint_max=1)
    estimator.train(models.input_fn, max_steps=12)
    assert [n for n in os.listdir(tmp_path / "one") if n.startswith("model.ckpt-")] and sorted(
        n for n in os.listdir(tmp_path / "one") if n.endswith(".meta")) == ["model.ckpt-12.meta"]
    # keep_checkpoint_every_n_hours keeps a checkpoint past max_to_keep: its .meta stays with it.
    estimator = models.make_estimator(tmp_path / "hours", params={"optimizer": "adam"}, save_checkpoints_steps=4,
                                      keep_checkpoint_max=1, keep_checkpoint_every_n_hours=1e-9)
    estimator.train(models.input_fn, max_steps=12)
    names = set(os.listdir(tmp_path / "hours"))
    assert {f"model.ckpt-{s}.meta" for s in (4, 8, 12)} <= names and {f"model.ckpt-{s}.index" for s in (4, 8)} <= names
    del kept


def test_a_meta_without_its_index_is_a_leftover_and_nothing_else_is(tmp_path):
    model_dir = tmp_path / "model"
    trained(model_dir, 4)
    (model_dir / "model.ckpt-6.meta").write_bytes(b"x")  # written before the merge, then killed
    for kept in ("model.ckpt-best.meta", "model.ckpt-2.set-aside-1700000000.meta", "graph.meta"):
        (model_dir / kept).write_bytes(b"x")
    assert remove_leftovers(str(model_dir)) == ["model.ckpt-6.meta"]
    assert {"model.ckpt-4.meta", "model.ckpt-best.meta", "model.ckpt-2.set-aside-1700000000.meta",
            "graph.meta"} <= set(os.listdir(model_dir))


def test_a_damaged_checkpoint_is_set_aside_with_its_meta(tmp_path):
    model_dir = tmp_path / "model"
    trained(model_dir, 8)
    original_meta = (model_dir / "model.ckpt-8.meta").read_bytes()
    damage(model_dir, 8, "data")
    trained(model_dir, 12)
    aside = sorted(n for n in os.listdir(model_dir) if ".set-aside-" in n)
    assert [n.rsplit(".set-aside-", 1)[0] for n in aside] == ["model.ckpt-8"] * 3
    assert {n.split(".", 2)[-1].split(".", 1)[-1] for n in aside} == {"data-00000-of-00001", "index", "meta"}
    assert (model_dir / next(n for n in aside if n.endswith(".meta"))).read_bytes() == original_meta
    for step in (8, 12):  # the new checkpoints have theirs
        assert programs.meta_facts(str(model_dir / f"model.ckpt-{step}"))["global_step"] == ["global_step"]


def test_a_failed_save_removes_its_meta(tmp_path):
    prefix = str(tmp_path / "model.ckpt-1")
    os.makedirs(prefix + ".data-00000-of-00001")  # the merge cannot move the data into place
    variables = {"w": tf.Variable([1.0])}
    with pytest.raises(tf.errors.OpError, match=r"Could not write the checkpoint"):
        write_checkpoint(prefix, variables, meta_graph.meta_graph_bytes(variables))
    assert sorted(os.listdir(tmp_path)) == ["model.ckpt-1.data-00000-of-00001"]  # no .meta, no _temp


def test_checkpoint_save_graph_def_false_writes_no_meta(tmp_path):
    estimator = models.make_estimator(tmp_path, params={"optimizer": "adam"}, checkpoint_save_graph_def=False)
    estimator.train(models.input_fn, max_steps=4)
    assert estimator.latest_checkpoint() and not [n for n in os.listdir(tmp_path) if n.endswith(".meta")]


def test_the_meta_graph_is_built_once_per_variables_not_per_save(tmp_path):
    meta_graph._build.cache_clear()
    estimator = models.make_estimator(tmp_path, params={"optimizer": "adam"}, save_checkpoints_steps=4, k=4)
    estimator.train(models.input_fn, max_steps=12)  # three saves
    estimator.train(models.input_fn, max_steps=16)  # a new model, the same variables
    info = meta_graph._build.cache_info()
    assert (info.misses, info.hits) == (1, 1)
    assert len({(tmp_path / f"model.ckpt-{s}.meta").read_bytes() for s in (4, 8, 12, 16)}) == 1


def test_keras_optimizer_variables_are_in_the_meta_and_restore(tmp_path):
    def model_fn(features, labels, mode, params):
        w = tf.compat.v1.get_variable("w", initializer=np.full((4, 1), 0.5, np.float32))
        loss = tf.reduce_mean(tf.square(tf.matmul(features["x"], w) - labels))
        return kte.TPUEstimatorSpec(mode, loss=loss)

    model = kte.EstimatorModel(model_fn, train_batch_size=16)
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9))
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=3), kte.CheckpointSaver(str(tmp_path))], verbose=0)
    facts = programs.meta_facts(tf.train.latest_checkpoint(str(tmp_path)))
    names = [name for name, *_ in facts["global_variables"]]
    assert "keras_optimizer/iteration" in names and facts["trainable_variables"] == ["w"]
    np.testing.assert_array_equal(facts["values"]["w"], np.ravel(model.variables_by_name["w"].numpy()))
    assert facts["values"]["keras_optimizer/iteration"] == [3]
