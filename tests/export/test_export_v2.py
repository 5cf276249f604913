"""Export API V2 (TPU inference with server-side batching), `export_estimator_savedmodel`, path types.

What the original wrote was measured with `scripts/original_export_v2.py`, run
by TensorFlow 2.15.1 + tensorflow-estimator 2.15.0 on CPU
(`TPUEstimator(use_tpu=False)`, one training step of the same `tower` model,
export with a `bytes` base), and is pinned in `ORIGINAL`. The TPU MetaGraph
cannot run without a TPU; it is checked by structure, as in `test_saved_model.py`.
"""

import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.saved_model import loader_impl

import keras_tpu_estimator as kte
from keras_tpu_estimator.export import saved_model as export
from keras_tpu_estimator.export.inference import (
    BatchConfig,
    inference_on_tpu,
    model_fn_inference_on_tpu,
)
from tests.fixtures import models
from tests.fixtures.saved_model_facts import describe

BATCH_CONFIG = BatchConfig(num_batch_threads=1, max_batch_size=4, batch_timeout_micros=100, allowed_batch_sizes=[4])

# --- measured on the original (scripts/original_export_v2.py) ------------------------------------
# Ops of variables and of the sharded Saver, in every MetaGraph the original wrote.
_SAVER_AND_VARIABLE_OPS = [
    "AssignVariableOp", "Const", "Identity", "MergeV2Checkpoints", "NoOp", "Pack", "Placeholder",
    "PlaceholderWithDefault", "ReadVariableOp", "RestoreV2", "SaveV2", "Select", "ShardedFilename",
    "StaticRegexFullMatch", "StringJoin", "VarHandleOp", "VarIsInitializedOp",
]
_VARIABLES = ["b", "global_step", "w"]
_CPU_GRAPH = {
    "signatures": ["serving_default"],
    "ops": sorted(_SAVER_AND_VARIABLE_OPS + ["AddV2", "MatMul"]),
    "functions": {},
    "batch_ops": [],
    "outputs": {"serving_default": {"y": "add:0"}},
    "variables": _VARIABLES,
}
# The TPU program: the function a TPUPartitionedCall runs (named without its hash suffix).
_TPU_PROGRAM = [
    "AddV2", "Identity", "MatMul", "NoOp", "ReadVariableOp", "TPUCompilationResult",
    "TPUReplicateMetadata", "TPUReplicatedOutput",
]
# The body of the BatchFunction op: picks a TPU core and calls the TPU program there.
_BATCH_BODY = ["Identity", "NoOp", "TPUOrdinalSelector", "TPUPartitionedCall"]


def _tpu_graph(ops: list, functions: dict, output: str, batch_ops: list) -> dict:
    return {
        "signatures": ["serving_default"],
        "ops": sorted(_SAVER_AND_VARIABLE_OPS + ops),
        "functions": functions,
        "batch_ops": batch_ops,
        "outputs": {"serving_default": {"y": output}},
        "variables": _VARIABLES,
    }


ORIGINAL = {
    "model_fn_inference_on_tpu_batched": {
        "serve": _CPU_GRAPH,
        "serve,tpu": _tpu_graph(
            ["BatchFunction"],
            {"__inference_computation": _BATCH_BODY, "tpu_subgraph": _TPU_PROGRAM},
            "batch/BatchFunction:1",  # 0 is predictions["y"], 1 the export output's "y"
            ["batch/BatchFunction"],
        ),
    },
    "model_fn_inference_on_tpu_unbatched": {
        "serve": _CPU_GRAPH,
        "serve,tpu": _tpu_graph(
            ["TPUOrdinalSelector", "TPUPartitionedCall"], {"tpu_subgraph": _TPU_PROGRAM}, "TPUPartitionedCall:1", []
        ),
    },
    "inference_on_tpu": {
        "serve": _CPU_GRAPH,
        "serve,tpu": _tpu_graph(
            ["BatchFunction"],
            {"__inference_computation": _BATCH_BODY,
             "tpu_computation": sorted(_TPU_PROGRAM + ["TPUReplicatedInput"])},
            "batch/BatchFunction:0",
            ["batch/BatchFunction"],
        ),
    },
    # API V1, whatever the estimator's export options: the whole model_fn in a partitioned call.
    "export_estimator_savedmodel": {
        "serve": _CPU_GRAPH,
        "serve,tpu": _tpu_graph(
            ["TPUOrdinalSelector", "TPUPartitionedCall"], {"tpu_subgraph": _TPU_PROGRAM}, "TPUPartitionedCall:1", []
        ),
    },
}
# The type of the path the original returned, by the type of `export_dir_base`, for every export
# above. A str base gave bytes too; this library returns str there (see test_export_dir_base_types).
ORIGINAL_RETURNED_TYPE = {"str": "bytes", "bytes": "bytes"}
# A V2 model_fn whose TPU program returns the feature `x` as a prediction: the original refused it
# (TPUEstimatorSpec's check, as the feature was a tensor of the outer graph); this library accepts it.
ORIGINAL_FEATURE_AS_PREDICTION = ["ValueError", 'prediction values with "x: x:0" must be from the default graph.']
# Running the {serve, tpu} signature on a CPU, the original (TF 2.15) failed at the core selector.
ORIGINAL_CPU_RUN_ERROR = "No OpKernel was registered to support Op 'TPUOrdinalSelector'"


