"""SavedModel export for CPU and TPU serving, with the Estimator's export vocabulary.

The receivers and export outputs live in `export/serving.py` and are re-exported
here (`kte.export.PredictOutput`, ...). `export_saved_model` exports as the Estimator did: in a
TF1 graph it calls the user's `serving_input_receiver_fn` (which may build
`tf.compat.v1.placeholder`s) and `model_fn` in PREDICT mode, restores the
TF1-named checkpoint, and writes a `{serve}` MetaGraph and, for TPU serving,
a `{serve, tpu}` MetaGraph. For API V1 the whole `model_fn` runs on the TPU
through `inference.model_fn_inference_on_tpu` (a TPU rewrite inside a
function called by a `TPUPartitionedCall`, as TPUEstimator did); for V2
`model_fn` is called with `params['use_tpu']=True` and puts its TPU part
there itself (`inference.model_fn_inference_on_tpu` or
`inference.inference_on_tpu`, optionally behind a batching op). Variables
are saved once. The SavedModel is written under a temporary name and renamed
when complete; its path has the type of `export_dir_base` (str or bytes).
`export_estimator_savedmodel` exports a trained estimator's `model_fn` for
CPU and TPU serving whatever that estimator's own export options.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator._compat.deprecations import quiet_deprecations
from keras_tpu_estimator.contract import AnySpec, ModeKeys, ModelFn, check_model_fn
from keras_tpu_estimator.engine import call_scaffold_fn, invoke_model_fn
from keras_tpu_estimator.model_dir import resolve_checkpoint_path
from keras_tpu_estimator.tf1 import TracedSaver
from keras_tpu_estimator.utils import get_logger

from .inference import model_fn_inference_on_tpu
from .serving import (
    DEFAULT_SERVING_SIGNATURE_DEF_KEY,
    ClassificationOutput,
    ExportOutput,
    PredictOutput,
    RegressionOutput,
    ServingInputReceiver,
    SupervisedInputReceiver,
    TensorServingInputReceiver,
    build_parsing_serving_input_receiver_fn,
    build_raw_serving_input_receiver_fn,
    build_raw_supervised_input_receiver_fn,
)

_log = get_logger(__name__)
SERVE, TPU = tf.saved_model.SERVING, "tpu"


def _export_outputs(spec: Any) -> dict:
    """The spec's export outputs, checked and completed as the Estimator's `get_export_outputs` did.

    `None` (or `{}`) exports the predictions as `serving_default`; a single
    output is also made `serving_default`; several need one under that key.
    """
    outputs = spec.export_outputs
    if not outputs:
        return {DEFAULT_SERVING_SIGNATURE_DEF_KEY: PredictOutput(spec.predictions)}
    if not isinstance(outputs, Mapping):
        raise TypeError(f"`export_outputs` must be dict, received: {outputs}.")
    if not all(isinstance(output, ExportOutput) for output in outputs.values()):
        raise TypeError(
            f"Values in `export_outputs` must be ExportOutput objects, received: {outputs}. "
            "Use keras_tpu_estimator.export's PredictOutput, ClassificationOutput or RegressionOutput."
        )
    if DEFAULT_SERVING_SIGNATURE_DEF_KEY not in outputs:
        if len(outputs) > 1:
            raise ValueError(
                "Multiple `export_outputs` were provided, but none of them are specified as the "
                "default. Use`tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY` to specify a default."
            )
        outputs = {DEFAULT_SERVING_SIGNATURE_DEF_KEY: next(iter(outputs.values())), **outputs}
    return dict(outputs)


def _call_model_fn(
    model_fn: ModelFn, features: Any, params: dict, config: Any, mode: str = ModeKeys.PREDICT, labels: Any = None
) -> AnySpec:
    """`model_fn` called for a serving (or supervised) graph, its Keras layers' variables named by path.

    Labels `model_fn` does not take are refused, as the original's export did
    (tpu_estimator.py:2026-2030). The Scaffold is not checked: an export
    restores the checkpoint; the original's ran neither `init_op` nor
    `init_fn` either. Its saver restores and saves the variables
    (`_serving_saver`); its `local_init_op` is ignored.
    """
    return invoke_model_fn(
        model_fn, features, labels, mode, params, config,
        contexts=(_compat.keras_layer_variables_named_by_path(), _compat.fresh_keras_auto_names()),
        check_estimator_scaffold=False,
    )


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
        with quiet_deprecations():  # TF1's SavedModel builders: nothing for the user to change
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


def _build_graph(
    model_fn: ModelFn,
    receiver_fn: Callable[[], Any],
    params: dict,
    config: Any,
    whole_model_on_tpu: bool,
) -> tuple[tf.Graph, dict, Any]:
    """Builds the serving graph; returns it, its signature map and a Saver by TF1 name."""
    graph = tf.Graph()
    with graph.as_default():
        receiver = receiver_fn()
        if not isinstance(receiver, (ServingInputReceiver, TensorServingInputReceiver, SupervisedInputReceiver)):
            raise TypeError(
                "serving_input_receiver_fn must return a ServingInputReceiver, "
                f"TensorServingInputReceiver or SupervisedInputReceiver. Received: {type(receiver).__name__}"
            )
        tf.compat.v1.train.get_or_create_global_step()
        # A supervised receiver's labels reach model_fn in PREDICT too (refused when it takes none),
        # on the CPU and the TPU metagraph alike, as in the original's export.
        labels = getattr(receiver, "labels", None)
        if not whole_model_on_tpu:
            spec = _call_model_fn(model_fn, receiver.features, params, config, labels=labels)
            outputs = _export_outputs(spec)
        else:
            with _compat.keras_layer_variables_named_by_path(), _compat.fresh_keras_auto_names():
                spec = model_fn_inference_on_tpu(model_fn, receiver.features, labels, config, params)
            outputs = _export_outputs(spec)
        with quiet_deprecations():
            signatures = {key: output.as_signature_def(receiver.receiver_tensors) for key, output in outputs.items()}
        saver = _serving_saver(spec)
    return graph, signatures, saver


def _serving_saver(spec: Any) -> Any:
    """The Saver that restores the checkpoint into the serving graph and saves the SavedModel's variables.

    As the Estimator's export: the PREDICT spec's Scaffold saver when it has
    one (`Saver(ema.variables_to_restore())` serves the moving averages, and
    the SavedModel restores with it too), else every variable by its TF1 name.
    A Saver that `model_fn` built inside a function (the TPU metagraph) is
    rebuilt here over the graph's variables with the names it recorded.
    """
    scaffold = getattr(spec, "scaffold", None)
    if getattr(spec, "scaffold_fn", None) is not None:
        scaffold = call_scaffold_fn(spec.scaffold_fn, check=False)
    saver = getattr(scaffold, "saver", None)
    variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
    if isinstance(saver, TracedSaver):
        missing = sorted(name for name in saver.names if name not in variables)
        if missing and not getattr(saver, "_kte_from_scaffold", False):
            raise ValueError(
                f"The Scaffold's Saver restores {missing}, which the serving graph does not have. "
                "Build the Saver from the variables model_fn creates in PREDICT mode."
            )
        saver = tf.compat.v1.train.Saver({key: variables[name] for name, key in saver.names.items()})
    if saver is not None:
        saver._kte_from_scaffold = True  # restore errors name the Saver's keys, not the variables'
        return saver
    return tf.compat.v1.train.Saver(variables, sharded=True, allow_empty=True)


def _restore(graph: tf.Graph, saver: Any, checkpoint: str) -> tf.compat.v1.Session:
    """A session of `graph` with `saver` restored from `checkpoint` (a Scaffold saver reads only its names)."""
    session = tf.compat.v1.Session(graph=graph)
    try:
        saver.restore(session, checkpoint)
    except tf.errors.NotFoundError as error:
        session.close()
        reader = tf.train.load_checkpoint(checkpoint)
        with graph.as_default():
            missing = sorted(
                v.op.name for v in tf.compat.v1.global_variables() if not reader.has_tensor(v.op.name)
            )
        if missing and not getattr(saver, "_kte_from_scaffold", False):
            raise ValueError(
                f"The checkpoint {checkpoint} has no value for the serving graph's variables {missing}. "
                "Export from a checkpoint written for this model_fn."
            ) from None
        keys = sorted(set(re.findall(r"Key (\S+) not found in checkpoint", error.message)))
        raise ValueError(
            f"The checkpoint {checkpoint} has no value for {keys or 'some names'} that the Scaffold's "
            "Saver restores. Export from a checkpoint that holds the names the Saver lists."
        ) from None
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


_PathLike = str | bytes | os.PathLike
"""What `export_dir_base` may be; the export path is returned as `bytes` for `bytes`, else `str`."""


def _fspath(name: str, path: Any) -> str | bytes:
    """`os.fspath(path)`, with a TypeError naming `name` for what is not a path."""
    try:
        return os.fspath(path)
    except TypeError:
        raise TypeError(
            f"`{name}` must be a str, bytes or os.PathLike path. Received: {name}={path!r}"
        ) from None


def _unique_export_dir(export_dir_base: str) -> str:
    stamp = int(time.time())
    while tf.io.gfile.exists(os.path.join(export_dir_base, str(stamp))):
        stamp += 1
    return os.path.join(export_dir_base, str(stamp))


def export_saved_model(
    export_dir_base: _PathLike,
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
) -> str | bytes:
    """Writes a SavedModel of `model_fn` at `checkpoint` under a new timestamped directory.

    Args:
        export_dir_base: Parent directory (str, bytes or os.PathLike); the
            export goes to `<base>/<unix time>`.
        serving_input_receiver_fn: Returns a `ServingInputReceiver`.
        model_fn: The user's `model_fn`, called in PREDICT mode.
        checkpoint: A TF1-named checkpoint prefix.
        params: `params` for `model_fn` (no `batch_size`; `use_tpu` is set per MetaGraph).
        config: `RunConfig` passed to `model_fn` when it takes one.
        export_to_cpu: Write the `serve` MetaGraph.
        export_to_tpu: Write the `serve, tpu` MetaGraph.
        api_version: 1 runs the whole model on the TPU, in a TPU partitioned
            call (`inference.model_fn_inference_on_tpu`); 2 calls
            `model_fn` with `params['use_tpu']=True` and leaves TPU calls to it
            (`inference.model_fn_inference_on_tpu`, `inference.inference_on_tpu`).
        assets_extra: `{destination under assets.extra: source path}` to copy in.
        as_text: Write `saved_model.pbtxt`.
        mode: PREDICT (serving); TRAIN or EVAL write one CPU MetaGraph tagged
            `train` / `eval` from a `SupervisedInputReceiver`, with a signature
            of the same name (`loss`, `metrics/<name>/value|update_op`).

    Returns:
        The export directory as `bytes`, as the original returned it.

    Raises:
        TypeError: `export_dir_base` is not a path, or `model_fn` is not callable.
        ValueError: neither MetaGraph is asked for, `mode` is unknown,
            `model_fn` takes no `params`, or the receiver has labels and
            `model_fn` takes none.

    Example:

    ```python
    estimator.train(input_fn, max_steps=1)
    path = export_saved_model(os.path.join(model_dir, "export"), receiver_fn, model_fn,
                              estimator.latest_checkpoint())   # model_dir/model.ckpt-1
    tf.saved_model.load(path, tags=["serve"]).signatures["serving_default"]
    ```

    Differences from TPUEstimator: it returned `bytes` for a `str` base too.
    """
    returns_bytes = isinstance(_fspath("export_dir_base", export_dir_base), bytes)
    export_dir_base = os.fsdecode(export_dir_base)
    check_model_fn(model_fn)  # as TPUEstimator's export: `params` is required
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
            target = os.path.join(temporary, "assets.extra", os.fsdecode(_fspath("assets_extra", destination)))
            tf.io.gfile.makedirs(os.path.dirname(target))
            tf.io.gfile.copy(os.fsdecode(_fspath("assets_extra", source)), target, overwrite=True)
        tf.io.gfile.rename(temporary, final)
    except BaseException:
        if tf.io.gfile.exists(temporary):
            shutil.rmtree(temporary, ignore_errors=True)
        raise
    _log.info("Exported SavedModel to %s.", final)
    return os.fsencode(final) if returns_bytes else final


def export_estimator_savedmodel(
    estimator: Any,
    export_dir_base: _PathLike,
    serving_input_receiver_fn: Callable[[], Any],
    assets_extra: Mapping[str, str] | None = None,
    as_text: bool = False,
    checkpoint_path: str | None = None,
) -> str | bytes:
    """Exports a trained estimator's `model_fn` for CPU and TPU serving.

    Writes what a `TPUEstimator(use_tpu=True)` with the default export options
    writes, whatever the export options of `estimator`: a `{serve}` MetaGraph
    (`params['use_tpu']=False`) and a `{serve, tpu}` MetaGraph (API V1: the
    whole `model_fn` in `inference.model_fn_inference_on_tpu`), from the
    latest checkpoint in the estimator's `model_dir` or from `checkpoint_path`.

    Args:
        estimator: A `TPUEstimator` (or an object with its `_model_fn`,
            `_params`, `_config`, `model_dir` and `latest_checkpoint()`).
        export_dir_base: Parent directory (str, bytes or os.PathLike) of the
            timestamped export directory.
        serving_input_receiver_fn: Returns a `ServingInputReceiver` or
            `TensorServingInputReceiver`.
        assets_extra: `{destination under assets.extra: source path}` to copy in.
        as_text: Write `saved_model.pbtxt`.
        checkpoint_path: A checkpoint prefix or directory; `None` for the latest
            checkpoint in the estimator's `model_dir`.

    Returns:
        The export directory as `bytes`, as the original returned it.

    Raises:
        ValueError: there is no checkpoint to export.

    Example:

    ```python
    estimator.train(input_fn, max_steps=1)
    path = export_estimator_savedmodel(estimator, os.path.join(model_dir, "export"), serving_input_receiver_fn)
    tf.saved_model.load(path, tags=["serve"]).signatures["serving_default"]
    ```

    Differences from TPUEstimator: `model_fn` gets the estimator's own
    `RunConfig` (TPUEstimator made a new one with only `model_dir`).
    """
    _fspath("export_dir_base", export_dir_base)
    if not serving_input_receiver_fn:
        raise ValueError("An input_receiver_fn must be defined.")
    checkpoint = resolve_checkpoint_path(checkpoint_path) if checkpoint_path else estimator.latest_checkpoint()
    if checkpoint is None:
        raise ValueError(
            f"Couldn't find trained model at {estimator.model_dir}. Train the estimator first, "
            "or pass checkpoint_path."
        )
    path = export_saved_model(
        export_dir_base,
        serving_input_receiver_fn,
        estimator._model_fn,
        checkpoint,
        params=estimator._params,
        config=estimator._config,
        export_to_cpu=True,
        export_to_tpu=True,
        api_version=1,
        assets_extra=assets_extra,
        as_text=as_text,
    )
    return os.fsencode(path)  # the original's type, whatever the base's


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
        model_fn, serving_input_receiver_fn, _params(params, False), config, whole_model_on_tpu=False
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
            model_fn, serving_input_receiver_fn, _params(params, True), config,
            whole_model_on_tpu=api_version == 1,
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
    "export_estimator_savedmodel",
    "export_saved_model",
]
