"""SavedModel export for CPU and TPU serving, with the Estimator's export vocabulary.

The receivers and export outputs live in `serving.py` and are re-exported
here (`kte.export.PredictOutput`, ...). `export_saved_model` exports as the Estimator did: in a
TF1 graph it calls the user's `serving_input_receiver_fn` (which may build
`tf.compat.v1.placeholder`s) and `model_fn` in PREDICT mode, restores the
TF1-named checkpoint, and writes a `{serve}` MetaGraph and, for TPU serving,
a `{serve, tpu}` MetaGraph (the model wrapped in `tf.compat.v1.tpu.rewrite`
for API V1, or called with `params['use_tpu']=True` for V2). Variables are
saved once. The SavedModel is written under a temporary name and renamed
when complete.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.inputs import function_args
from keras_tpu_estimator.legacy import model_fn_scope
from keras_tpu_estimator.serving import (
    DEFAULT_SERVING_SIGNATURE_DEF_KEY,
    ClassificationOutput,
    PredictOutput,
    RegressionOutput,
    ServingInputReceiver,
    SupervisedInputReceiver,
    TensorServingInputReceiver,
    build_parsing_serving_input_receiver_fn,
    build_raw_serving_input_receiver_fn,
    build_raw_supervised_input_receiver_fn,
)
from keras_tpu_estimator.spec import ModeKeys, ModelFn, check_spec

_log = logging.getLogger("keras_tpu_estimator")
SERVE, TPU = tf.saved_model.SERVING, "tpu"


_EXPORT_OUTPUT_TYPES = (PredictOutput, ClassificationOutput, RegressionOutput)


def _export_outputs(spec: Any) -> dict:
    outputs = spec.export_outputs
    if not outputs:
        return {DEFAULT_SERVING_SIGNATURE_DEF_KEY: PredictOutput(spec.predictions)}
    for key, output in outputs.items():
        if not isinstance(output, _EXPORT_OUTPUT_TYPES):
            raise ValueError(
                "`export_output` must be have type `ClassificationOutput`, `RegressionOutput`, or "
                f"`PredictOutput`; got {output!r} under {key!r}. Use keras_tpu_estimator's classes."
            )
    if DEFAULT_SERVING_SIGNATURE_DEF_KEY not in outputs and len(outputs) == 1:
        outputs = {DEFAULT_SERVING_SIGNATURE_DEF_KEY: next(iter(outputs.values())), **outputs}
    return dict(outputs)


def _call_model_fn(
    model_fn: ModelFn, features: Any, params: dict, config: Any, mode: str = ModeKeys.PREDICT, labels: Any = None
) -> Any:
    args = function_args(model_fn)
    kwargs: dict[str, Any] = {"params": params}
    for name, value in (("labels", labels), ("mode", mode), ("config", config)):
        if name in args:
            kwargs[name] = value
    with (
        _compat.keras_layer_variables_named_by_path(),
        _compat.fresh_keras_auto_names(),
        model_fn_scope(),
    ):
        spec = model_fn(features=features, **kwargs) if "features" in args else model_fn(features, **kwargs)
    return check_spec(spec, mode, model_fn)


# SavedModel tags and method names of the Estimator's supervised exports.
_SUPERVISED = {
    ModeKeys.TRAIN: ("train", "tensorflow/supervised/training"),
    ModeKeys.EVAL: ("eval", "tensorflow/supervised/eval"),
}


def _build_supervised_graph(
    model_fn: ModelFn, receiver_fn: Callable[[], Any], params: dict, config: Any, mode: str
) -> tuple[tf.Graph, dict, Any, Any]:
    """The TRAIN or EVAL graph: outputs `loss` (after the train_op) and `metrics/<name>/value|update_op`."""
    graph = tf.Graph()
    with graph.as_default():
        receiver = receiver_fn()
        if not isinstance(receiver, SupervisedInputReceiver):
            raise TypeError(
                f"Exporting mode {mode!r} needs a receiver fn that returns a SupervisedInputReceiver "
                f"(features and labels). Received: {type(receiver).__name__}"
            )
        tf.compat.v1.train.get_or_create_global_step()
        spec = _call_model_fn(model_fn, receiver.features, params, config, mode, receiver.labels)
        outputs = {"loss": spec.loss}
        if mode == ModeKeys.TRAIN:
            if spec.train_op is None:
                raise ValueError("Exporting TRAIN needs a model_fn that returns a TF1 `train_op`.")
            with tf.control_dependencies([spec.train_op]):
                outputs["loss"] = tf.identity(spec.loss)
        metrics = getattr(spec, "eval_metric_ops", None) or {}
        if mode == ModeKeys.EVAL and getattr(spec, "eval_metrics", None) is not None:
            metric_fn, tensors = spec.eval_metrics
            metrics = metric_fn(**tensors) if isinstance(tensors, dict) else metric_fn(*tensors)
        for name, (value, update) in metrics.items():
            outputs[f"metrics/{name}/value"] = value
            outputs[f"metrics/{name}/update_op"] = update
        info = tf.compat.v1.saved_model.utils.build_tensor_info
        signature = tf.compat.v1.saved_model.signature_def_utils.build_signature_def(
            inputs={k: info(v) for k, v in receiver.receiver_tensors.items()},
            outputs={k: info(v) for k, v in outputs.items()},
            method_name=_SUPERVISED[mode][1],
        )
        saver = tf.compat.v1.train.Saver(
            {v.op.name: v for v in tf.compat.v1.global_variables()}, sharded=True, allow_empty=True
        )
        local_init = tf.compat.v1.local_variables_initializer()
    return graph, {mode: signature}, saver, local_init


def _rebuild(output: Any, tensors: list) -> Any:
    """`output` with its tensors replaced by `tensors` (the outputs of `tpu.rewrite`)."""
    if isinstance(output, PredictOutput):
        return PredictOutput(dict(zip(sorted(output.outputs), tensors, strict=True)))
    if isinstance(output, ClassificationOutput):
        values = dict(zip(sorted(output.outputs), tensors, strict=True))
        return ClassificationOutput(values.get("scores"), values.get("classes"))
    return RegressionOutput(tensors[0])


def _build_graph(
    model_fn: ModelFn,
    receiver_fn: Callable[[], Any],
    params: dict,
    config: Any,
    tpu_rewrite: bool,
) -> tuple[tf.Graph, dict, Any]:
    """Builds the serving graph; returns it, its signature map and a Saver by TF1 name."""
    graph = tf.Graph()
    with graph.as_default():
        receiver = receiver_fn()
        if not isinstance(receiver, (ServingInputReceiver, TensorServingInputReceiver)):
            raise TypeError(
                "serving_input_receiver_fn must return a ServingInputReceiver or "
                f"TensorServingInputReceiver. Received: {type(receiver).__name__}"
            )
        tf.compat.v1.train.get_or_create_global_step()
        if not tpu_rewrite:
            outputs = _export_outputs(_call_model_fn(model_fn, receiver.features, params, config))
        else:
            flat = tf.nest.flatten(receiver.features)
            structure: dict = {}

            def computation(*inputs: Any) -> list:
                features = tf.nest.pack_sequence_as(receiver.features, list(inputs))
                built = _export_outputs(_call_model_fn(model_fn, features, params, config))
                structure.update(built)
                return [t for key in sorted(built) for _, t in sorted(built[key].outputs.items())]

            results = tf.compat.v1.tpu.rewrite(computation, flat)
            outputs, start = {}, 0
            for key in sorted(structure):
                count = len(structure[key].outputs)
                outputs[key] = _rebuild(structure[key], results[start : start + count])
                start += count
        signatures = {key: output.as_signature_def(receiver.receiver_tensors) for key, output in outputs.items()}
        variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
        saver = tf.compat.v1.train.Saver(variables, sharded=True, allow_empty=True)
    return graph, signatures, saver


def _restore(graph: tf.Graph, saver: Any, checkpoint: str) -> tf.compat.v1.Session:
    reader = tf.train.load_checkpoint(checkpoint)
    with graph.as_default():
        missing = sorted(
            v.op.name for v in tf.compat.v1.global_variables() if not reader.has_tensor(v.op.name)
        )
    if missing:
        raise ValueError(
            f"The checkpoint {checkpoint} has no value for the serving graph's variables {missing}. "
            "Export from a checkpoint written for this model_fn."
        )
    session = tf.compat.v1.Session(graph=graph)
    saver.restore(session, checkpoint)
    return session


@contextlib.contextmanager
def _quiet_tensorflow_logs() -> Iterator[None]:
    """TF1's saver and builder log every step at INFO; keep warnings only while exporting."""
    logger = logging.getLogger("tensorflow")
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


