"""SavedModel export: CPU and TPU MetaGraphs, receivers, export outputs, atomic directories."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.saved_model import loader_impl

import keras_tpu_estimator as kte
from keras_tpu_estimator.export import saved_model as export
from tests.fixtures import models

CLI = str(pathlib.Path(sys.executable).parent / "saved_model_cli")
SEEN_USE_TPU = []


def model_fn(features, labels, mode, params):
    SEEN_USE_TPU.append(params.get("use_tpu"))
    spec = models.get_variable_mlp(features, labels, mode, params)
    if mode == kte.ModeKeys.PREDICT:
        y = spec.predictions["y"]
        outputs = {
            "serving_default": export.PredictOutput({"y": y}),
            "regress": export.RegressionOutput(y),
            "classify": export.ClassificationOutput(scores=tf.concat([y, -y], axis=1)),
        }
        return spec._replace(predictions={"y": y}, export_outputs=outputs)
    return spec


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("model")
    estimator = make(model_dir)
    estimator.train(models.input_fn, steps=3)
    return model_dir


def make(model_dir, **kwargs):
    config = kte.RunConfig(model_dir=str(model_dir), tpu_config=kte.TPUConfig(iterations_per_loop=2))
    return kte.TPUEstimator(model_fn, config=config, params={"optimizer": "sgd"}, train_batch_size=16,
                            eval_batch_size=16, predict_batch_size=16, **kwargs)


RAW = export.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 4], tf.float32),
                                                  "id": tf.TensorSpec([None], tf.int64)})
PARSING = export.build_parsing_serving_input_receiver_fn(
    {"x": tf.io.FixedLenFeature([4], tf.float32), "id": tf.io.FixedLenFeature([], tf.int64)})


def tag_sets(path):
    return sorted(sorted(mg.meta_info_def.tags) for mg in loader_impl.parse_saved_model(path).meta_graphs)


def test_serving_matches_predict_with_raw_and_parsing_receivers(trained, tmp_path):
    estimator = make(trained)
    features, _ = models.data(64)
    expected = np.concatenate([p["y"] for p in estimator.predict(models.predict_input_fn, yield_single_examples=False)])
    raw_path = estimator.export_saved_model(str(tmp_path), RAW)
    serve = tf.saved_model.load(raw_path, tags=["serve"]).signatures["serving_default"]
    np.testing.assert_allclose(serve(x=tf.constant(features["x"]), id=tf.constant(features["id"]))["y"].numpy(), expected, atol=1e-6)
    parsing_path = estimator.export_saved_model(str(tmp_path), PARSING)
    assert parsing_path != raw_path
    examples = [tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=row)),
        "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
    })).SerializeToString() for i, row in enumerate(features["x"])]
    loaded = tf.saved_model.load(parsing_path, tags=["serve"])
    result = loaded.signatures["serving_default"](examples=tf.constant(examples))
    np.testing.assert_allclose(result["y"].numpy(), expected, atol=1e-6)
    # classify / regress signatures round-trip with one string input.
    assert set(loaded.signatures) == {"serving_default", "classify", "regress"}
    scores = loaded.signatures["classify"](inputs=tf.constant(examples))["scores"].numpy()
    np.testing.assert_allclose(scores[:, 0], expected[:, 0], atol=1e-6)
    signature_defs = loader_impl.parse_saved_model(parsing_path).meta_graphs[0].signature_def
    assert signature_defs["classify"].method_name == "tensorflow/serving/classify"
    assert signature_defs["regress"].method_name == "tensorflow/serving/regress"
    assert signature_defs["serving_default"].method_name == "tensorflow/serving/predict"


def test_tag_sets_follow_the_export_flags(trained, tmp_path):
    assert tag_sets(make(trained).export_saved_model(str(tmp_path / "both"), RAW)) == [["serve"], ["serve", "tpu"]]
    assert tag_sets(make(trained, export_to_tpu=False).export_saved_model(str(tmp_path / "cpu"), RAW)) == [["serve"]]
    tpu_only = os.fsdecode(make(trained, export_to_cpu=False).export_saved_model(str(tmp_path / "tpu"), RAW))
    assert tag_sets(tpu_only) == [["serve", "tpu"]]
    assert tf.io.gfile.exists(os.path.join(tpu_only, "variables", "variables.index"))
    show = subprocess.run([CLI, "show", "--dir", tpu_only], capture_output=True, text=True, check=True).stdout
    assert "serve, tpu" in show


def test_saved_model_cli_shows_and_runs_the_cpu_graph(trained, tmp_path):
    path = make(trained).export_saved_model(str(tmp_path), RAW)
    show = subprocess.run([CLI, "show", "--dir", path, "--all"], capture_output=True, text=True, check=True).stdout
    assert "serve" in show and "serve, tpu" in show and "serving_default" in show
    run = subprocess.run(
        [CLI, "run", "--dir", path, "--tag_set", "serve", "--signature_def", "serving_default",
         "--input_exprs", "x=[[1.0,1.0,1.0,1.0],[1.0,1.0,1.0,1.0]];id=[0,0]"],
        capture_output=True, text=True, check=True,
    )
    assert "Result for output key y" in run.stdout


def test_tpu_metagraph_v1_runs_model_fn_in_a_tpu_partitioned_call_and_v2_sees_use_tpu(trained, tmp_path):
    """V1 as TPUEstimator wrote it: the graph calls a TPU program (a function) on a core it picks."""
    SEEN_USE_TPU.clear()
    path = make(trained).export_saved_model(str(tmp_path / "v1"), RAW)
    assert SEEN_USE_TPU == [False, True]
    tpu_graph = [mg for mg in loader_impl.parse_saved_model(path).meta_graphs if "tpu" in mg.meta_info_def.tags][0]
    ops = {node.op for node in tpu_graph.graph_def.node}
    assert {"TPUOrdinalSelector", "TPUPartitionedCall", "RestoreV2"} <= ops
    assert "TPUReplicateMetadata" not in ops
    (program,) = [f for f in tpu_graph.graph_def.library.function if f.signature.name.startswith("tpu_subgraph")]
    assert {"TPUReplicateMetadata", "TPUCompilationResult", "TPUReplicatedOutput", "MatMul"} <= {
        node.op for node in program.node_def
    }
    # Every signature's outputs come out of the partitioned call (classify's `classes` is None).
    for key in ("serving_default", "classify", "regress"):
        for info in tpu_graph.signature_def[key].outputs.values():
            assert info.name.startswith("TPUPartitionedCall:")
    SEEN_USE_TPU.clear()
    make(trained, export_saved_model_api_version=2).export_saved_model(str(tmp_path / "v2"), RAW)
    assert SEEN_USE_TPU == [False, True]


def test_a_failed_export_leaves_no_directory(trained, tmp_path):
    def broken_receiver():
        RAW()
        raise RuntimeError("receiver exploded")

    with pytest.raises(RuntimeError, match="receiver exploded"):
        make(trained).export_saved_model(str(tmp_path), broken_receiver)
    assert os.listdir(tmp_path) == []


def test_export_needs_a_checkpoint_and_a_known_output_type(tmp_path, trained):
    with pytest.raises(ValueError, match="Couldn't find trained model at"):
        make(tmp_path / "empty").export_saved_model(str(tmp_path / "out"), RAW)

    def bad_outputs(features, labels, mode, params):
        spec = model_fn(features, labels, mode, params)
        return spec._replace(export_outputs={"serving_default": object()}) if mode == "infer" else spec

    config = kte.RunConfig(model_dir=str(trained))
    estimator = kte.TPUEstimator(bad_outputs, config=config, params={"optimizer": "sgd"}, train_batch_size=16)
    with pytest.raises(TypeError, match="Values in `export_outputs` must be ExportOutput objects"):
        estimator.export_saved_model(str(tmp_path / "out"), RAW)
    assert not tf.io.gfile.exists(str(tmp_path / "out")) or os.listdir(tmp_path / "out") == []


def test_export_of_a_mirrored_model_serves_on_cpu(mirrored, tmp_path):
    model = kte.EstimatorModel(model_fn, params={"optimizer": "sgd"}, strategy=mirrored, train_batch_size=16,
                               predict_batch_size=16)
    exporter = kte.SavedModelExporter(str(tmp_path), RAW, keep=1)
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=4), exporter], verbose=0)
    assert len(exporter.exports) == 1 and tag_sets(exporter.exports[0]) == [["serve"]]
    features, _ = models.data(64)
    served = tf.saved_model.load(exporter.exports[0]).signatures["serving_default"](
        x=tf.constant(features["x"]), id=tf.constant(features["id"]))["y"].numpy()
    np.testing.assert_allclose(served, model.predict(models.predict_input_fn, verbose=0)["y"], atol=1e-6)


SUPERVISED = export.build_raw_supervised_input_receiver_fn(
    {"x": tf.TensorSpec([None, 4], tf.float32), "id": tf.TensorSpec([None], tf.int64)},
    tf.TensorSpec([None, 1], tf.float32),
)


def test_eval_export_writes_a_cpu_eval_graph_with_a_warning(trained, tmp_path, caplog):
    caplog.set_level("WARNING", logger="keras_tpu_estimator")
    estimator = make(trained)
    path = estimator.export_saved_model(str(tmp_path), SUPERVISED, experimental_mode=kte.ModeKeys.EVAL)
    assert "Mode eval will be ignored for TPU" in caplog.text
    assert tag_sets(path) == [["eval"]]
    signature = loader_impl.parse_saved_model(path).meta_graphs[0].signature_def["eval"]
    assert signature.method_name == "tensorflow/supervised/eval"
    features, labels = models.data(16)
    loaded = tf.saved_model.load(path, tags=["eval"]).signatures["eval"]
    loss = loaded(x=tf.constant(features["x"]), id=tf.constant(features["id"]), labels=tf.constant(labels))["loss"]

    def first_batch(params):
        return tf.data.Dataset.from_tensor_slices((features, labels)).batch(16)

    assert float(loss) == pytest.approx(estimator.evaluate(first_batch, steps=1)["loss"], rel=1e-5)


def test_train_export_needs_a_supervised_receiver_and_writes_a_train_graph(trained, tmp_path):
    estimator = make(trained, export_to_tpu=False)
    with pytest.raises(TypeError, match="needs a receiver fn that returns a SupervisedInputReceiver"):
        estimator.export_saved_model(str(tmp_path), RAW, experimental_mode=kte.ModeKeys.TRAIN)
    path = estimator.export_saved_model(str(tmp_path), SUPERVISED, experimental_mode=kte.ModeKeys.TRAIN)
    assert tag_sets(path) == [["train"]]
    signature = loader_impl.parse_saved_model(path).meta_graphs[0].signature_def["train"]
    assert signature.method_name == "tensorflow/supervised/training" and "loss" in signature.outputs


@pytest.mark.parametrize("export_to_tpu", [False, True])
def test_a_supervised_receiver_gives_its_labels_to_model_fn_in_a_serving_export(trained, tmp_path, export_to_tpu):
    """As the original, model_fn sees the labels in every PREDICT metagraph (TPU and CPU)."""
    seen = []

    def labelled_model_fn(features, labels, mode, params):
        seen.append(labels)
        spec = models.get_variable_mlp(features, labels, mode, params)
        return spec._replace(predictions={"y": spec.predictions["y"], "label": labels})

    config = kte.RunConfig(model_dir=str(trained))
    estimator = kte.TPUEstimator(labelled_model_fn, config=config, params={"optimizer": "sgd"},
                                 train_batch_size=16, export_to_tpu=export_to_tpu)
    path = estimator.export_saved_model(str(tmp_path), SUPERVISED)  # PREDICT
    assert len(seen) == 1 + export_to_tpu and all(labels is not None for labels in seen)
    if export_to_tpu:  # the TPU metagraph serves the labels too
        graphs = loader_impl.parse_saved_model(path).meta_graphs
        [tpu] = [g.signature_def["serving_default"] for g in graphs if "tpu" in g.meta_info_def.tags]
        assert "label" in tpu.outputs and "labels" in tpu.inputs
    signature = tf.saved_model.load(path, tags=["serve"]).signatures["serving_default"]
    features, labels = models.data(4)
    served = signature(x=tf.constant(features["x"]), id=tf.constant(features["id"]), labels=tf.constant(labels))
    np.testing.assert_array_equal(served["label"].numpy(), labels)


def test_export_outputs_follow_the_estimator_s_rules(trained, tmp_path):
    """Several outputs need a `serving_default`; a single one becomes it too (as get_export_outputs)."""

    def with_outputs(keys):
        def model_fn(features, labels, mode, params):
            spec = models.get_variable_mlp(features, labels, mode, params)
            if mode != kte.ModeKeys.PREDICT:
                return spec
            y = spec.predictions["y"]
            return spec._replace(export_outputs={key: export.PredictOutput({"y": y}) for key in keys})

        config = kte.RunConfig(model_dir=str(trained))
        return kte.TPUEstimator(model_fn, config=config, params={"optimizer": "sgd"}, train_batch_size=16,
                                export_to_tpu=False)

    with pytest.raises(ValueError, match="Multiple `export_outputs` were provided, but none of them are specified"):
        with_outputs(["a", "b"]).export_saved_model(str(tmp_path / "two"), RAW)
    path = with_outputs(["only"]).export_saved_model(str(tmp_path / "one"), RAW)
    signatures = loader_impl.parse_saved_model(path).meta_graphs[0].signature_def
    assert sorted(signatures) == ["only", "serving_default"]
