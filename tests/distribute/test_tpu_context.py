"""`params['context']` has the original's public members with the values it gave on a TPU.

The original's values are recorded on TF 2.15 (`scripts/record_tpu_context_numbers.py`): its
own TPUEstimator deployed its input pipelines on a TPU system of 1 and 4 cores on one host
(the default strategy's one replica and `MirroredStrategy` over 4 CPUs stand in for them).
Device names are compared as devices: the original's local names leave the job out
(`/replica:0/task:0/device:CPU:0`), this library's are the strategy's full names.
"""

import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator import estimator as kte_estimator
from tests.fixtures import tpu_context_programs as programs
from tests.recorded import tpu_context_numbers_generated as recorded


def _layout(strategy) -> str:
    return {1: "1_core", 4: "4_cores"}[strategy.num_replicas_in_sync]


def _calls(snapshots: list) -> list:
    """The distinct contexts of `input_fn`'s calls (an input_fn returning tensors is called twice here)."""
    return [s for i, s in enumerate(snapshots) if i == 0 or s != snapshots[i - 1]]


def test_the_context_has_every_public_member_of_the_originals():
    ours = {name for name in dir(kte.TPUContext) if not name.startswith("_")}
    assert set(recorded.MEMBERS) <= ours, sorted(set(recorded.MEMBERS) - ours)


@pytest.mark.parametrize("mode", programs.MODES)
@pytest.mark.parametrize("pipeline", programs.PIPELINES)
def test_input_fn_and_model_fn_see_the_originals_context(strategy, tmp_path, pipeline, mode):
    layout = recorded.TPU[_layout(strategy)].get(pipeline, {})
    if mode not in layout:  # one core: every pipeline is the same; recorded for PER_HOST_V1
        layout = recorded.TPU[_layout(strategy)]["PER_HOST_V1"]
    ours = programs.run(kte_estimator, str(tmp_path), pipeline, mode, strategy=strategy)
    original = layout[mode]
    assert ours["context_in_params"] == original["context_in_params"]
    assert programs.as_devices(ours["model_fn"][:1]) == programs.as_devices(original["model_fn"])
    assert programs.as_devices(_calls(ours["input_fn"])) == programs.as_devices(original["input_fn"])


def test_the_cpu_path_has_no_context_as_in_the_original(tmp_path):
    for pipeline in programs.PIPELINES:
        ours = programs.run(kte_estimator, str(tmp_path / pipeline), pipeline, "train", use_tpu=False)
        assert ours == recorded.CPU_PATH[pipeline]


def test_one_input_pipeline_per_replica_sees_the_originals_per_shard_deployment(mirrored):
    """Under PER_SHARD_V1 the original called input_fn once per core: (host, core, cores, 1)."""
    original = recorded.TPU["4_cores"]["PER_SHARD_V1"]["train"]["input_fn"]
    ours = [
        programs.snapshot(kte.TPUContext(
            mirrored, kte.ModeKeys.TRAIN, 16, tf.distribute.InputContext(4, index, 4), call_from_input_fn=True
        ))
        for index in range(4)
    ]
    assert programs.as_devices(ours) == programs.as_devices(original)


def test_device_names_are_the_strategys_devices_and_place_ops(strategy):
    context = kte.TPUContext(strategy, kte.ModeKeys.TRAIN, 16)
    host = "/job:localhost/replica:0/task:0/device:CPU:0"
    assert context.tpu_host_placement_function(0) == host
    if strategy.num_replicas_in_sync > 1:
        devices = strategy.extended.worker_devices
        assert [context.device_for_replica(r) for r in range(4)] == [
            (host, tf.DeviceSpec.from_string(device).device_index) for device in devices
        ]
    with tf.Graph().as_default():
        with tf.device(context.tpu_host_placement_function(host_id=0)):
            op = tf.constant(1.0)
        with tf.device(context.device_for_replica(strategy.num_replicas_in_sync - 1)[0]):
            other = tf.constant(1.0)
    assert op.device == other.device == host


def test_a_replica_or_host_out_of_range_names_the_range(strategy):
    context = kte.TPUContext(strategy, kte.ModeKeys.TRAIN, 16)
    replicas = strategy.num_replicas_in_sync
    with pytest.raises(ValueError, match=rf"`replica_id` must be an integer in \[0, {replicas}\)"):
        context.device_for_replica(replicas)
    with pytest.raises(ValueError, match=r"`host_id` must be an integer in \[0, 1\)"):
        context.tpu_host_placement_function(1)


class TPUStrategyOnTwoHosts:
    """Stands in for a `TPUStrategy` of 8 cores on 2 hosts: its replica devices and host count."""

    num_replicas_in_sync = 8

    class extended:  # noqa: N801 - the strategy attribute's name
        num_hosts = 2
        worker_devices = tuple(f"/job:worker/replica:0/task:{r // 4}/device:TPU:{r % 4}" for r in range(8))


def test_two_hosts_see_the_originals_layout_of_a_cloud_tpu_with_8_cores():
    """Per host: (host h's CPU, h, 2, 4); per core: (its host's CPU, core, 8, 1); replicas 4-7 on task 1."""

    def named(value):  # the original's Cloud TPU job is `tpu_worker`; the strategy's here `worker`
        if isinstance(value, str):
            return value.replace("/job:tpu_worker/", "/job:worker/")
        if isinstance(value, dict):
            return {key: named(item) for key, item in value.items()}
        return [named(item) for item in value] if isinstance(value, list) else value

    strategy = TPUStrategyOnTwoHosts()
    recorded_runs = recorded.TPU["8_cores_2_hosts"]
    for pipeline, count in (("PER_HOST_V1", 2), ("PER_HOST_V2", 2), ("PER_SHARD_V1", 8)):
        ours = [
            programs.snapshot(kte.TPUContext(
                strategy, kte.ModeKeys.TRAIN, 16, tf.distribute.InputContext(count, index, 8), call_from_input_fn=True
            ))
            for index in range(count)
        ]
        assert programs.as_devices(named(ours)) == programs.as_devices(named(recorded_runs[pipeline]["train"]["input_fn"])), pipeline
    in_model_fn = programs.snapshot(kte.TPUContext(strategy, kte.ModeKeys.TRAIN, 16))
    original = recorded_runs["PER_HOST_V1"]["train"]["model_fn"][0]
    assert programs.as_devices(named(in_model_fn)) == programs.as_devices(named(original))