def _unique_export_dir(export_dir_base: str) -> str:
    stamp = int(time.time())
    while tf.io.gfile.exists(os.path.join(export_dir_base, str(stamp))):
        stamp += 1
    return os.path.join(export_dir_base, str(stamp))


def export_saved_model(
    export_dir_base: str,
    serving_input_receiver_fn: Callable[[], Any],
    model_fn: ModelFn,
    checkpoint: str,
    params: Mapping[str, Any] | None = None,
    config: Any = None,
    export_to_cpu: bool = True,
    export_to_tpu: bool = True,
    api_version: int = 1,
    assets_extra: Mapping[str, str] | None = None,
    as_text: bool = False,
    mode: str = ModeKeys.PREDICT,
) -> str:
    """Writes a SavedModel of `model_fn` at `checkpoint` under a new timestamped directory.

    Args:
        export_dir_base: Parent directory; the export goes to `<base>/<unix time>`.
        serving_input_receiver_fn: Returns a `ServingInputReceiver`.
        model_fn: The user's `model_fn`, called in PREDICT mode.
        checkpoint: A TF1-named checkpoint prefix.
        params: `params` for `model_fn` (no `batch_size`; `use_tpu` is set per MetaGraph).
        config: `RunConfig` passed to `model_fn` when it takes one.
        export_to_cpu: Write the `serve` MetaGraph.
        export_to_tpu: Write the `serve, tpu` MetaGraph.
        api_version: 1 wraps the model in `tf.compat.v1.tpu.rewrite`; 2 calls
            `model_fn` with `params['use_tpu']=True` and leaves TPU calls to it.
        assets_extra: `{destination under assets.extra: source path}` to copy in.
        as_text: Write `saved_model.pbtxt`.
        mode: PREDICT (serving); TRAIN or EVAL write one CPU MetaGraph tagged
            `train` / `eval` from a `SupervisedInputReceiver`, with a signature
            of the same name (`loss`, `metrics/<name>/value|update_op`).

    Returns:
        The export directory.

    Example:

    ```python
    path = export_saved_model("/tmp/export", receiver_fn, model_fn, "/tmp/m/model.ckpt-100")
    tf.saved_model.load(path, tags=["serve"]).signatures["serving_default"]
    ```
    """
    if not (export_to_cpu or export_to_tpu):
        raise ValueError("One of export_to_cpu and export_to_tpu must be true.")
    if mode not in (ModeKeys.PREDICT, ModeKeys.TRAIN, ModeKeys.EVAL):
        raise ValueError(f"`mode` must be one of train, eval, infer. Received: {mode!r}")
    if mode != ModeKeys.PREDICT and export_to_tpu:
        _log.warning(
            "TPUEstimator only handles mode PREDICT for exporting when `export_to_tpu` is `True`; "
            "Mode %s will be ignored for TPU.", mode,
        )
    final = _unique_export_dir(export_dir_base)
    temporary = os.path.join(export_dir_base, f"temp-{os.path.basename(final)}")
    tf.io.gfile.makedirs(export_dir_base)
    try:
        with _quiet_tensorflow_logs():
            if mode == ModeKeys.PREDICT:
                _write(temporary, serving_input_receiver_fn, model_fn, checkpoint, params, config,
                       export_to_cpu, export_to_tpu, api_version, as_text)
            else:
                _write_supervised(temporary, serving_input_receiver_fn, model_fn, checkpoint, params,
                                  config, mode, as_text)
        for destination, source in (assets_extra or {}).items():
            target = os.path.join(temporary, "assets.extra", destination)
            tf.io.gfile.makedirs(os.path.dirname(target))
            tf.io.gfile.copy(source, target, overwrite=True)
        tf.io.gfile.rename(temporary, final)
    except BaseException:
        if tf.io.gfile.exists(temporary):
            shutil.rmtree(temporary, ignore_errors=True)
        raise
    _log.info("Exported SavedModel to %s.", final)
    return final