# --- the model (the same ops as scripts/original_export_v2.py) -------------------------------------
def tower(features, labels, mode, params):
    w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.constant_initializer(0.5))
    b = tf.compat.v1.get_variable("b", [1], initializer=tf.compat.v1.zeros_initializer())
    y = tf.matmul(features["x"], w) + b
    if mode == kte.ModeKeys.PREDICT:
        outputs = {"serving_default": export.PredictOutput({"y": y})}
        return kte.TPUEstimatorSpec(mode, predictions={"y": y}, export_outputs=outputs)
    loss = tf.reduce_mean(tf.square(y - labels))
    step = tf.compat.v1.train.get_or_create_global_step()
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, step))


def batched_model_fn(features, labels, mode, params):
    if mode == kte.ModeKeys.PREDICT and params["use_tpu"]:
        return model_fn_inference_on_tpu(tower, features, labels, params=params, batch_config=BATCH_CONFIG)
    return tower(features, labels, mode, params)


def unbatched_model_fn(features, labels, mode, params):
    if mode == kte.ModeKeys.PREDICT and params["use_tpu"]:
        return model_fn_inference_on_tpu(tower, features, labels, params=params)
    return tower(features, labels, mode, params)


def computation_model_fn(features, labels, mode, params):
    if not (mode == kte.ModeKeys.PREDICT and params["use_tpu"]):
        return tower(features, labels, mode, params)

    def computation(x):
        return tower({"x": x}, None, mode, params).predictions["y"]

    (y,) = inference_on_tpu(computation, [features["x"]], num_batch_threads=1, max_batch_size=4,
                            batch_timeout_micros=100)
    outputs = {"serving_default": export.PredictOutput({"y": y})}
    return kte.TPUEstimatorSpec(mode, predictions={"y": y}, export_outputs=outputs)


MODEL_FNS = {
    "model_fn_inference_on_tpu_batched": batched_model_fn,
    "model_fn_inference_on_tpu_unbatched": unbatched_model_fn,
    "inference_on_tpu": computation_model_fn,
}
X = np.random.RandomState(0).randn(8, 4).astype(np.float32)


def input_fn(params):
    labels = X @ models.WEIGHTS
    return tf.data.Dataset.from_tensor_slices(({"x": X}, labels)).repeat().batch(4, drop_remainder=True)


def predict_input_fn(params):
    return tf.data.Dataset.from_tensor_slices({"x": X}).batch(4)


def receiver_fn():
    x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
    return export.ServingInputReceiver({"x": x}, {"x": x})


def make(model_dir, model_fn=tower, **kwargs):
    return kte.TPUEstimator(model_fn, config=kte.RunConfig(model_dir=str(model_dir)), use_tpu=False,
                            train_batch_size=4, predict_batch_size=4, **kwargs)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("model")
    make(model_dir).train(input_fn, steps=3)
    return model_dir


def predicted(model_dir):
    return np.concatenate([p["y"] for p in make(model_dir).predict(predict_input_fn, yield_single_examples=False)])


