"""RunConfig, TPUConfig and iterations_per_loop parsing."""

import json

import pytest
import tensorflow as tf

import keras_tpu_estimator as kte


@pytest.mark.parametrize(
    "value, expected",
    [(4, (4, "count")), ("100", (100, "count")), ("30s", (30, "seconds")),
     ("2m", (120, "seconds")), ("1h", (3600, "seconds"))],
)
def test_iterations_per_loop_parses_counts_and_durations(value, expected):
    assert tuple(kte.parse_iterations_per_loop(value)) == expected


@pytest.mark.parametrize("value", [0, -3, "0s", "abc", "3d", "", True, "012", " 5", 2.5])
def test_bad_iterations_per_loop_is_rejected(value):
    with pytest.raises(ValueError, match="^Invalid TPUConfig `iterations_per_loop` value. Value must be positive"):
        kte.TPUConfig(iterations_per_loop=value)


def test_tpu_config_defaults_follow_tpuestimator():
    config = kte.TPUConfig()
    assert config.iterations_per_loop == 2
    assert config.input_pipeline == kte.InputPipelineConfig.PER_HOST_V1
    assert config.per_host_input_for_training == kte.InputPipelineConfig.PER_HOST_V1  # True, mapped
    assert config.experimental_host_call_every_n_steps == 1
    assert kte.TPUConfig(per_host_input_for_training=False).input_pipeline == kte.InputPipelineConfig.PER_SHARD_V1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_cores_per_replica": 3}, "num_cores_per_replica must be 1, 2, 4, 8, 16, 32, 64, 128; got 3"),
        ({"num_shards": 0}, "TPUConfig num_shards must be positive, got 0"),
        ({"eval_training_input_configuration": 7}, "eval_training_input_configuration"),
    ],
)
def test_bad_tpu_config_is_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        kte.TPUConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"per_host_input_for_training": kte.InputPipelineConfig.BROADCAST}, "does not run BROADCAST"),
        ({"num_cores_per_replica": 2}, "Model parallelism"),
        ({"experimental_host_call_every_n_steps": 0}, "experimental_host_call_every_n_steps"),
    ],
)
def test_what_this_library_does_not_run_is_refused_when_a_tpu_path_model_is_built(kwargs, message):
    config = kte.TPUConfig(**kwargs)  # the original's TPUConfig accepted these
    with pytest.raises(ValueError, match=message):
        kte.EstimatorModel(lambda features, params: None, train_batch_size=8,
                           config=kte.RunConfig(tpu_config=config))
    with pytest.raises(ValueError, match=message):
        kte.TPUEstimator(lambda features, params: None, train_batch_size=8,
                         config=kte.RunConfig(tpu_config=config))
    kte.TPUEstimator(lambda features, params: None, use_tpu=False, config=kte.RunConfig(tpu_config=config))


def test_run_config_checkpoint_defaults_and_exclusivity():
    assert kte.RunConfig().save_checkpoints_secs == 600
    config = kte.RunConfig(save_checkpoints_steps=100)
    assert config.save_checkpoints_secs is None and config.save_checkpoints_steps == 100
    with pytest.raises(ValueError, match="`save_checkpoints_steps` and `save_checkpoints_secs` cannot be both set"):
        kte.RunConfig(save_checkpoints_steps=100, save_checkpoints_secs=60)
    assert config.replace(save_checkpoints_steps=5).save_checkpoints_steps == 5
    replaced = config.replace(save_checkpoints_secs=30)  # setting one clears the other, as the original
    assert (replaced.save_checkpoints_steps, replaced.save_checkpoints_secs) == (None, 30)
    assert kte.RunConfig(save_checkpoints_steps=None).save_checkpoints_secs is None


def test_run_config_accepts_and_keeps_tf1_session_fields():
    config = kte.RunConfig(session_config=tf.compat.v1.ConfigProto(), device_fn=lambda op: "/cpu:0",
                           protocol="grpc", tf_random_seed=3)
    assert kte.TPUConfig(num_cores_per_replica=1).num_cores_per_replica == 1
    assert config.protocol == "grpc" and config.tf_random_seed == 3


def test_run_config_rejects_a_foreign_tpu_config():
    with pytest.raises(TypeError, match="`tpu_config` must be a keras_tpu_estimator.TPUConfig"):
        kte.RunConfig(tpu_config={"iterations_per_loop": 2})


@pytest.mark.parametrize("index, chief, master", [(0, True, "grpc://host0:2222"), (1, False, "grpc://host1:2222")])
def test_a_workers_only_tf_config_makes_worker_0_the_chief(monkeypatch, index, chief, master):
    # tf.distribute's MultiWorkerMirroredStrategy convention; the Estimator required a "chief" job.
    tf_config = {"cluster": {"worker": ["host0:2222", "host1:2222"]}, "task": {"type": "worker", "index": index}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    config = kte.RunConfig()
    assert (config.is_chief, config.master, config.evaluation_master) == (chief, master, master)
    assert (config.num_worker_replicas, config.global_id_in_cluster, config.task_id) == (2, index, index)