def _params(params: Mapping[str, Any] | None, use_tpu: bool) -> dict:
    """Export-time params: a copy, no `batch_size`, `use_tpu` for the MetaGraph being built."""
    return {**copy.deepcopy(dict(params or {})), "use_tpu": use_tpu}


def _write(
    temporary: str,
    serving_input_receiver_fn: Callable[[], Any],
    model_fn: ModelFn,
    checkpoint: str,
    params: Mapping[str, Any] | None,
    config: Any,
    export_to_cpu: bool,
    export_to_tpu: bool,
    api_version: int,
    as_text: bool,
) -> None:
    """Writes the SavedModel's MetaGraphs and variables into `temporary`."""
    builder = tf.compat.v1.saved_model.Builder(temporary)
    graph, signatures, saver = _build_graph(
        model_fn, serving_input_receiver_fn, _params(params, False), config, tpu_rewrite=False
    )
    with graph.as_default(), _restore(graph, saver, checkpoint) as session:
        if export_to_cpu:
            builder.add_meta_graph_and_variables(
                session, [SERVE], signature_def_map=signatures, saver=saver, strip_default_attrs=True
            )
        else:
            variables_dir = os.path.join(temporary, tf.saved_model.VARIABLES_DIRECTORY)
            tf.io.gfile.makedirs(variables_dir)
            saver.save(session, os.path.join(variables_dir, tf.saved_model.VARIABLES_FILENAME),
                       write_meta_graph=False, write_state=False)
            _compat.mark_variables_saved(builder)
    if export_to_tpu:
        graph, signatures, saver = _build_graph(
            model_fn, serving_input_receiver_fn, _params(params, True), config, tpu_rewrite=api_version == 1
        )
        with graph.as_default():
            builder.add_meta_graph([SERVE, TPU], signature_def_map=signatures, saver=saver, strip_default_attrs=True)
    builder.save(as_text)