def meta_graph(path, tags):
    return next(mg for mg in loader_impl.parse_saved_model(path).meta_graphs if sorted(mg.meta_info_def.tags) == tags)


# --- export API V2 -----------------------------------------------------------------------------------
@pytest.mark.parametrize("case", list(MODEL_FNS))
def test_v2_export_writes_the_meta_graphs_the_original_wrote(trained, tmp_path, case):
    estimator = make(trained, MODEL_FNS[case], export_saved_model_api_version=kte.ExportSavedModelApiVersion.V2)
    path = estimator.export_saved_model(os.fsencode(tmp_path / "export"), receiver_fn)
    assert type(path).__name__ == ORIGINAL_RETURNED_TYPE["bytes"]
    assert describe(path) == ORIGINAL[case]


def test_the_batching_op_calls_the_tpu_program_through_a_partitioned_call(trained, tmp_path):
    estimator = make(trained, batched_model_fn, export_saved_model_api_version=2)
    tpu = meta_graph(estimator.export_saved_model(str(tmp_path), receiver_fn), ["serve", "tpu"])
    functions = {f.signature.name: f for f in tpu.graph_def.library.function}
    (batch,) = [node for node in tpu.graph_def.node if node.op == "BatchFunction"]
    # The BatchConfig reaches the op; max_enqueued_batches is BatchConfig's default (100), not TF's (10).
    assert batch.attr["num_batch_threads"].i == 1 and batch.attr["max_batch_size"].i == 4
    assert batch.attr["batch_timeout_micros"].i == 100 and list(batch.attr["allowed_batch_sizes"].list.i) == [4]
    assert batch.attr["max_enqueued_batches"].i == 100
    assert [node.op for node in tpu.graph_def.node if node.name == batch.input[0]] == ["Placeholder"]
    body = functions[batch.attr["f"].func.name]
    (call,) = [node for node in body.node_def if node.op == "TPUPartitionedCall"]
    (selector,) = [node for node in body.node_def if node.op == "TPUOrdinalSelector"]
    assert call.input[-1].startswith(selector.name + ":")  # the core is picked per call
    program = functions[call.attr["f"].func.name]
    assert {"TPUReplicateMetadata", "MatMul"} <= {node.op for node in program.node_def}
    # The served tensor comes out of the batching op.
    assert tpu.signature_def["serving_default"].outputs["y"].name.startswith(batch.name + ":")


def test_v2_cpu_graph_serves_the_numbers_of_predict_and_the_tpu_graph_needs_a_tpu(trained, tmp_path):
    estimator = make(trained, batched_model_fn, export_saved_model_api_version=2)
    path = estimator.export_saved_model(str(tmp_path), receiver_fn)
    serve = tf.saved_model.load(path, tags=["serve"]).signatures["serving_default"]
    expected = predicted(trained)
    np.testing.assert_allclose(serve(x=tf.constant(X))["y"].numpy(), expected, atol=1e-6)
    assert not np.allclose(expected, X @ np.full([4, 1], 0.5, np.float32))  # trained, not initial values
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        loaded = tf.compat.v1.saved_model.loader.load(session, ["serve", "tpu"], path)
        assert "batch/BatchFunction" in {op.name for op in graph.get_operations()}
        w = [v for v in tf.compat.v1.global_variables() if v.op.name == "w"][0]
        np.testing.assert_array_equal(session.run(w), tf.train.load_variable(str(trained), "w"))
        signature = loaded.signature_def["serving_default"]
        with pytest.raises(tf.errors.InvalidArgumentError, match=ORIGINAL_CPU_RUN_ERROR):
            session.run(signature.outputs["y"].name, {signature.inputs["x"].name: X})


def test_keras_layers_in_the_tpu_program_keep_their_checkpoint_names(tmp_path):
    def model_fn(features, labels, mode, params):
        if mode == kte.ModeKeys.PREDICT and params["use_tpu"]:
            return model_fn_inference_on_tpu(models.keras_layers_model, features, labels, params=params,
                                             batch_config=BATCH_CONFIG)
        return models.keras_layers_model(features, labels, mode, params)

    estimator = make(tmp_path / "model", model_fn, export_saved_model_api_version=2)
    estimator.train(input_fn, steps=2)
    graphs = describe(estimator.export_saved_model(str(tmp_path / "export"), receiver_fn))
    names = ["dense/bias", "dense/kernel", "dense_1/bias", "dense_1/kernel", "global_step"]
    assert graphs["serve"]["variables"] == graphs["serve,tpu"]["variables"] == names
    assert set(names) <= {name for name, _ in tf.train.list_variables(estimator.latest_checkpoint())}


