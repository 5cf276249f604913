"""`keras_tpu_estimator.estimator`: a TPUEstimator program migrates by swapping one import."""

import numpy as np
import pytest
import tensorflow as tf

from keras_tpu_estimator import estimator as tf_estimator

# Public names of the original's namespaces (TF 2.15 + tensorflow-estimator 2.15, from
# `dir(tf.compat.v1.estimator.tpu)` etc.) that TPUEstimator programs use.
ORIGINAL_TPU = ["InputPipelineConfig", "RunConfig", "TPUConfig", "TPUEstimator", "TPUEstimatorSpec", "experimental"]
ORIGINAL_TPU_EXPERIMENTAL = ["EmbeddingConfigSpec"]
ORIGINAL_EXPORT = [
    "ClassificationOutput", "ExportOutput", "PredictOutput", "RegressionOutput", "ServingInputReceiver",
    "TensorServingInputReceiver", "build_parsing_serving_input_receiver_fn", "build_raw_serving_input_receiver_fn",
]
ORIGINAL_ESTIMATOR = [
    "CheckpointSaverHook", "CheckpointSaverListener", "EstimatorSpec", "FeedFnHook", "FinalOpsHook",
    "GlobalStepWaiterHook", "LoggingTensorHook", "ModeKeys", "NanLossDuringTrainingError", "NanTensorHook",
    "ProfilerHook", "RunConfig", "SecondOrStepTimer", "SessionRunArgs", "SessionRunContext", "SessionRunHook",
    "SessionRunValues", "StepCounterHook", "StopAtStepHook", "SummarySaverHook", "WarmStartSettings", "export", "tpu",
]


def test_the_namespaces_hold_the_original_names():
    assert [n for n in ORIGINAL_ESTIMATOR if not hasattr(tf_estimator, n)] == []
    assert [n for n in ORIGINAL_TPU if not hasattr(tf_estimator.tpu, n)] == []
    assert [n for n in ORIGINAL_TPU_EXPERIMENTAL if not hasattr(tf_estimator.tpu.experimental, n)] == []
    assert [n for n in ORIGINAL_EXPORT if not hasattr(tf_estimator.export, n)] == []
    assert tf_estimator.SessionRunHook is tf.compat.v1.train.SessionRunHook
    assert tf_estimator.ModeKeys.PREDICT == "infer"


def test_tf_contrib_tpu_names_fall_through_to_tf_compat_v1_tpu():
    assert tf_estimator.tpu.CrossShardOptimizer is tf.compat.v1.tpu.CrossShardOptimizer
    assert tf_estimator.tpu.bfloat16_scope is tf.compat.v1.tpu.bfloat16_scope
    with pytest.raises(AttributeError, match="Neither keras_tpu_estimator.estimator.tpu nor tf.compat.v1.tpu"):
        tf_estimator.tpu.NoSuchThing  # noqa: B018


def test_what_is_not_provided_says_so():
    with pytest.raises(AttributeError, match="tf.estimator.DNNClassifier is not provided.*TPUEstimator.train"):
        tf_estimator.DNNClassifier  # noqa: B018
    with pytest.raises(NotImplementedError, match="tf.tpu.experimental.embedding.TPUEmbedding"):
        tf_estimator.tpu.experimental.EmbeddingConfigSpec(feature_columns=[])


# A TPUEstimator program as its owners wrote it against `tf.compat.v1.estimator`; only the import
# at the top of this file changed. It uses tf.contrib.tpu-era CrossShardOptimizer through `tpu`.
def model_fn(features, labels, mode, params):
    logits = tf.compat.v1.layers.dense(
        features["x"], 1, kernel_initializer=tf.compat.v1.constant_initializer(0.1), name="dense")
    predictions = {"y": logits}
    if mode == tf_estimator.ModeKeys.PREDICT:
        return tf_estimator.tpu.TPUEstimatorSpec(
            mode, predictions=predictions,
            export_outputs={"serving_default": tf_estimator.export.PredictOutput(predictions)})
    loss = tf.reduce_mean(tf.square(logits - labels))
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
    if params["use_tpu"]:
        optimizer = tf_estimator.tpu.CrossShardOptimizer(optimizer)
    train_op = optimizer.minimize(loss, tf.compat.v1.train.get_global_step())

    def metric_fn(labels, logits):
        return {"mae": tf.compat.v1.metrics.mean_absolute_error(labels, logits)}

    return tf_estimator.tpu.TPUEstimatorSpec(
        mode, loss=loss, train_op=train_op, eval_metrics=(metric_fn, [labels, logits]))


def input_fn(params):
    x = np.arange(64, dtype=np.float32).reshape(16, 4) / 64
    y = x.sum(axis=1, keepdims=True)
    dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat()
    return dataset.batch(params["batch_size"], drop_remainder=True)


def predict_input_fn(params):
    x = np.arange(64, dtype=np.float32).reshape(16, 4) / 64
    return tf.data.Dataset.from_tensor_slices({"x": x}).batch(params["batch_size"])


def serving_input_receiver_fn():
    x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
    return tf_estimator.export.ServingInputReceiver({"x": x}, {"x": x})


def test_a_program_written_for_tf_compat_v1_estimator_runs_after_the_swap(tmp_path):
    config = tf_estimator.tpu.RunConfig(
        model_dir=str(tmp_path / "model"),
        tpu_config=tf_estimator.tpu.TPUConfig(
            iterations_per_loop=4,
            per_host_input_for_training=tf_estimator.tpu.InputPipelineConfig.PER_HOST_V2))
    estimator = tf_estimator.tpu.TPUEstimator(
        model_fn=model_fn, config=config, use_tpu=True,
        train_batch_size=8, eval_batch_size=8, predict_batch_size=8)
    estimator.train(input_fn, max_steps=8)
    results = estimator.evaluate(input_fn, steps=2)
    assert results["global_step"] == 8 and set(results) == {"mae", "loss", "global_step"}
    predictions = list(estimator.predict(predict_input_fn))
    assert len(predictions) == 16
    export_dir = estimator.export_saved_model(str(tmp_path / "export"), serving_input_receiver_fn)
    served = tf.saved_model.load(tf.compat.as_str(export_dir), tags=["serve"])
    x = np.arange(64, dtype=np.float32).reshape(16, 4)[:2] / 64
    output = served.signatures["serving_default"](x=tf.constant(x))
    np.testing.assert_allclose(output["y"].numpy()[:, 0], [p["y"][0] for p in predictions[:2]], rtol=1e-6)