def _write_supervised(
    temporary: str,
    receiver_fn: Callable[[], Any],
    model_fn: ModelFn,
    checkpoint: str,
    params: Mapping[str, Any] | None,
    config: Any,
    mode: str,
    as_text: bool,
) -> None:
    """Writes a TRAIN or EVAL MetaGraph (CPU only) and its variables into `temporary`."""
    builder = tf.compat.v1.saved_model.Builder(temporary)
    graph, signatures, saver, local_init = _build_supervised_graph(
        model_fn, receiver_fn, _params(params, False), config, mode
    )
    with graph.as_default(), _restore(graph, saver, checkpoint) as session:
        builder.add_meta_graph_and_variables(
            session, [_SUPERVISED[mode][0]], signature_def_map=signatures, saver=saver,
            main_op=local_init, strip_default_attrs=True,
        )
    builder.save(as_text)


__all__ = [
    "DEFAULT_SERVING_SIGNATURE_DEF_KEY",
    "ClassificationOutput",
    "PredictOutput",
    "RegressionOutput",
    "ServingInputReceiver",
    "SupervisedInputReceiver",
    "TensorServingInputReceiver",
    "build_parsing_serving_input_receiver_fn",
    "build_raw_serving_input_receiver_fn",
    "build_raw_supervised_input_receiver_fn",
    "export_saved_model",
]
