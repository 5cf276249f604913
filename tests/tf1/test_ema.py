"""EMA evaluation: a Scaffold's `Saver(ema.variables_to_restore())` decides what evaluate, predict and export restore.

The cases of `tests/fixtures/ema_cases.py` (tensorflow/tpu's ResNet / EfficientNet
pattern) run here on `keras_tpu_estimator.estimator`, on the CPU path
(`use_tpu=False`) and on the strategy path (default and `MirroredStrategy`),
and are compared with what TF 2.15's TPUEstimator gave on its CPU path
(`tests/recorded/ema_numbers_generated.py`): the evaluation loss and metric of the
moving averages (after training, and as a fresh estimator's first call), the
predictions, what the exported SavedModel serves, and that training goes on
from the raw weights.
"""

from __future__ import annotations

import os
import types

import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.model_dir.checkpoints import write_checkpoint
from keras_tpu_estimator.tf1 import saver as tf1_saver
from keras_tpu_estimator.tf1.legacy import model_fn_scope
from tests.fixtures import ema_cases as cases
from tests.fixtures.same_results import assert_same
from tests.recorded import ema_numbers_generated as recorded


def api_for(model_dir, use_tpu: bool, strategy=None) -> types.SimpleNamespace:
    return types.SimpleNamespace(estimator=kte.estimator, model_dir=str(model_dir), use_tpu=use_tpu,
                                 strategy=strategy)


def _strategy_api(strategy, tmp_path) -> types.SimpleNamespace:
    mirrored = isinstance(strategy, tf.distribute.MirroredStrategy)
    return api_for(tmp_path, True, strategy if mirrored else None)


@pytest.mark.parametrize("name", sorted(cases.DEFAULTS))
def test_cpu_path_evaluates_predicts_and_exports_the_averages_as_the_original(name, tmp_path):
    assert_same(cases.DEFAULTS[name](api_for(tmp_path, False)), recorded.EMA[name], name)


# The plain Estimator has no strategy path (it is the CPU path); the TPUEstimator cases run on both.
STRATEGY_CASES = ["EMA: Saver built in scaffold_fn (ResNet)", "EMA: Saver built in model_fn, scaffold_fn returns it"]


@pytest.mark.parametrize("name", STRATEGY_CASES)
def test_strategy_path_evaluates_predicts_and_exports_the_averages_as_the_original(name, strategy, tmp_path):
    assert_same(cases.DEFAULTS[name](_strategy_api(strategy, tmp_path)), recorded.EMA[name], name)


def test_resnet_batch_norm_statistics_averaged_on_the_default_strategy(tmp_path):
    # Not on MirroredStrategy: each replica's batch norm sees its own rows (as on a TPU), not the CPU path's.
    name = "EMA: ResNet's ema_vars with batch norm moving statistics"
    assert_same(cases.DEFAULTS[name](api_for(tmp_path, True)), recorded.EMA[name], name)


def test_the_averages_differ_from_the_raw_weights():
    averaged = recorded.EMA["EMA: Saver built in scaffold_fn (ResNet)"]["eval_first"]
    assert averaged["loss"] != recorded.EMA["EMA: raw evaluation without a Scaffold saver"]["loss"]


def test_every_case_was_recorded():
    assert sorted(cases.DEFAULTS) == sorted(recorded.EMA)


# ------------------------------------------------------------------ the Saver stand-in
def test_saver_inside_a_function_records_names_and_restores_through_the_session(tmp_path):
    w = tf.Variable([1.0, 2.0], name="w")
    shadow = tf.Variable([5.0, 6.0], name="w/ExponentialMovingAverage")
    prefix = tf.compat.v1.train.Saver  # outside: TensorFlow's own
    assert prefix is not tf1_saver.TracedSaver
    ckpt = write_checkpoint(str(tmp_path / "model.ckpt-1"),
                                            {"w": w, "w/ExponentialMovingAverage": shadow})
    savers = []

    @tf.function
    def trace():
        with model_fn_scope():
            savers.append(tf.compat.v1.train.Saver({"w/ExponentialMovingAverage": w}))
            savers.append(tf.compat.v1.train.Saver([w]))
        return tf.constant(0)

    trace()
    assert [type(s) for s in savers] == [tf1_saver.TracedSaver] * 2
    assert savers[0].names == {"w": "w/ExponentialMovingAverage"} and savers[1].names == {"w": "w"}

    class Session:
        def restore_variables(self, save_path, names):
            tf1_saver.restore_by_names({"w": w}, save_path, names)

    savers[0].restore(Session(), ckpt)
    assert w.numpy().tolist() == [5.0, 6.0]
    with pytest.raises(TypeError, match="restores through the session"):
        savers[0].restore(object(), ckpt)
    with pytest.raises(NotImplementedError, match="cannot save"):
        savers[0].save(Session(), ckpt)


