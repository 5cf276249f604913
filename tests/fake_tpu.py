"""A TPUStrategy on a machine without a TPU: builds and traces, never runs.

`FakeTPUResolver` reports 8 TPU cores, so `tf.distribute.TPUStrategy` builds
a real strategy whose variables are `TPUDistributedVariable`s and whose
`strategy.run` traces TPU replicate ops. Executing them fails (no TPU kernels).
Run as a script, it traces a model in TRAIN, EVAL and PREDICT and prints one
JSON line of op counts (a fresh process, so no other strategy is around).
"""

import collections
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.tpu import tpu_system_metadata  # noqa: E402

import keras_tpu_estimator as kte  # noqa: E402
from tests import models  # noqa: E402

TPU_OPS = ["TPUReplicateMetadata", "TPUReplicatedInput", "TPUReplicatedOutput", "TPUCompilationResult"]


class FakeTPUResolver(tf.distribute.cluster_resolver.ClusterResolver):
    """Claims `cores` TPU cores on this host."""

    def __init__(self, cores=8):
        self._cores = cores

    def cluster_spec(self):
        return tf.train.ClusterSpec({})

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        return ""

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        return {"TPU": self._cores}

    def get_tpu_system_metadata(self):
        devices = [
            tf.config.LogicalDevice(f"/job:localhost/replica:0/task:0/device:TPU:{i}", "TPU")
            for i in range(self._cores)
        ]
        return tpu_system_metadata.TPUSystemMetadata(
            num_cores=self._cores, num_hosts=1, num_of_cores_per_host=self._cores,
            topology=None, devices=devices,
        )

    @property
    def environment(self):
        return ""


def graph_nodes(concrete_function):
    """The nodes of a concrete function's graph and of every function it calls."""
    graph_def = concrete_function.graph.as_graph_def()
    nodes = list(graph_def.node)
    for function in graph_def.library.function:
        nodes.extend(function.node_def)
    return nodes


def op_counts(concrete_function):
    """How many ops of each type `graph_nodes` holds."""
    return collections.Counter(node.op for node in graph_nodes(concrete_function))


def data(num_rows=256):
    rng = np.random.RandomState(0)
    x = rng.randn(num_rows, 4).astype(np.float32)
    return {"x": x}, (x @ np.array([[1.0], [-2.0], [3.0], [0.5]], np.float32))


def input_fn(params):
    features, labels = data()
    dataset = tf.data.Dataset.from_tensor_slices((features, labels)).repeat()
    return dataset.batch(params["batch_size"], drop_remainder=params.get("drop_remainder", True))


def model_fn(features, labels, mode, params):
    """TF1 layers and optimizer, CrossShardOptimizer, eval_metrics and host_call."""
    hidden = tf.compat.v1.layers.dense(features["x"], 16, tf.nn.relu)
    output = tf.compat.v1.layers.dense(hidden, 1)
    if mode == kte.ModeKeys.PREDICT:
        return kte.TPUEstimatorSpec(mode, predictions={"y": output})
    loss = tf.compat.v1.losses.mean_squared_error(labels, output)
    step = tf.compat.v1.train.get_or_create_global_step()
    host_call = (lambda step_, loss_: None, [tf.reshape(step, [1]), tf.reshape(loss, [1])])
    if mode == kte.ModeKeys.EVAL:
        metrics = (lambda y, p: {"mae": tf.compat.v1.metrics.mean_absolute_error(y, p)}, [labels, output])
        return kte.TPUEstimatorSpec(mode, loss=loss, eval_metrics=metrics, host_call=host_call)
    optimizer = tf.compat.v1.tpu.CrossShardOptimizer(tf.compat.v1.train.AdamOptimizer(0.01))
    train_op = optimizer.minimize(loss, step)
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, host_call=host_call)


def step_after_model_fn(features, labels, mode, params):
    """ResNet's host_call: the global step read after `minimize` (rewired to the step's first value)."""
    spec = model_fn(features, labels, mode, params)
    step = tf.reshape(tf.compat.v1.train.get_global_step(), [1])
    return spec._replace(host_call=(lambda step_, loss_: None, [step, tf.reshape(spec.loss, [1])]))


