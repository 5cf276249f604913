"""TPU inference for SavedModel export API V2: a TPU partitioned call behind server-side batching.

Separation of concerns:

- This module builds the TPU part of a serving graph, in the TF1 graph in
  which `export.export_saved_model` calls `model_fn` for the `{serve, tpu}`
  MetaGraph. `inference_on_tpu` puts any computation on a TPU core;
  `model_fn_inference_on_tpu` puts a whole `model_fn` there. Each wraps the
  computation in `tf.compat.v1.tpu.rewrite`, inside a function called through
  a `TPUPartitionedCall` (every call runs on one core, round-robin over the
  host's cores), and, when batching is configured, inside a `BatchFunction`
  op that groups concurrent requests on the server.
- `export/saved_model.py` writes the SavedModel. Under API V2 it calls `model_fn` with
  `params['use_tpu']=True` for the TPU MetaGraph and leaves TPU calls to it,
  so a V2 `model_fn` calls one of these functions itself. Under API V1 the
  exporter calls `model_fn_inference_on_tpu` on the whole `model_fn`, which
  then must not call them (TPU rewrites cannot nest).
- `_compat.py` holds the private TensorFlow pieces: the TF1 function
  (`Defun`) the partitioned call runs, and the XLA pruning of unconnected ops.

Example:

```python
batching = BatchConfig(num_batch_threads=2, max_batch_size=8,
                       batch_timeout_micros=1000, allowed_batch_sizes=[8])

def model_fn(features, labels, mode, params):
    if mode == ModeKeys.PREDICT and params["use_tpu"]:
        return model_fn_inference_on_tpu(inner_model_fn, features, labels,
                                         params=params, batch_config=batching)
    return inner_model_fn(features, labels, mode, params)
```
"""

from __future__ import annotations

import collections
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.contract import AnySpec, ModeKeys, ModelFn
from keras_tpu_estimator.engine import invoke_model_fn

from .serving import ClassificationOutput, PredictOutput, RegressionOutput

# The key under which a single-tensor `predictions` travels through the TPU call.
_SINGLE_PREDICTION = "_key_when_predictions_is_a_tensor"


class BatchConfig(
    collections.namedtuple(
        "BatchConfig",
        ["num_batch_threads", "max_batch_size", "batch_timeout_micros", "allowed_batch_sizes",
         "max_enqueued_batches"],
    )
):
    """Server-side batching of TPU inference requests, for `model_fn_inference_on_tpu`.

    Args:
        num_batch_threads: Integer. Scheduling threads, i.e. how many batches
            are processed in parallel.
        max_batch_size: Integer. Batches are never larger than this.
        batch_timeout_micros: Integer. How long to wait before running an
            incomplete batch, in microseconds.
        allowed_batch_sizes: List of increasing integers, or `None`. Batches are
            padded up to the next of these sizes; `None` or `[]` pads nothing.
        max_enqueued_batches: Integer. Depth of the batch queue. Defaults to 100.

    Example:

    ```python
    BatchConfig(num_batch_threads=2, max_batch_size=8, batch_timeout_micros=1000,
                allowed_batch_sizes=[4, 8])
    ```

    Note: the values are checked when the batching op is built (in
    `model_fn_inference_on_tpu`), not here, as in TPUEstimator.
    """

    def __new__(
        cls,
        num_batch_threads: int,
        max_batch_size: int,
        batch_timeout_micros: int,
        allowed_batch_sizes: Sequence[int] | None,
        max_enqueued_batches: int = 100,
    ) -> BatchConfig:
        return super().__new__(
            cls, num_batch_threads, max_batch_size, batch_timeout_micros, allowed_batch_sizes,
            max_enqueued_batches,
        )


def _check_int(name: str, value: Any, minimum: int) -> None:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(
            f"Expected int for argument `{name}`, not {type(value).__name__}. "
            f"Received: {name}={value!r}"
        )
    if value < minimum:
        raise ValueError(f"`{name}` must be at least {minimum}. Received: {name}={value!r}")


def _check_batching(config: BatchConfig) -> None:
    """Raises on values the `BatchFunction` op would refuse (or TensorFlow could not build)."""
    _check_int("num_batch_threads", config.num_batch_threads, 0)
    _check_int("max_batch_size", config.max_batch_size, 1)
    _check_int("batch_timeout_micros", config.batch_timeout_micros, 0)
    _check_int("max_enqueued_batches", config.max_enqueued_batches, 1)
    sizes = config.allowed_batch_sizes
    if sizes is None:
        return
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
        raise TypeError(
            "`allowed_batch_sizes` must be a list of integers or None. "
            f"Received: allowed_batch_sizes={sizes!r}"
        )
    for size in sizes:
        _check_int("allowed_batch_sizes", size, 1)
    if any(later <= earlier for earlier, later in zip(sizes, sizes[1:], strict=False)):
        raise ValueError(
            "`allowed_batch_sizes` entries must be monotonically increasing. "
            f"Received: allowed_batch_sizes={list(sizes)}"
        )