# --- export_dir_base types -----------------------------------------------------------------------------
def test_export_dir_base_types(trained, tmp_path):
    checkpoint = tf.train.latest_checkpoint(str(trained))
    as_bytes = export.export_saved_model(os.fsencode(tmp_path / "b"), receiver_fn, tower, checkpoint)
    assert isinstance(as_bytes, bytes) and as_bytes.startswith(os.fsencode(tmp_path / "b") + b"/")
    assert os.path.exists(os.path.join(as_bytes, b"saved_model.pb"))
    as_str = export.export_saved_model(str(tmp_path / "s"), receiver_fn, tower, checkpoint)
    assert isinstance(as_str, str) and as_str.startswith(str(tmp_path / "s") + "/")
    as_path = export.export_saved_model(tmp_path / "p", receiver_fn, tower, checkpoint)
    assert isinstance(as_path, str) and os.path.exists(os.path.join(as_path, "saved_model.pb"))
    facade = make(trained).export_saved_model(os.fsencode(tmp_path / "f"), receiver_fn)
    assert type(facade).__name__ == ORIGINAL_RETURNED_TYPE["bytes"]
    facade = make(trained).export_saved_model(str(tmp_path / "f"), receiver_fn)
    assert type(facade).__name__ == ORIGINAL_RETURNED_TYPE["str"]
    with pytest.raises(TypeError, match=r"`export_dir_base` must be a str, bytes or os.PathLike path. Received: export_dir_base=3"):
        export.export_saved_model(3, receiver_fn, tower, checkpoint)
    assert sorted(os.listdir(tmp_path)) == ["b", "f", "p", "s"]


# --- export_estimator_savedmodel ---------------------------------------------------------------------------
def test_export_estimator_savedmodel_writes_cpu_and_v1_tpu_graphs_whatever_the_options(trained, tmp_path):
    estimator = make(trained, export_to_tpu=False, export_saved_model_api_version=2)
    path = export.export_estimator_savedmodel(estimator, os.fsencode(tmp_path), receiver_fn)
    assert type(path).__name__ == ORIGINAL_RETURNED_TYPE["bytes"]
    assert describe(path) == ORIGINAL["export_estimator_savedmodel"]
    serve = tf.saved_model.load(path, tags=["serve"]).signatures["serving_default"]
    np.testing.assert_allclose(serve(x=tf.constant(X))["y"].numpy(), predicted(trained), atol=1e-6)
    explicit = export.export_estimator_savedmodel(estimator, str(tmp_path), receiver_fn, checkpoint_path=str(trained))
    assert type(explicit).__name__ == ORIGINAL_RETURNED_TYPE["str"] and explicit != path
    with pytest.raises(ValueError, match="Couldn't find trained model at"):
        export.export_estimator_savedmodel(make(tmp_path / "untrained"), str(tmp_path / "none"), receiver_fn)
    assert not os.path.exists(tmp_path / "none")


def test_v1_export_of_a_model_fn_that_calls_the_v2_api_says_to_use_v2(trained, tmp_path):
    with pytest.raises(NotImplementedError, match="cannot be nested.*ExportSavedModelApiVersion.V2"):
        make(trained, batched_model_fn).export_saved_model(str(tmp_path), receiver_fn)
    assert os.listdir(tmp_path) == []


# --- model_fn_inference_on_tpu, in a graph -----------------------------------------------------------------
def _outputs_model_fn(features, mode, params):
    y = tf.matmul(features["x"], tf.compat.v1.get_variable("w", [4, 1]))
    outputs = {
        "serving_default": export.PredictOutput({"y": y, "twice": 2 * y}),
        "classify": export.ClassificationOutput(scores=tf.concat([y, -y], 1)),
        "regress": export.RegressionOutput(y),
    }
    return kte.TPUEstimatorSpec(mode, predictions=y, export_outputs=outputs)


