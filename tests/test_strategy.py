"""Strategy resolution, per-replica batch arithmetic and the params['context'] object."""

import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.strategy import per_replica_batch_size


def test_without_tpu_or_gpus_the_default_strategy_is_used():
    assert kte.resolve_strategy(use_tpu=True) is tf.distribute.get_strategy()
    assert kte.resolve_strategy(use_tpu=False) is tf.distribute.get_strategy()


def test_a_strategy_in_scope_is_used_by_the_model(mirrored):
    with mirrored.scope():
        model = kte.EstimatorModel(lambda features, params: None, train_batch_size=8)
    assert model.distribute_strategy is mirrored


def test_per_replica_batch_size():
    assert per_replica_batch_size(16, 4, "x") == 4
    with pytest.raises(ValueError, match=r"`x` must be divisible by the number of replicas \(4\). Received: x=10"):
        per_replica_batch_size(10, 4, "x")


def test_context_describes_the_replicas(mirrored):
    context = kte.TPUContext(mirrored, kte.ModeKeys.TRAIN, 16)
    assert context.num_replicas == 4 and context.num_hosts == 1
    assert context.num_of_replicas_per_host == 4 and context.current_host == 0
    assert context.current_input_fn_deployment() == ("/device:CPU:0", 0, 1)
    assert context.is_running_on_tpu is False