def unfetched_ops_model_fn(features, labels, mode, params):
    """Builds an Adam update in every mode and a counter update that is never fetched."""
    counters = [
        tf.compat.v1.get_variable(name, [], tf.float32, tf.compat.v1.zeros_initializer(), trainable=False)
        for name in ("unfetched", "fetched")
    ]
    counters[0].assign_sub(1.0, name="unfetched_counter")
    output = tf.compat.v1.layers.dense(features["x"], 1)
    loss = tf.compat.v1.losses.mean_squared_error(labels, output)
    with tf.control_dependencies([counters[1].assign_sub(1.0, name="fetched_counter")]):
        train_op = tf.compat.v1.train.AdamOptimizer(0.01).minimize(
            loss, tf.compat.v1.train.get_or_create_global_step()
        )
    if mode == kte.ModeKeys.PREDICT:
        return kte.TPUEstimatorSpec(mode, predictions={"y": output})
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op if mode == kte.ModeKeys.TRAIN else None)


def moving_average_model_fn(features, labels, mode, params):
    """ResNet/EfficientNet style: an ExponentialMovingAverage of the weights after each step."""
    output = tf.compat.v1.layers.dense(features["x"], 1)
    loss = tf.compat.v1.losses.mean_squared_error(labels, output)
    step = tf.compat.v1.train.get_or_create_global_step()
    minimize = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, step)
    with tf.control_dependencies([minimize]):
        train_op = tf.compat.v1.train.ExponentialMovingAverage(0.5).apply(
            tf.compat.v1.trainable_variables()
        )
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


IDENTITY_SEEN = []