@pytest.mark.parametrize("batch_config, op", [(None, "TPUPartitionedCall"), (BATCH_CONFIG, "BatchFunction")])
def test_model_fn_inference_on_tpu_returns_the_spec_with_the_tpu_call_s_tensors(batch_config, op):
    with tf.Graph().as_default():
        features = {"x": tf.compat.v1.placeholder(tf.float32, [None, 4])}
        spec = model_fn_inference_on_tpu(_outputs_model_fn, features, params={}, batch_config=batch_config)
        assert isinstance(spec, kte.TPUEstimatorSpec) and spec.mode == kte.ModeKeys.PREDICT
        assert isinstance(spec.predictions, tf.Tensor) and spec.predictions.op.type == op  # a tensor stays one
        assert list(spec.export_outputs) == ["serving_default", "classify", "regress"]
        predict, classify, regress = spec.export_outputs.values()
        assert sorted(predict.outputs) == ["twice", "y"] and classify.classes is None
        tensors = [*predict.outputs.values(), classify.scores, regress.value]
        assert {t.op.type for t in tensors} == {op}
        # The call's outputs, as the original laid them out (and the pinned "batch/BatchFunction:1"
        # shows): predictions, then the export outputs by sorted key, each in its own order.
        assert spec.predictions.value_index == 0
        assert [classify.scores.value_index, regress.value.value_index] == [1, 2]
        assert [predict.outputs["y"].value_index, predict.outputs["twice"].value_index] == [3, 4]
        if batch_config is None:  # what computes each output, inside the TPU program
            assert program_outputs(spec.predictions.op) == ["MatMul", "ConcatV2", "MatMul", "MatMul", "Mul"]


def program_outputs(call):
    """The op type computing each output of the TPU program that `call` (a TPUPartitionedCall) runs.

    Identities are looked through; "input" is an argument of the program.
    """
    library = call.graph.as_graph_def().library
    (program,) = [f for f in library.function if f.signature.name == call.get_attr("f").name]
    nodes = {node.name: node for node in program.node_def}
    types = []
    for arg in program.signature.output_arg:
        node = nodes[program.ret[arg.name].split(":")[0]]
        while node is not None and node.op in ("Identity", "TPUReplicatedOutput"):
            node = nodes.get(node.input[0].split(":")[0])
        types.append("input" if node is None else node.op)
    return types


