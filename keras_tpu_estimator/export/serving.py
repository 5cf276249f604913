"""The Estimator's export vocabulary: serving input receivers and export outputs.

TF 2.21 has no `tf.estimator.export`. These are the names TPUEstimator
programs use in `serving_input_receiver_fn` and in `export_outputs`:
`ServingInputReceiver`, `TensorServingInputReceiver`,
`SupervisedInputReceiver`, the parsing and raw receiver builders, and
`PredictOutput`, `ClassificationOutput`, `RegressionOutput` (each knows its
SignatureDef). `export/saved_model.py` writes SavedModels with them and re-exports them,
so `kte.export.PredictOutput` keeps working.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

DEFAULT_SERVING_SIGNATURE_DEF_KEY = "serving_default"

def _as_dict(value: Any, default_key: str) -> dict:
    return dict(value) if isinstance(value, Mapping) else {default_key: value}


class ServingInputReceiver(
    collections.namedtuple("ServingInputReceiver", ["features", "receiver_tensors", "receiver_tensors_alternatives"])
):
    """What a `serving_input_receiver_fn` returns: features for `model_fn`, inputs for serving.

    Args:
        features: A tensor or dict of tensors passed to `model_fn` (a single
            tensor becomes `{"feature": t}`).
        receiver_tensors: The serving inputs: a tensor or dict (a single
            tensor becomes `{"input": t}`).
        receiver_tensors_alternatives: Not supported; must be None.

    Example:

    ```python
    def serving_input_receiver_fn():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        return ServingInputReceiver({"x": x}, {"x": x})
    ```
    """

    def __new__(cls, features: Any, receiver_tensors: Any, receiver_tensors_alternatives: Any = None):
        if receiver_tensors_alternatives:
            raise ValueError("`receiver_tensors_alternatives` is not supported; export one receiver.")
        return super().__new__(cls, _as_dict(features, "feature"), _as_dict(receiver_tensors, "input"), None)


class TensorServingInputReceiver(
    collections.namedtuple("TensorServingInputReceiver", ["features", "receiver_tensors", "receiver_tensors_alternatives"])
):
    """Like `ServingInputReceiver`, but `model_fn` receives the single tensor `features` as is.

    Example:

    ```python
    with tf.Graph().as_default():   # as in a serving_input_receiver_fn
        x = tf.compat.v1.placeholder(tf.float32, [None, 4])
        receiver = TensorServingInputReceiver(features=x, receiver_tensors=x)
    assert receiver.features is x and list(receiver.receiver_tensors) == ["input"]
    ```
    """

    def __new__(cls, features: Any, receiver_tensors: Any, receiver_tensors_alternatives: Any = None):
        if receiver_tensors_alternatives:
            raise ValueError("`receiver_tensors_alternatives` is not supported; export one receiver.")
        if isinstance(features, Mapping):
            raise TypeError("TensorServingInputReceiver takes one tensor as `features`, not a dict.")
        return super().__new__(cls, features, _as_dict(receiver_tensors, "input"), None)


class SupervisedInputReceiver(
    collections.namedtuple("SupervisedInputReceiver", ["features", "labels", "receiver_tensors"])
):
    """Inputs of a TRAIN or EVAL export: features and labels for `model_fn`, and the serving inputs.

    Example:

    ```python
    with tf.Graph().as_default():   # as in the receiver fn of a TRAIN or EVAL export
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
        receiver = SupervisedInputReceiver({"x": x}, y, {"x": x, "y": y})
    assert receiver.labels is y
    ```
    """

    def __new__(cls, features: Any, labels: Any, receiver_tensors: Any):
        return super().__new__(cls, features, labels, _as_dict(receiver_tensors, "input"))


def build_raw_supervised_input_receiver_fn(
    features: Mapping[str, Any] | Any, labels: Any, default_batch_size: int | None = None
) -> Callable[[], SupervisedInputReceiver]:
    """A receiver fn for TRAIN/EVAL export whose inputs are placeholders shaped like `features` and `labels`.

    Example:

    ```python
    fn = build_raw_supervised_input_receiver_fn(
        {"x": tf.TensorSpec([None, 4], tf.float32)}, tf.TensorSpec([None, 1], tf.float32))
    ```
    """

    def receiver_fn() -> SupervisedInputReceiver:
        def placeholder(value: Any, name: str) -> Any:
            return tf.compat.v1.placeholder(value.dtype, [default_batch_size] + list(value.shape[1:]), name=name)

        feature_placeholders = {k: placeholder(v, k) for k, v in _as_dict(features, "feature").items()}
        if not isinstance(features, Mapping):
            feature_placeholders = feature_placeholders["feature"]
        label_placeholder = placeholder(labels, "labels")
        receiver = dict(_as_dict(feature_placeholders, "feature"), labels=label_placeholder)
        return SupervisedInputReceiver(feature_placeholders, label_placeholder, receiver)

    return receiver_fn


def build_parsing_serving_input_receiver_fn(
    feature_spec: Mapping[str, Any], default_batch_size: int | None = None
) -> Callable[[], ServingInputReceiver]:
    """A receiver fn that parses serialized `tf.Example`s fed to the `examples` input.

    Example:

    ```python
    fn = build_parsing_serving_input_receiver_fn(
        {"x": tf.io.FixedLenFeature([4], tf.float32)})
    ```
    """

    def serving_input_receiver_fn() -> ServingInputReceiver:
        examples = tf.compat.v1.placeholder(tf.string, [default_batch_size], name="input_example_tensor")
        features = tf.io.parse_example(examples, feature_spec)
        return ServingInputReceiver(features, {"examples": examples})

    return serving_input_receiver_fn


def build_raw_serving_input_receiver_fn(
    features: Mapping[str, Any] | Any, default_batch_size: int | None = None
) -> Callable[[], ServingInputReceiver]:
    """A receiver fn whose inputs are placeholders shaped like `features` (tensors or specs).

    Example:

    ```python
    fn = build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 4], tf.float32)})
    ```
    """

    def serving_input_receiver_fn() -> ServingInputReceiver:
        placeholders = {}
        for name, value in _as_dict(features, "feature").items():
            shape = [default_batch_size] + list(value.shape[1:])
            placeholders[name] = tf.compat.v1.placeholder(value.dtype, shape, name=name)
        if not isinstance(features, Mapping):
            return ServingInputReceiver(placeholders["feature"], placeholders["feature"])
        return ServingInputReceiver(placeholders, placeholders)

    return serving_input_receiver_fn


class ExportOutput:
    """Base of the export outputs: a signature built from tensors by `as_signature_def`.

    Example:

    ```python
    isinstance(PredictOutput({"y": y}), ExportOutput)  # True
    ```
    """

    outputs: dict

    def as_signature_def(self, receiver_tensors: dict) -> Any:
        """The SignatureDef of these outputs for `receiver_tensors`."""
        raise NotImplementedError


class PredictOutput(ExportOutput):
    """A `predict` signature: `outputs` (a tensor or dict of tensors) by name.

    Example:

    ```python
    export_outputs={"serving_default": PredictOutput({"y": y})}
    ```
    """

    def __init__(self, outputs: Any):
        self.outputs = _as_dict(outputs, "output")

    def as_signature_def(self, receiver_tensors: dict) -> Any:
        """The `predict` SignatureDef of these outputs for `receiver_tensors`."""
        return tf.compat.v1.saved_model.predict_signature_def(receiver_tensors, self.outputs)


class ClassificationOutput(ExportOutput):
    """A `classify` signature with `scores` and/or `classes` (string) for one `examples` input.

    With inputs other than one string tensor it is written as a `predict`
    signature with the same output keys (`scores`, `classes`).

    Example:

    ```python
    with tf.Graph().as_default():   # in a PREDICT model_fn
        x = tf.compat.v1.placeholder(tf.float32, [None, 4])
        probabilities = tf.nn.softmax(tf.matmul(x, tf.ones([4, 3])))
        export_outputs = {"classify": ClassificationOutput(scores=probabilities)}
        signature = export_outputs["classify"].as_signature_def({"x": x})
    assert signature.method_name == "tensorflow/serving/predict"   # inputs other than one string
    ```
    """

    def __init__(self, scores: Any = None, classes: Any = None):
        if scores is None and classes is None:
            raise ValueError("ClassificationOutput needs `scores` or `classes`.")
        self.scores, self.classes = scores, classes

    @property
    def outputs(self) -> dict:
        """`{"scores", "classes"}`, whichever are set."""
        return {k: v for k, v in (("scores", self.scores), ("classes", self.classes)) if v is not None}

    def as_signature_def(self, receiver_tensors: dict) -> Any:
        """A `classify` SignatureDef for one string input, else a `predict` one."""
        examples = list(receiver_tensors.values())
        if len(examples) == 1 and examples[0].dtype == tf.string:
            return tf.compat.v1.saved_model.classification_signature_def(examples[0], self.classes, self.scores)
        return tf.compat.v1.saved_model.predict_signature_def(receiver_tensors, self.outputs)


class RegressionOutput(ExportOutput):
    """A `regress` signature with one `value` for one `examples` input (else `predict`).

    Example:

    ```python
    export_outputs={"regress": RegressionOutput(value=y)}
    ```
    """

    def __init__(self, value: Any):
        self.value = value

    @property
    def outputs(self) -> dict:
        """`{"outputs": value}`."""
        return {"outputs": self.value}

    def as_signature_def(self, receiver_tensors: dict) -> Any:
        """A `regress` SignatureDef for one string input, else a `predict` one."""
        examples = list(receiver_tensors.values())
        if len(examples) == 1 and examples[0].dtype == tf.string:
            return tf.compat.v1.saved_model.regression_signature_def(examples[0], self.value)
        return tf.compat.v1.saved_model.predict_signature_def(receiver_tensors, self.outputs)