def _check_context(name: str) -> None:
    """Raises unless called while a TF1 graph is built, outside any TPU computation."""
    if tf.executing_eagerly():
        raise RuntimeError(
            f"`{name}` builds serving graph ops and runs only while a TF1 graph is built, as "
            "in a model_fn called by export_saved_model. It was called eagerly."
        )
    if _compat.inside_tpu_rewrite():
        raise NotImplementedError(
            f"`{name}` was called inside a TPU computation, and TPU rewrites cannot be nested "
            "(tpu_shard_context cannot be nested). Export API V1 (the default, and "
            "export_estimator_savedmodel) rewrites the whole model_fn: to call it from model_fn, "
            "construct the TPUEstimator with export_saved_model_api_version="
            "ExportSavedModelApiVersion.V2."
        )


def _tpu_call(computation: Callable[..., Any], inputs: list) -> list:
    """`computation(*inputs)` rewritten for the TPU, in a function run by a TPU partitioned call."""

    def body() -> list:
        outputs = tf.compat.v1.tpu.rewrite(computation, inputs)
        _compat.prune_unconnected_ops_from_xla(tf.compat.v1.get_default_graph())
        return outputs

    return list(_compat.tpu_partitioned_call(body, name="tpu_computation"))


def _batched(call: Callable[[list], list], inputs: list, config: BatchConfig) -> list:
    """`call(inputs)` behind a `BatchFunction` op that batches concurrent requests along axis 0."""

    @tf.compat.v1.nondifferentiable_batch_function(
        num_batch_threads=config.num_batch_threads,
        max_batch_size=config.max_batch_size,
        batch_timeout_micros=config.batch_timeout_micros,
        allowed_batch_sizes=list(config.allowed_batch_sizes or []) or None,
        max_enqueued_batches=config.max_enqueued_batches,
        autograph=False,
    )
    def batched(*tensors: tf.Tensor) -> list:
        return call(list(tensors))

    return list(batched(*inputs))


def _check_tensors(name: str, values: Any) -> list:
    if isinstance(values, (tf.Tensor, tf.Variable)) or not isinstance(values, (list, tuple)):
        raise TypeError(
            f"`{name}` must be a list of tensors (one per argument of `computation`). "
            f"Received: {name}={values!r}"
        )
    for value in values:
        if not isinstance(value, tf.Tensor):
            raise TypeError(
                f"Every entry of `{name}` must be a tf.Tensor of the serving graph. "
                f"Received: {value!r} ({type(value).__name__}); wrap constants in tf.constant."
            )
    return list(values)