def identity_model_fn(features, labels, mode, params):
    """TF1 identity in the TPU trace: `global_variables()` when model_fn begins, `v.op.name`, tensors in sets."""
    at_start = sorted(v.op.name for v in tf.compat.v1.global_variables())
    output = tf.compat.v1.layers.dense(features["x"], 1)
    loss = tf.compat.v1.losses.mean_squared_error(labels, output)
    names = sorted(v.op.name for v in tf.compat.v1.trainable_variables())
    IDENTITY_SEEN.append([mode, at_start, names, len({loss, output, *tf.compat.v1.trainable_variables()})])
    step = tf.compat.v1.train.get_or_create_global_step()
    minimize = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, step)
    with tf.control_dependencies([minimize]):
        train_op = tf.compat.v1.train.ExponentialMovingAverage(0.5).apply(tf.compat.v1.trainable_variables())
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def summaries_model_fn(features, labels, mode, params):
    """EfficientDet's style: TF1 summaries inside model_fn (dropped on a TPU, as TPUEstimator did)."""
    output = tf.compat.v1.layers.dense(features["x"], 1)
    loss = tf.compat.v1.losses.mean_squared_error(labels, output)
    tf.compat.v1.summary.scalar("my_loss", loss)
    tf.compat.v1.summary.histogram("my_output", output)
    step = tf.compat.v1.train.get_or_create_global_step()
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, step)
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def tf1_summaries_report():
    """The TPU program's TF1 summary ops and the warning, for a model_fn that makes summaries."""
    import logging

    messages = []

    class Recorder(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    logger = logging.getLogger("keras_tpu_estimator")
    handler = Recorder(logging.WARNING)
    logger.addHandler(handler)
    try:
        counts = op_counts(make_model(model_fn=summaries_model_fn).trace(input_fn))
    finally:
        logger.removeHandler(handler)
    return {
        "summary_ops": sum(counts.get(op, 0) for op in ("ScalarSummary", "HistogramSummary", "MergeSummary")),
        "TPUReplicateMetadata": counts.get("TPUReplicateMetadata", 0),
        "warnings": [m for m in messages if "TF1 summaries" in m],
    }


def node_names(concrete_function):
    return [(node.name, node.op) for node in graph_nodes(concrete_function)]


def context_report(strategy):
    """`params['context']`'s public members on this TPUStrategy, in an input_fn (one pipeline) and a model_fn."""
    from tests.tpu_context_programs import snapshot

    pipeline = tf.distribute.InputContext(1, 0, strategy.num_replicas_in_sync)
    return {
        "input_fn": snapshot(kte.TPUContext(strategy, kte.ModeKeys.TRAIN, 64, pipeline, call_from_input_fn=True)),
        "model_fn": snapshot(kte.TPUContext(strategy, kte.ModeKeys.TRAIN, 64)),
    }


def make_model(params=None, model_fn=model_fn, **kwargs):
    """On a fresh fake 8-core TPUStrategy, batches of 64 (8 per core)."""
    return models.make_model(model_fn, tf.distribute.TPUStrategy(FakeTPUResolver()), params, batch=64, **kwargs)


def main():
    model = make_model()
    report = {"strategy": type(model.distribute_strategy).__name__,
              "replicas": model.distribute_strategy.num_replicas_in_sync}
    for mode in (kte.ModeKeys.TRAIN, kte.ModeKeys.EVAL, kte.ModeKeys.PREDICT):
        counts = op_counts(model.trace(input_fn, mode))
        report[mode] = {op: counts.get(op, 0) for op in TPU_OPS}
    report["variables"] = sorted({type(v.value).__name__ for v in model.variables})
    report["names"] = sorted(model.variables_by_name)
    report["context"] = context_report(model.distribute_strategy)
    try:
        model.fit(input_fn, callbacks=[kte.StopAtStep(steps=4)], verbose=0)
        report["fit"] = "ran"
    except tf.errors.InvalidArgumentError as error:
        report["fit"] = str(error).splitlines()[0][:120]
    pruned = make_model(model_fn=unfetched_ops_model_fn)
    report["fetches"] = {}
    for mode in (kte.ModeKeys.TRAIN, kte.ModeKeys.EVAL, kte.ModeKeys.PREDICT):
        nodes = node_names(pruned.trace(input_fn, mode))
        report["fetches"][mode] = {
            "unfetched_counter": sum("unfetched_counter" in name for name, _ in nodes),
            "fetched_counter": sum("/fetched_counter" in name for name, _ in nodes),
            "ResourceApplyAdam": sum(op == "ResourceApplyAdam" for _, op in nodes),
            "TPUReplicateMetadata": sum(op == "TPUReplicateMetadata" for _, op in nodes),
        }
    after = make_model(model_fn=step_after_model_fn)
    report["step_after"] = op_counts(after.trace(input_fn)).get("TPUReplicateMetadata", 0)
    averaged = make_model(model_fn=moving_average_model_fn)
    nodes = node_names(averaged.trace(input_fn))
    report["moving_average"] = {
        "names": sorted(n for n in averaged.variables_by_name if "ExponentialMovingAverage" in n),
        "AssignMovingAvg": sum("AssignMovingAvg" in name for name, _ in nodes),
        "TPUReplicateMetadata": sum(op == "TPUReplicateMetadata" for _, op in nodes),
    }
    identity = make_model(model_fn=identity_model_fn)
    identity.trace(input_fn)  # the build, then the TPU program: each starts from a fresh graph's collections
    report["tf1_identity"] = IDENTITY_SEEN
    report["tf1_summaries"] = tf1_summaries_report()
    jit = make_model(jit_compile=True)  # a TPU compiles the step anyway: the same program
    nodes = [node for node in graph_nodes(jit.trace(input_fn))]
    report["jit_compile"] = {
        "TPUReplicateMetadata": sum(node.op == "TPUReplicateMetadata" for node in nodes),
        "xla_marks": sum(node.attr["_XlaCompile"].b or node.attr["_XlaMustCompile"].b for node in nodes),
    }
    dynamic = make_model(params={"drop_remainder": False})
    try:
        dynamic.trace(input_fn)
        report["dynamic_batch"] = "traced"
    except ValueError as error:
        report["dynamic_batch"] = str(error)
    print(json.dumps(report))


if __name__ == "__main__":
    sys.exit(main())
