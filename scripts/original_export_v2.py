"""Measures what the original TPUEstimator writes for export API V2 and `export_estimator_savedmodel`.

Needs TensorFlow 2.15 with tensorflow-estimator 2.15 (never a project dependency):

    /root/.cache/tpu-estimator-2.15/bin/python scripts/original_export_v2.py

Trains the tiny model of `tests/export/test_export_v2.py` (one `get_variable` matmul)
for one step with `TPUEstimator(use_tpu=False)` on CPU, exports it, and prints
as JSON, per export: the type of the returned path for a `str` and a `bytes`
`export_dir_base`, and per MetaGraph (by tag set): the signature keys and
output tensor names, the op types of the graph and of each function in its
library (function names without their generated suffix), the names of the
batching ops and of the variables. The plain `Estimator` case exports with
`export_estimator_savedmodel`. Last, the error (if any) of a V2 export whose
TPU program returns a feature as a prediction.
`tests/export/test_export_v2.py` pins some of these facts as constants.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow_estimator.python.estimator import estimator as estimator_lib  # noqa: E402
from tensorflow_estimator.python.estimator.export import export_lib  # noqa: E402
from tensorflow_estimator.python.estimator.tpu import tpu_config, tpu_estimator  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures"))
from saved_model_facts import describe  # noqa: E402

BATCH_CONFIG = tpu_estimator.BatchConfig(
    num_batch_threads=1, max_batch_size=4, batch_timeout_micros=100, allowed_batch_sizes=[4]
)


def tower(features, labels, mode, params):
    """y = x @ w + b with TF1 variables; the model of tests/export/test_export_v2.py."""
    w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.constant_initializer(0.5))
    b = tf.compat.v1.get_variable("b", [1], initializer=tf.compat.v1.zeros_initializer())
    y = tf.matmul(features["x"], w) + b
    if mode == tf.estimator.ModeKeys.PREDICT:
        outputs = {"serving_default": export_lib.PredictOutput({"y": y})}
        return tpu_estimator.TPUEstimatorSpec(mode, predictions={"y": y}, export_outputs=outputs)
    loss = tf.reduce_mean(tf.square(y - labels))
    step = tf.compat.v1.train.get_global_step()
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, step)
    return tpu_estimator.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def batched_model_fn(features, labels, mode, params):
    if mode == tf.estimator.ModeKeys.PREDICT and params["use_tpu"]:
        return tpu_estimator.model_fn_inference_on_tpu(
            tower, features, labels, params=params, batch_config=BATCH_CONFIG
        )
    return tower(features, labels, mode, params)


def unbatched_model_fn(features, labels, mode, params):
    if mode == tf.estimator.ModeKeys.PREDICT and params["use_tpu"]:
        return tpu_estimator.model_fn_inference_on_tpu(tower, features, labels, params=params)
    return tower(features, labels, mode, params)


def computation_model_fn(features, labels, mode, params):
    """Only the matmul on the TPU, through `inference_on_tpu` (as the original's V2 test)."""
    if not (mode == tf.estimator.ModeKeys.PREDICT and params["use_tpu"]):
        return tower(features, labels, mode, params)

    def computation(x):
        return tower({"x": x}, None, mode, params).predictions["y"]

    (y,) = tpu_estimator.inference_on_tpu(
        computation, [features["x"]], num_batch_threads=1, max_batch_size=4, batch_timeout_micros=100
    )
    outputs = {"serving_default": export_lib.PredictOutput({"y": y})}
    return tpu_estimator.TPUEstimatorSpec(mode, predictions={"y": y}, export_outputs=outputs)


def plain_model_fn(features, labels, mode, params):
    """`tower` for the plain Estimator, which needs an EstimatorSpec."""
    return tower(features, labels, mode, params).as_estimator_spec()


def passthrough_model_fn(features, labels, mode, params):
    """Returns the feature `x` as a prediction from inside the TPU program."""
    if mode == tf.estimator.ModeKeys.PREDICT and params["use_tpu"]:

        def passing_x(features, labels, mode, params):
            spec = tower(features, labels, mode, params)
            predictions = {"y": spec.predictions["y"], "x": features["x"]}
            return tpu_estimator.TPUEstimatorSpec(mode, predictions=predictions, export_outputs=spec.export_outputs)

        return tpu_estimator.model_fn_inference_on_tpu(passing_x, features, labels, params=params)
    return tower(features, labels, mode, params)


def input_fn(params):
    x = np.arange(32, dtype=np.float32).reshape(8, 4) / 10
    dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, x[:, :1]))
    return dataset.repeat().batch(params.get("batch_size", 4), drop_remainder=True)


def receiver_fn():
    x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
    return export_lib.ServingInputReceiver({"x": x}, {"x": x})


def main():
    facts = {}
    with tempfile.TemporaryDirectory(prefix="original_export_v2_") as root:
        for name, model_fn in [
            ("model_fn_inference_on_tpu_batched", batched_model_fn),
            ("model_fn_inference_on_tpu_unbatched", unbatched_model_fn),
            ("inference_on_tpu", computation_model_fn),
        ]:
            model_dir = os.path.join(root, name)
            estimator = tpu_estimator.TPUEstimator(
                model_fn,
                config=tpu_config.RunConfig(model_dir=model_dir),
                use_tpu=False,
                train_batch_size=4,
                export_saved_model_api_version=tpu_estimator.ExportSavedModelApiVersion.V2,
            )
            estimator.train(input_fn, steps=1)
            str_path = estimator.export_saved_model(os.path.join(model_dir, "export"), receiver_fn)
            bytes_path = estimator.export_saved_model(os.path.join(model_dir, "export").encode(), receiver_fn)
            facts[name] = {
                "returned_type": {"str": type(str_path).__name__, "bytes": type(bytes_path).__name__},
                "meta_graphs": describe(bytes_path),
            }
        model_dir = os.path.join(root, "plain_estimator")
        plain = estimator_lib.Estimator(plain_model_fn, model_dir=model_dir)
        plain.train(input_fn, steps=1)
        str_path = tpu_estimator.export_estimator_savedmodel(plain, os.path.join(model_dir, "export"), receiver_fn)
        bytes_path = tpu_estimator.export_estimator_savedmodel(
            plain, os.path.join(model_dir, "export").encode(), receiver_fn
        )
        facts["export_estimator_savedmodel"] = {
            "returned_type": {"str": type(str_path).__name__, "bytes": type(bytes_path).__name__},
            "meta_graphs": describe(bytes_path),
        }
        model_dir = os.path.join(root, "passthrough")
        estimator = tpu_estimator.TPUEstimator(
            passthrough_model_fn,
            config=tpu_config.RunConfig(model_dir=model_dir),
            use_tpu=False,
            train_batch_size=4,
            export_saved_model_api_version=tpu_estimator.ExportSavedModelApiVersion.V2,
        )
        estimator.train(input_fn, steps=1)
        try:
            estimator.export_saved_model(os.path.join(model_dir, "export"), receiver_fn)
            facts["feature_as_prediction_in_the_tpu_program"] = None
        except Exception as error:  # noqa: BLE001 (recorded, not handled)
            message = str(error).splitlines()[0]
            facts["feature_as_prediction_in_the_tpu_program"] = [type(error).__name__, message]
    facts["versions"] = {"tensorflow": tf.__version__}
    print(json.dumps(facts, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