def test_restore_by_names_names_unknown_variables(tmp_path):
    w = tf.Variable([1.0], name="w")
    ckpt = write_checkpoint(str(tmp_path / "model.ckpt-1"), {"w": w})
    with pytest.raises(ValueError, match=r"\['v'\], which are not variables of the model"):
        tf1_saver.restore_by_names({"w": w}, ckpt, {"v": "w"})


def test_a_saver_in_a_tf1_graph_is_tensorflows():
    with tf.Graph().as_default(), model_fn_scope():
        v = tf.compat.v1.get_variable("v", [1])
        saver = tf.compat.v1.train.Saver({"v": v})
    assert type(saver).__name__ == "Saver" and not isinstance(saver, tf1_saver.TracedSaver)


def test_both_metagraphs_restore_the_averages(tmp_path):
    """With `export_to_tpu`, the `{serve, tpu}` MetaGraph's saver reads the same averaged names."""
    from tensorflow.core.protobuf import saved_model_pb2

    api = api_for(tmp_path, True)
    config = kte.estimator.tpu.RunConfig(model_dir=str(tmp_path))
    estimator = kte.estimator.tpu.TPUEstimator(
        cases.ema_model_fn("scaffold_fn", api), config=config, train_batch_size=4, predict_batch_size=4)
    estimator.train(cases.train_input_fn, max_steps=2)
    path = os.fsdecode(estimator.export_saved_model(str(tmp_path / "export"), cases.serving_input_receiver_fn(api)))
    saved = saved_model_pb2.SavedModel.FromString(open(os.path.join(path, "saved_model.pb"), "rb").read())
    restored = {}
    for meta_graph in saved.meta_graphs:
        names = [n for n in meta_graph.graph_def.node if n.name == "save/RestoreV2/tensor_names"]
        restored[tuple(meta_graph.meta_info_def.tags)] = sorted(names[0].attr["value"].tensor.string_val)
    averaged = sorted([b"b/ExponentialMovingAverage", b"global_step", b"w/ExponentialMovingAverage"])
    assert restored == {("serve",): averaged, ("serve", "tpu"): averaged}


def test_export_reads_only_the_names_the_scaffold_saver_lists(tmp_path):
    """An averages-only checkpoint (as released EMA checkpoints are) exports; a missing average is named."""
    api = api_for(tmp_path, False)
    estimator = cases.estimator_for(api, cases.ema_model_fn("scaffold_fn", api))
    estimator.train(cases.train_input_fn, max_steps=6)
    averages = ["w/ExponentialMovingAverage", "b/ExponentialMovingAverage", "global_step"]
    values = {name: tf.Variable(estimator.get_variable_value(name)) for name in averages}
    (tmp_path / "averages").mkdir()
    (tmp_path / "partial").mkdir()
    only_averages = write_checkpoint(str(tmp_path / "averages" / "model.ckpt-6"), values)
    path = estimator.export_saved_model(str(tmp_path / "export"), cases.serving_input_receiver_fn(api),
                                        checkpoint_path=only_averages)
    served = tf.saved_model.load(os.fsdecode(path), tags=["serve"]).signatures["serving_default"]
    expected = recorded.EMA["EMA: Saver built in scaffold_fn (ResNet)"]["served"]
    assert_same(cases._floats(served(x=tf.constant(cases.X[:2]))["y"]), expected, "served")
    del values["b/ExponentialMovingAverage"]
    partial = write_checkpoint(str(tmp_path / "partial" / "model.ckpt-6"), values)
    with pytest.raises(ValueError, match=r"has no value for \['b/ExponentialMovingAverage'\] that the Scaffold's Saver restores"):
        estimator.export_saved_model(str(tmp_path / "export"), cases.serving_input_receiver_fn(api),
                                     checkpoint_path=partial)


def test_a_checkpoint_without_the_averages_is_named(tmp_path):
    api = api_for(tmp_path, False)

    def no_average(features, labels, mode, params):
        _, _, predictions = cases.linear(features)
        loss = tf.compat.v1.losses.mean_squared_error(labels, predictions)
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
            loss, tf.compat.v1.train.get_global_step())
        return kte.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    cases.estimator_for(api, no_average).train(cases.train_input_fn, max_steps=2)
    averaging = cases.estimator_for(api, cases.ema_model_fn("scaffold_fn", api))
    with pytest.raises(ValueError, match=r"Saver restores \['b/ExponentialMovingAverage', 'w/Exponential"
                                         r"MovingAverage'\] \(into \['b', 'w'\]\).*ema.apply"):
        averaging.evaluate(cases.eval_input_fn, steps=1)
