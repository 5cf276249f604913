"""Strategy resolution, per-replica batch arithmetic and the params['context'] object."""

import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.distribute.strategy import per_replica_batch_size


def test_without_tpu_or_gpus_the_default_strategy_is_used():
    assert kte.resolve_strategy(use_tpu=True) is tf.distribute.get_strategy()
    assert kte.resolve_strategy(use_tpu=False) is tf.distribute.get_strategy()


def test_a_strategy_in_scope_is_used_by_the_model(mirrored):
    with mirrored.scope():
        model = kte.EstimatorModel(lambda features, params: None, train_batch_size=8)
    assert model.distribute_strategy is mirrored


def test_per_replica_batch_size():
    assert per_replica_batch_size(16, 4, "x") == 4
    with pytest.raises(ValueError, match=r"^train batch size 10 must be divisible by number of replicas 4. Set `train_batch_size`"):
        per_replica_batch_size(10, 4, "train_batch_size")


def test_context_describes_the_replicas(mirrored):
    context = kte.TPUContext(mirrored, kte.ModeKeys.TRAIN, 16, call_from_input_fn=True)
    assert context.num_replicas == 4 and context.num_hosts == 1
    assert context.num_of_replicas_per_host == 4 and context.current_host == 0
    # (host device, invocation index, invocations, replicas fed); tests/distribute/test_tpu_context.py pins them.
    assert context.current_input_fn_deployment() == ("/job:localhost/replica:0/task:0/device:CPU:0", 0, 1, 4)
    assert context.is_running_on_tpu is False


def test_context_members_only_where_the_original_allowed_them(mirrored):
    in_model_fn = kte.TPUContext(mirrored, kte.ModeKeys.TRAIN, 16)
    in_input_fn = kte.TPUContext(mirrored, kte.ModeKeys.TRAIN, 16, call_from_input_fn=True)
    assert in_model_fn.device_assignment is None
    for call in (in_model_fn.current_input_fn_deployment, lambda: in_model_fn.current_host):
        with pytest.raises(RuntimeError, match="^This TPUContext instance must not be called from model_fn.$"):
            call()
    with pytest.raises(RuntimeError, match="^This TPUContext instance must not be called from input_fn.$"):
        in_input_fn.device_assignment  # noqa: B018


# ------------------------------------------------------------------ TPU resolution order
class _Recorder:
    """Stands in for the TPU entry points; `local_works` decides what 'local' finds."""

    def __init__(self, local_works):
        self.calls = []
        self.local_works = local_works

    def resolver(self, tpu=None):
        recorder = self

        class Resolver:
            name = tpu

            def master(self):
                return "" if tpu == "local" else f"grpc://{tpu}:8470"

        recorder.calls.append(("resolve", tpu))
        if tpu == "local" and not self.local_works:
            raise ValueError("Please provide a TPU Name to connect to.")
        return Resolver()

    def connect(self, resolver):
        self.calls.append(("connect", resolver.name))

    def initialize(self, resolver):
        self.calls.append(("initialize", resolver.name))

    def strategy(self, resolver):
        self.calls.append(("strategy", resolver.name))
        return f"TPUStrategy({resolver.name})"


@pytest.fixture
def tpu_entry_points(monkeypatch):
    from keras_tpu_estimator.distribute import strategy as strategy_module

    def install(local_works):
        recorder = _Recorder(local_works)
        monkeypatch.setattr(strategy_module, "_RESOLVED", {})
        monkeypatch.setattr(strategy_module, "_INITIALIZED", set())
        monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", recorder.resolver)
        monkeypatch.setattr(tf.config, "experimental_connect_to_cluster", recorder.connect)
        monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system", recorder.initialize)
        monkeypatch.setattr(tf.distribute, "TPUStrategy", recorder.strategy)
        return recorder

    return install


def test_a_tpu_vm_resolves_local_first_without_connecting(tpu_entry_points, monkeypatch):
    recorder = tpu_entry_points(local_works=True)
    monkeypatch.setenv("TPU_NAME", "my-tpu")
    assert kte.resolve_strategy(use_tpu=True) == "TPUStrategy(local)"
    assert kte.resolve_strategy(use_tpu=True) == "TPUStrategy(local)"  # cached
    assert recorder.calls == [("resolve", "local"), ("initialize", "local"), ("strategy", "local")]


def test_a_named_tpu_is_tried_after_local_and_connected(tpu_entry_points):
    recorder = tpu_entry_points(local_works=False)
    assert kte.resolve_strategy(use_tpu=True, master="my-tpu") == "TPUStrategy(my-tpu)"
    assert recorder.calls == [
        ("resolve", "local"), ("resolve", "my-tpu"), ("connect", "my-tpu"),
        ("initialize", "my-tpu"), ("strategy", "my-tpu"),
    ]


def test_the_tpu_system_is_initialised_once_per_process(tpu_entry_points, monkeypatch):
    from keras_tpu_estimator.distribute import strategy as strategy_module

    recorder = tpu_entry_points(local_works=True)
    monkeypatch.setenv("TPU_NAME", "my-tpu")
    kte.resolve_strategy(use_tpu=True)
    monkeypatch.setattr(strategy_module, "_RESOLVED", {})  # a new resolution, same process
    kte.resolve_strategy(use_tpu=True)
    assert [c for c in recorder.calls if c[0] == "initialize"] == [("initialize", "local")]


def test_colab_tpu_address_is_the_configured_name(tpu_entry_points, monkeypatch):
    recorder = tpu_entry_points(local_works=False)
    monkeypatch.delenv("TPU_NAME", raising=False)
    monkeypatch.setenv("COLAB_TPU_ADDR", "10.0.0.2:8470")
    assert kte.resolve_strategy(use_tpu=True) == "TPUStrategy(grpc://10.0.0.2:8470)"
    assert ("connect", "grpc://10.0.0.2:8470") in recorder.calls
