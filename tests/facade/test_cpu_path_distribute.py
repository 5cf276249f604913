"""The CPU path (`use_tpu=False`, the plain `Estimator`) on `RunConfig(train_distribute=..., eval_distribute=...)`.

As the original Estimator's distributed training and evaluation ran: `input_fn`
is called once per input pipeline with the strategy's `InputContext`, each
replica takes whole batches of its dataset in turn, TF1 optimizers apply the
mean of the replicas' gradients, the reported loss is the mean over replicas,
`eval_metric_ops` merge over replicas, one global step per step. Compared with
TF 2.15 on a `MirroredStrategy` over 4 logical CPUs
(`tests/recorded/estimator_numbers_generated.py`, STRATEGY; the 2-replica programs are
`tests/fixtures/programs/plain_estimator.py` and `tpu_cpu_distribute.py`).

At the end of a finite input a step may have fewer batches than replicas. The
original's step then failed on the replicas without a batch: training stopped
there; evaluation counted the batches of the replicas whose updates had already
run when the step was cancelled (a race: over runs of one program it gave both
outcomes). Here that step never runs, with a warning, in both modes.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from tests.facade.test_plain_estimator import api_for, assert_same
from tests.fixtures import estimator_cases as cases
from tests.recorded import estimator_numbers_generated as recorded


@pytest.mark.parametrize("name", sorted(cases.STRATEGY))
def test_results_on_four_replicas_are_the_originals(name, tmp_path, mirrored):
    assert_same(cases.STRATEGY[name](api_for(tmp_path, mirrored)), recorded.STRATEGY[name], name)


def _model_fn(features, labels, mode, params):
    return cases.make_model_fn(kte.EstimatorSpec)(features, labels, mode, params)


def test_four_replicas_of_whole_batches_train_as_one_replica_of_their_rows(tmp_path, mirrored):
    """Equal batches: the mean of the replicas' mean-loss gradients is the gradient of the global mean."""
    def trained(strategy, batch, directory):
        config = kte.RunConfig(model_dir=str(tmp_path / directory), train_distribute=strategy)
        estimator = kte.Estimator(_model_fn, config=config)
        estimator.train(cases.input_fn_of(rows=64, batch=batch, repeat=True), steps=3)
        return estimator.get_variable_value("logits/kernel")

    np.testing.assert_allclose(trained(mirrored, 4, "four"), trained(None, 16, "one"), rtol=1e-5, atol=1e-6)


def test_an_uneven_last_step_is_not_evaluated_with_a_warning(tmp_path, mirrored, caplog):
    """6 batches for 4 replicas: the second step would leave two replicas without a batch."""
    config = kte.RunConfig(model_dir=str(tmp_path), eval_distribute=mirrored)
    estimator = kte.Estimator(_model_fn, config=config)
    with caplog.at_level(logging.WARNING, logger="keras_tpu_estimator"):
        everything = estimator.evaluate(cases.input_fn_of(rows=24, batch=4, seed=1))
    first_step = estimator.evaluate(cases.input_fn_of(rows=24, batch=4, seed=1), steps=1)
    assert everything == first_step
    assert any("ended with fewer batches than the 4 replicas" in r.getMessage() for r in caplog.records)


def test_the_keras_face_on_the_cpu_path_takes_whole_batches_per_replica(mirrored):
    x, y = cases.data(32)
    dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, y)).batch(4)
    model = kte.EstimatorModel(_model_fn, use_tpu=False, strategy=mirrored, steps_per_execution=2)
    assert model.distribute_strategy is mirrored and not model.runs_on_strategy_path
    model.fit(dataset, verbose=0)
    assert model.global_step == 2  # 8 batches of 4 rows, 4 replicas per step
    results = model.evaluate(dataset, return_dict=True, verbose=0)
    assert set(results) == {"loss", "accuracy"}
    with pytest.raises(ValueError, match="Prediction on the CPU path .* runs on one replica, as Estimator.predict"):
        model.predict(dataset)


def test_train_distribute_of_the_config_is_the_cpu_paths_strategy(mirrored):
    config = kte.RunConfig(train_distribute=mirrored)
    assert kte.EstimatorModel(_model_fn, config=config, use_tpu=False).distribute_strategy is mirrored
    assert kte.EstimatorModel(_model_fn, use_tpu=False).distribute_strategy is tf.distribute.get_strategy()


def test_host_call_gets_the_first_replicas_tensors_as_the_estimators_replica_0_hook(tmp_path, mirrored):
    seen = []

    def host_fn(labels):
        return tf.compat.v1.py_func(lambda v: seen.append(v.tolist()) or np.int64(0), [labels], tf.int64)

    def model_fn(features, labels, mode, params):
        spec = cases.make_model_fn(kte.EstimatorSpec)(features, labels, mode, params)
        return kte.TPUEstimatorSpec(mode, loss=spec.loss, train_op=spec.train_op, host_call=(host_fn, [labels]))

    config = kte.RunConfig(model_dir=str(tmp_path), train_distribute=mirrored)
    estimator = kte.TPUEstimator(model_fn, config=config, use_tpu=False, train_batch_size=2)
    estimator.train(cases.input_fn_of(rows=16, batch=2), steps=2)
    labels = cases.data(16)[1].tolist()
    assert seen == [labels[0:2], labels[8:10]]  # replica 0's batch of each step (batches 0 and 4)


def test_keras_metrics_in_metric_fn_are_refused_on_several_cpu_replicas(tmp_path, mirrored):
    def model_fn(features, labels, mode, params):
        spec = cases.make_model_fn(kte.EstimatorSpec)(features, labels, mode, params)
        if mode != "eval":
            return spec

        def metric_fn(labels):
            metric = tf.keras.metrics.Mean()
            metric.update_state(tf.cast(labels, tf.float32))
            return {"mean": metric}

        return kte.TPUEstimatorSpec(mode, loss=spec.loss, eval_metrics=(metric_fn, [labels]))

    config = kte.RunConfig(model_dir=str(tmp_path), eval_distribute=mirrored)
    estimator = kte.TPUEstimator(model_fn, config=config, use_tpu=False, eval_batch_size=4)
    with pytest.raises(ValueError, match="eval_metrics run in the EVAL step as TF1 metric pairs"):
        estimator.evaluate(cases.input_fn_of(rows=16))