def test_a_feature_returned_as_a_prediction_comes_out_of_the_tpu_call():
    def passing_x(features, mode, params):
        y = _outputs_model_fn(features, mode, params).predictions
        return kte.TPUEstimatorSpec(mode, predictions={"y": y, "x": features["x"]})

    with tf.Graph().as_default():
        features = {"x": tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")}
        spec = model_fn_inference_on_tpu(passing_x, features, params={})  # ORIGINAL_FEATURE_AS_PREDICTION
        assert [spec.predictions[k].op.type for k in ("x", "y")] == ["TPUPartitionedCall"] * 2
        assert program_outputs(spec.predictions["x"].op) == ["input", "MatMul"]


def test_model_fn_inference_on_tpu_checks_what_it_is_given():
    with tf.Graph().as_default():
        features = {"x": tf.compat.v1.placeholder(tf.float32, [None, 4])}
        with pytest.raises(TypeError, match="`batch_config` must be a BatchConfig or None"):
            model_fn_inference_on_tpu(_outputs_model_fn, features, batch_config={"max_batch_size": 4})
        with pytest.raises(TypeError, match="Expected int for argument `max_batch_size`"):
            model_fn_inference_on_tpu(_outputs_model_fn, features, batch_config=BatchConfig(1, None, 100, None))

        def bad_outputs(features, mode, params):
            spec = _outputs_model_fn(features, mode, params)
            return spec._replace(export_outputs={"serving_default": spec.predictions})

        with pytest.raises(ValueError, match="`export_output` must be have type `ClassificationOutput`"):
            model_fn_inference_on_tpu(bad_outputs, features, params={})
        with pytest.raises(NotImplementedError, match="tpu_shard_context cannot be nested"):
            tf.compat.v1.tpu.rewrite(lambda: model_fn_inference_on_tpu(_outputs_model_fn, features).predictions)
    with pytest.raises(RuntimeError, match="runs only while a TF1 graph is built"):
        model_fn_inference_on_tpu(_outputs_model_fn, {"x": tf.ones([1, 4])})
    with pytest.raises(RuntimeError, match="It was called eagerly"):
        inference_on_tpu(lambda t: t, [tf.ones([1, 4])], **VALID)


# --- inference_on_tpu and BatchConfig ----------------------------------------------------------------------
def test_batch_config_has_the_original_s_fields_and_default():
    assert BatchConfig._fields == (
        "num_batch_threads", "max_batch_size", "batch_timeout_micros", "allowed_batch_sizes", "max_enqueued_batches"
    )
    assert BatchConfig(2, 8, 10, None) == (2, 8, 10, None, 100)
    with pytest.raises(TypeError, match="allowed_batch_sizes"):
        BatchConfig(2, 8, 10)


def test_inference_on_tpu_without_max_batch_size_builds_no_batching_op():
    with tf.Graph().as_default() as graph:
        x = tf.compat.v1.placeholder(tf.float32, [None, 4])
        for max_batch_size in (None, 0):
            outputs = inference_on_tpu(lambda t: [2 * t, t + 1], [x], 1, max_batch_size, 100)
            assert [t.op.type for t in outputs] == ["TPUPartitionedCall"] * 2
        assert "BatchFunction" not in {op.type for op in graph.get_operations()}


VALID = {"num_batch_threads": 1, "max_batch_size": 4, "batch_timeout_micros": 100}


@pytest.mark.parametrize(
    "computation, inputs, arguments, error, message",
    [
        (None, "list", {}, TypeError, "`computation` must be callable"),
        ("fn", "tensor", {}, TypeError, "`inputs_to_tpu` must be a list of tensors"),
        ("fn", "numpy", {}, TypeError, "Every entry of `inputs_to_tpu` must be a tf.Tensor"),
        ("fn", "list", {"num_batch_threads": "1"}, TypeError, "Expected int for argument `num_batch_threads`"),
        ("fn", "list", {"max_batch_size": 2.5}, TypeError, "Expected int for argument `max_batch_size`"),
        ("fn", "list", {"allowed_batch_sizes": [4, 2]}, ValueError,
         r"entries must be monotonically increasing. Received: allowed_batch_sizes=\[4, 2\]"),
        ("fn", "list", {"allowed_batch_sizes": "4"}, TypeError, "must be a list of integers or None"),
        ("fn", "list", {"max_batch_size": -2}, ValueError, "`max_batch_size` must be at least 1"),
        ("fn", "list", {"num_batch_threads": -1}, ValueError, "`num_batch_threads` must be at least 0"),
        ("fn", "list", {"batch_timeout_micros": -1}, ValueError, "`batch_timeout_micros` must be at least 0"),
        ("fn", "list", {"max_enqueued_batches": 0}, ValueError, "`max_enqueued_batches` must be at least 1"),
    ],
)
def test_inference_on_tpu_checks_its_arguments_before_building(computation, inputs, arguments, error, message):
    with tf.Graph().as_default() as graph:
        x = tf.compat.v1.placeholder(tf.float32, [None, 4])
        values = {"list": [x], "tensor": x, "numpy": [np.ones([1, 4], np.float32)]}[inputs]
        fn = (lambda t: 2 * t) if computation == "fn" else computation
        with pytest.raises(error, match=message):
            inference_on_tpu(fn, values, **{**VALID, **arguments})
        assert {op.type for op in graph.get_operations()} == {"Placeholder"}


def test_inference_on_tpu_accepts_what_the_batching_op_accepts():
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4])
        arguments = {**VALID, "num_batch_threads": 0, "allowed_batch_sizes": [1, 2], "max_enqueued_batches": 3}
        (y,) = inference_on_tpu(lambda t: 2 * t, [x], **arguments)
        assert y.op.type == "BatchFunction"
        assert list(y.op.get_attr("allowed_batch_sizes")) == [1, 2] and y.op.get_attr("max_enqueued_batches") == 3

