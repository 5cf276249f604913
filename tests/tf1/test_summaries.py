"""TF1 summaries inside `model_fn` (`tf.compat.v1.summary.*`): written in training as the original wrote them.

Compared with TF 2.15 (`tests/recorded/summaries_numbers_generated.py`, from
`scripts/record_summaries_numbers.py` running `tests/fixtures/summaries_cases.py`): the
Estimator's `SummarySaverHook` wrote the merged summaries at the first step of
each `train()` call and every `save_summary_steps` after it (steps 1, 3, 5, 7
for 2; 1, 5 for 4 over 6 steps: no write at the end), labelled with the step
after the update, with that step's values, whatever `iterations_per_loop`;
replica 0's on a strategy; none in evaluation. The facade's own `loss` keeps
its schedule (execution boundaries), so only the model_fn's tags are compared.
"""

from __future__ import annotations

import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from tests.fixtures import summaries_cases as cases
from tests.recorded import summaries_numbers_generated as recorded


def tf1_tags(result: dict) -> dict:
    """Only the model_fn's summaries, per directory (an eval directory: none)."""
    return {directory: {tag: steps for tag, steps in tags.items() if tag in cases.TF1_TAGS}
            for directory, tags in result.items()}


def assert_same(actual, expected, where=""):
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and sorted(actual) == sorted(expected), (where, actual, expected)
        for key in expected:
            assert_same(actual[key], expected[key], f"{where}/{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), (where, actual, expected)
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, f"{where}[{index}]")
    elif isinstance(expected, float):
        assert actual == pytest.approx(expected, rel=1e-4, abs=2e-5), (where, actual, expected)
    else:
        assert actual == expected, (where, actual, expected)


def _api(tmp_path, strategy=None):
    return types.SimpleNamespace(estimator=kte.estimator, model_dir=str(tmp_path), strategy=strategy)


@pytest.mark.parametrize("name", sorted(cases.CASES))
def test_tags_steps_and_values_are_the_originals(name, tmp_path):
    assert_same(tf1_tags(cases.CASES[name](_api(tmp_path))), tf1_tags(recorded.CASES[name]), name)


@pytest.mark.parametrize("name", sorted(cases.STRATEGY))
def test_replica_zeros_summaries_on_train_distribute_are_the_originals(name, tmp_path, mirrored):
    assert_same(tf1_tags(cases.STRATEGY[name](_api(tmp_path, mirrored))), tf1_tags(recorded.STRATEGY[name]), name)


def test_on_the_strategy_path_off_a_tpu_they_are_written_on_the_same_steps(tmp_path, strategy):
    """use_tpu=True on the default strategy and MirroredStrategy: replica 0's, at the Estimator's steps.

    Replica 0 takes 4 rows of each global batch, as the Estimator's replica 0
    took whole batches of 4, so the values are the original's of the same run.
    """
    replicas = strategy.num_replicas_in_sync
    config = kte.RunConfig(model_dir=str(tmp_path), save_summary_steps=2, train_distribute=strategy,
                           tpu_config=kte.TPUConfig(iterations_per_loop=3))
    estimator = kte.TPUEstimator(cases.make_model_fn(kte.estimator, True), config=config,
                                 train_batch_size=4 * replicas)
    estimator.train(cases.input_fn, steps=7)
    if replicas == 1:
        expected = recorded.CASES["TPUEstimator use_tpu=False, iterations_per_loop=1"]
    else:
        expected = recorded.STRATEGY["Estimator train_distribute, save_summary_steps=2, 7 steps"]
    assert_same(tf1_tags({"train": cases.events(str(tmp_path))}), tf1_tags(expected))


def test_only_written_steps_compute_them(tmp_path):
    """The summary ops run inside a branch taken on written steps only; none in the step itself."""
    model = kte.EstimatorModel(cases.make_model_fn(kte.estimator, True), use_tpu=False, train_batch_size=4)
    function = model.trace(cases.input_fn)
    graph_def = function.graph.as_graph_def()
    top = {node.op for node in graph_def.node}
    in_functions = [node.op for f in graph_def.library.function for node in f.node_def]
    assert "HistogramSummary" not in top and "MergeSummary" not in top
    assert in_functions.count("MergeSummary") == 1 and in_functions.count("HistogramSummary") == 1


def test_without_a_summary_writer_nothing_is_written(tmp_path):
    """EstimatorModel.fit without StepSummaries: no event file (no step merges a summary)."""
    model = kte.EstimatorModel(cases.make_model_fn(kte.estimator, True), use_tpu=False, train_batch_size=4)
    model.fit(cases.input_fn, steps_per_epoch=3, epochs=1, verbose=0)
    assert not tf.io.gfile.glob(f"{tmp_path}/events*")
    assert model.tf1_summaries.writer is None
    np.testing.assert_array_equal(model.tf1_summaries.schedule.numpy(), [-1, 0])


def test_keras_callback_writes_them_in_its_directory(tmp_path):
    """StepSummaries given to EstimatorModel.fit writes model_fn's summaries beside `loss`."""
    model = kte.EstimatorModel(cases.make_model_fn(kte.estimator, True), use_tpu=False, train_batch_size=4)
    model.fit(cases.input_fn, steps_per_epoch=5, epochs=1, verbose=0,
              callbacks=[kte.StepSummaries(str(tmp_path), every_n_steps=2)])
    written = cases.events(str(tmp_path))
    expected = recorded.CASES["TPUEstimator use_tpu=False, iterations_per_loop=1"]["train"]
    assert_same(written["my_loss"], expected["my_loss"][:3])
    assert "loss" in written


def test_with_a_keras_optimizer_they_are_the_same(tmp_path):
    """model_fn without a train_op, a Keras SGD applying its gradients: the same steps and values."""
    tf1_model_fn = cases.make_model_fn(kte.estimator, True)

    def model_fn(features, labels, mode, params):
        spec = tf1_model_fn(features, labels, mode, params)
        return kte.TPUEstimatorSpec(mode, loss=spec.loss)

    model = kte.EstimatorModel(model_fn, use_tpu=False, train_batch_size=4, optimizer=keras.optimizers.SGD(0.1))
    model.fit(cases.input_fn, steps_per_epoch=7, epochs=1, verbose=0,
              callbacks=[kte.StepSummaries(str(tmp_path), every_n_steps=2)])
    expected = recorded.CASES["TPUEstimator use_tpu=False, iterations_per_loop=1"]
    assert_same(tf1_tags({"train": cases.events(str(tmp_path))}), tf1_tags(expected))


def test_a_failed_train_call_leaves_them_off(tmp_path):
    """After a fit that raised, a fit without StepSummaries writes nothing to the old directory."""
    model = kte.EstimatorModel(cases.make_model_fn(kte.estimator, True), use_tpu=False, train_batch_size=4)

    class Fail(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        model.fit(cases.input_fn, steps_per_epoch=3, epochs=1, verbose=0,
                  callbacks=[kte.StepSummaries(str(tmp_path), every_n_steps=1), Fail()])
    written = len(cases.events(str(tmp_path))["my_loss"])
    model.fit(cases.input_fn, steps_per_epoch=3, epochs=1, verbose=0)
    assert model.tf1_summaries.writer is None
    assert len(cases.events(str(tmp_path))["my_loss"]) == written