def inference_on_tpu(
    computation: Callable[..., Any],
    inputs_to_tpu: Sequence[tf.Tensor],
    num_batch_threads: int,
    max_batch_size: int | None,
    batch_timeout_micros: int,
    allowed_batch_sizes: Sequence[int] | None = None,
    max_enqueued_batches: int = 100,
) -> list:
    """Runs `computation(*inputs_to_tpu)` on a TPU core, behind server-side batching.

    For a `model_fn` exported with `export_saved_model_api_version=2`: call it
    when `params['use_tpu']` is true, in PREDICT mode, on the part of the
    model that should run on the TPU (preprocessing around it stays on the
    CPU). The computation is rewritten for the TPU (`tf.compat.v1.tpu.rewrite`)
    inside a function run by a `TPUPartitionedCall` on one core per call,
    round-robin; unless `max_batch_size` is `None` or 0, that call sits in a
    `BatchFunction` op that groups concurrent requests along axis 0.

    Args:
        computation: Callable taking one tensor per entry of `inputs_to_tpu`
            and returning a tensor or a list of tensors.
        inputs_to_tpu: List of tensors, the arguments of `computation`.
        num_batch_threads: Integer. Batches processed in parallel.
        max_batch_size: Integer; `None` or 0 builds no batching op.
        batch_timeout_micros: Integer. Wait before running an incomplete batch.
        allowed_batch_sizes: List of increasing integers to pad batches to, or
            `None` (no padding).
        max_enqueued_batches: Integer. Depth of the batch queue. Defaults to 100.

    Returns:
        The list of output tensors of `computation`, unbatched.

    Raises:
        TypeError: `computation` is not callable, `inputs_to_tpu` is not a
            list of tensors, or a batching argument is not an integer.
        ValueError: a batching argument is below its minimum (1 for
            `max_batch_size`, `max_enqueued_batches` and batch sizes, else 0),
            or `allowed_batch_sizes` does not increase.
        RuntimeError: called eagerly, not while a TF1 graph is built.
        NotImplementedError: called inside a TPU computation (export API V1).

    Example:

    ```python
    def tower(x):   # the part of the model that runs on the TPU
        return tf.matmul(x, tf.ones([4, 2]))

    params = {"use_tpu": True}   # the `serve, tpu` MetaGraph's call of model_fn
    with tf.Graph().as_default():
        features = {"x": tf.compat.v1.placeholder(tf.float32, [None, 4])}
        if params["use_tpu"]:
            logits = inference_on_tpu(tower, [features["x"]], num_batch_threads=2,
                                      max_batch_size=8, batch_timeout_micros=1000)[0]
        else:
            logits = tower(features["x"])
    assert logits.dtype == tf.float32   # built here; it runs where the SavedModel is served on a TPU
    ```

    Differences from TPUEstimator: the arguments are checked when the graph is
    built; TPUEstimator left them to TensorFlow, which refused some only when
    the batching op first ran.
    """
    if not callable(computation):
        raise TypeError(f"`computation` must be callable. Received: computation={computation!r}")
    inputs = _check_tensors("inputs_to_tpu", inputs_to_tpu)
    _check_context("inference_on_tpu")

    def call(args: list) -> list:
        return _tpu_call(computation, args)

    if max_batch_size is None or max_batch_size == 0:
        return call(inputs)
    config = BatchConfig(num_batch_threads, max_batch_size, batch_timeout_micros, allowed_batch_sizes,
                         max_enqueued_batches)
    _check_batching(config)
    return _batched(call, inputs, config)


# ---- model_fn_inference_on_tpu ------------------------------------------------------------------


def _export_output_tensors(output: Any) -> list:
    """The tensors of an export output, `None` where a `ClassificationOutput` has no scores/classes."""
    if isinstance(output, ClassificationOutput):
        return [output.scores, output.classes]
    if isinstance(output, RegressionOutput):
        return [output.value]
    if isinstance(output, PredictOutput):
        return list(output.outputs.values())
    raise ValueError(
        "`export_output` must be have type `ClassificationOutput`, `RegressionOutput`, or "
        f"`PredictOutput`; got {output!r}. Use keras_tpu_estimator.export's classes."
    )


def _with_tensors(output: Any, tensors: list) -> Any:
    """A copy of the export output `output` holding `tensors` (from `_export_output_tensors`)."""
    if isinstance(output, ClassificationOutput):
        return ClassificationOutput(*tensors)
    if isinstance(output, RegressionOutput):
        return RegressionOutput(*tensors)
    return PredictOutput(dict(zip(output.outputs, tensors, strict=True)))


class _Outputs:
    """What the TPU computation returns, and how to rebuild the spec from those tensors."""

    spec: AnySpec
    predictions: dict
    export_outputs: dict

    def flatten(self) -> list:
        """Predictions, then the export outputs' tensors without `None`s, each by sorted key.

        A function cannot return `None`; `rebuild` puts them back.
        """
        exported = [t for key in sorted(self.export_outputs) for t in self.export_outputs[key]]
        return tf.nest.flatten(self.predictions) + [t for t in exported if t is not None]

    def rebuild(self, tensors: list) -> AnySpec:
        """The spec with its predictions and export outputs replaced by `tensors` (from `flatten`)."""
        count = len(tf.nest.flatten(self.predictions))
        predictions = tf.nest.pack_sequence_as(self.predictions, tensors[:count])
        remaining = iter(tensors[count:])
        replaced = {
            key: [None if t is None else next(remaining) for t in self.export_outputs[key]]
            for key in sorted(self.export_outputs)
        }
        export_outputs = None
        if self.spec.export_outputs is not None:
            export_outputs = collections.OrderedDict(
                (key, _with_tensors(output, replaced[key])) for key, output in self.spec.export_outputs.items()
            )
        if list(predictions) == [_SINGLE_PREDICTION]:
            predictions = predictions[_SINGLE_PREDICTION]
        return self.spec._replace(predictions=predictions, export_outputs=export_outputs)


