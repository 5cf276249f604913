"""RunConfig, TPUConfig and iterations_per_loop parsing."""

import pytest

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
        ({"per_host_input_for_training": kte.InputPipelineConfig.BROADCAST}, "does not run BROADCAST"),
        ({"num_cores_per_replica": 2}, "Model parallelism"),
        ({"num_cores_per_replica": 3}, "num_cores_per_replica must be 1, 2, 4, 8, 16, 32, 64, 128; got 3"),
        ({"num_shards": 0}, "TPUConfig num_shards must be positive, got 0"),
        ({"experimental_host_call_every_n_steps": 0}, "experimental_host_call_every_n_steps"),
        ({"eval_training_input_configuration": 7}, "eval_training_input_configuration"),
    ],
)
def test_bad_tpu_config_is_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        kte.TPUConfig(**kwargs)


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
    config = kte.RunConfig(session_config=object(), device_fn=None, protocol="grpc", tf_random_seed=3)
    assert kte.TPUConfig(num_cores_per_replica=1).num_cores_per_replica == 1
    assert config.protocol == "grpc" and config.tf_random_seed == 3


def test_run_config_rejects_a_foreign_tpu_config():
    with pytest.raises(TypeError, match="`tpu_config` must be a keras_tpu_estimator.TPUConfig"):
        kte.RunConfig(tpu_config={"iterations_per_loop": 2})