def model_fn_inference_on_tpu(
    model_fn: ModelFn,
    features: Any,
    labels: Any = None,
    config: Any = None,
    params: Mapping[str, Any] | None = None,
    batch_config: BatchConfig | None = None,
) -> AnySpec:
    """Runs a whole PREDICT `model_fn` on a TPU core, optionally behind server-side batching.

    For export with `export_saved_model_api_version=2`: a `model_fn` calls it
    when `params['use_tpu']` is true in PREDICT mode, with the `model_fn` to
    run on the TPU. That `model_fn` is called once, in PREDICT mode, inside a
    TPU rewrite inside a function run by a `TPUPartitionedCall`; with
    `batch_config`, the call sits in a `BatchFunction` op that batches
    concurrent requests along axis 0 (every feature must be batch-major).

    Args:
        model_fn: The `model_fn` to run on the TPU. It is given `features` and
            whichever of `labels`, `mode` (PREDICT), `config` and `params` it names.
        features: Tensor or dict of tensors (no `SparseTensor`s).
        labels: Passed to `model_fn` as is.
        config: Passed to `model_fn` as is.
        params: Passed to `model_fn` as is.
        batch_config: `BatchConfig`, or `None` for no batching op.

    Returns:
        The spec `model_fn` returned, with `predictions` and the tensors of
        `export_outputs` replaced by the outputs of the TPU call.

    Raises:
        TypeError: `batch_config` is not a `BatchConfig` (or holds non-integers),
            or `model_fn` does not return a spec.
        ValueError: an export output is not a `PredictOutput`,
            `ClassificationOutput` or `RegressionOutput`, or `batch_config`
            holds a value the batching op refuses.
        RuntimeError: called eagerly, not while a TF1 graph is built.
        NotImplementedError: called inside a TPU computation (export API V1).

    Example:

    ```python
    def model_fn(features, labels, mode, params):
        if mode == ModeKeys.PREDICT and params["use_tpu"]:
            return model_fn_inference_on_tpu(
                tower_model_fn, features, labels, params=params,
                batch_config=BatchConfig(2, 8, 1000, [8]))
        return tower_model_fn(features, labels, mode, params)
    ```

    Differences from TPUEstimator: a spec whose `export_outputs` is `None` is
    returned with `None` (the exporter then serves `predictions`), and a
    feature may be returned as a prediction; TPUEstimator failed on both.
    """
    if batch_config is not None:
        if not isinstance(batch_config, BatchConfig):
            raise TypeError(
                "`batch_config` must be a BatchConfig or None. "
                f"Received: batch_config={batch_config!r}"
            )
        _check_batching(batch_config)
    _check_context("model_fn_inference_on_tpu")
    outputs = _Outputs()

    def on_tpu(outer_inputs: Any) -> list:
        # Copies in the function's graph, so a feature returned as a prediction is of the graph
        # model_fn builds (TPUEstimator passed the outer tensors, and TPUEstimatorSpec refused it).
        inputs = tf.nest.map_structure(tf.identity, outer_inputs)

        def tpu_computation() -> list:
            # As the original (tpu_estimator.py:4431-4441): labels only to a model_fn that takes
            # them, and the Scaffold left to the exporter.
            spec = invoke_model_fn(model_fn, inputs, labels, ModeKeys.PREDICT, params, config,
                                   drop_undeclared_labels=True, check_estimator_scaffold=False)
            if spec.export_outputs is not None and not isinstance(spec.export_outputs, Mapping):
                raise TypeError(f"`export_outputs` must be dict, received: {spec.export_outputs}.")
            predictions = spec.predictions
            outputs.spec = spec
            outputs.predictions = (
                dict(predictions) if isinstance(predictions, Mapping) else {_SINGLE_PREDICTION: predictions}
            )
            outputs.export_outputs = collections.OrderedDict(
                (key, _export_output_tensors(output)) for key, output in (spec.export_outputs or {}).items()
            )
            return outputs.flatten()

        results = tf.compat.v1.tpu.rewrite(tpu_computation)
        _compat.prune_unconnected_ops_from_xla(tf.compat.v1.get_default_graph())
        return results

    def call(flat: list) -> list:
        return list(_compat.tpu_partitioned_call(lambda: on_tpu(tf.nest.pack_sequence_as(features, flat))))

    flat_features = tf.nest.flatten(features)
    tensors = call(flat_features) if batch_config is None else _batched(call, flat_features, batch_config)
    return outputs.rebuild(tensors)


__all__ = [
    "BatchConfig",
    "inference_on_tpu",
    "model_fn_inference_on_tpu",
]
