"""The model_fn contract: `ModeKeys`, `TPUEstimatorSpec`, `EstimatorSpec` and their checks.

This module owns the records a `model_fn` returns and the validation that
needs nothing but the record itself (the `(fn, tensors)` pairs of
`host_call` and `eval_metrics`, hook types). Checks that need a mode or a
strategy (static shapes, rank of host tensors) live with the code that runs
the spec.
"""

from __future__ import annotations

import collections
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf

ModelFn = Callable[..., Any]
"""`model_fn(features, labels, mode, params, config)`; only `features` and `params` are required."""

InputFn = Callable[..., Any]
"""`input_fn(params[, mode, config, input_context])` returning a `tf.data.Dataset`."""

HostCall = tuple  # (fn, list or dict of tensors)
"""A `(fn, tensors)` pair; tensors are passed positionally (list) or as keywords (dict)."""


class ModeKeys:
    """The three modes a `model_fn` is called in (the Estimator's values).

    Example:

    ```python
    def model_fn(features, labels, mode, params):
        if mode == ModeKeys.PREDICT:
            ...
    ```
    """

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


def check_host_call(name: str, host_call: Any) -> None:
    """Validates a `(fn, tensors)` pair as TPUEstimator did.

    Args:
        name: `"host_call"` or `"eval_metrics"`, used in messages.
        host_call: The value to check, or `None`.

    Raises:
        ValueError: not a 2-tuple/list, or tensors not a list, tuple or dict.
        TypeError: `fn` is not callable.
        RuntimeError: a list of tensors whose length differs from `fn`'s
            positional arguments (functions with `*args` accept any length).
    """
    if host_call is None:
        return
    if not isinstance(host_call, (tuple, list)):
        raise ValueError(
            f"{name} should be tuple or list: `({name}_fn, tensors)`. "
            f"Received: {name}={host_call!r}"
        )
    if len(host_call) != 2:
        raise ValueError(
            f"{name} should have two elements. Pass `({name}_fn, tensors)`; "
            f"received {len(host_call)} elements."
        )
    fn, tensors = host_call
    if not callable(fn):
        raise TypeError(f"{name}[0] should be callable. Received: {fn!r}")
    if not isinstance(tensors, (tuple, list, dict)):
        raise ValueError(
            f"{name}[1] should be tuple or list, or dict. Received: {type(tensors).__name__}"
        )
    if isinstance(tensors, (tuple, list)):
        params = inspect.signature(fn).parameters.values()
        if any(p.kind == p.VAR_POSITIONAL for p in params):
            return
        positional = [
            p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        if len(tensors) != len(positional):
            raise RuntimeError(
                f"In TPUEstimatorSpec.{name}, length of tensors {len(tensors)} does not "
                f"match method args of the function, which takes {len(positional)}."
            )


def check_hooks(name: str, hooks: Sequence[Any] | None) -> tuple:
    """Returns `hooks` (session hooks or Keras callbacks) as a tuple; otherwise the original's TypeError.

    `name` is `"hooks"` for the arguments of `train`/`evaluate`/`predict` (the
    Estimator's "Hooks must be a SessionRunHook" text) or the spec field
    (`"training_hooks"`, ...: the spec's "All hooks must be ..." text).
    Session hooks run as `SessionRunHookCallback`s, once per execution.
    """
    hooks = tuple(hooks or ())
    for hook in hooks:
        if not isinstance(hook, keras.callbacks.Callback | tf.compat.v1.train.SessionRunHook):
            original = (
                f"Hooks must be a SessionRunHook, given: {hook}"
                if name == "hooks"
                else f"All hooks must be SessionRunHook instances, given: {hook}"
            )
            raise TypeError(f"{original}. keras_tpu_estimator takes keras.callbacks.Callback objects.")
    return hooks


RESERVED_PARAMS_KEYS = ("batch_size", "context")


def function_args(fn: Callable[..., Any], named_only: bool = False) -> tuple[str, ...]:
    """Names of `fn`'s parameters (`functools.partial` and bound methods included); () if unknown.

    `named_only` leaves out `*args` / `**kwargs`, as the Estimator's `fn_args` did.

    Example:

    >>> function_args(lambda features, params, **kwargs: None, named_only=True)
    ('features', 'params')
    """
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ()
    skipped = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD) if named_only else ()
    return tuple(p.name for p in parameters if p.kind not in skipped)


def check_params(params: Any) -> dict:
    """Returns a copy of `params`, or raises the seed's reserved-key ValueError."""
    params = dict(params or {})
    reserved = [key for key in RESERVED_PARAMS_KEYS if key in params]
    if reserved:
        raise ValueError(
            f"{list(RESERVED_PARAMS_KEYS)} are reserved keys but existed in params "
            f"{params}. Remove {reserved} from params: the batch size comes from "
            "train_batch_size/eval_batch_size/predict_batch_size."
        )
    return params


def check_model_fn(model_fn: Any) -> None:
    """Raises the seed's errors for a `model_fn` that is not callable or lacks `params`."""
    if not callable(model_fn):
        raise TypeError(f"`model_fn` must be callable. Received: {model_fn!r}")
    if "params" not in function_args(model_fn):
        raise ValueError(
            f"model_fn ({model_fn}) does not include params argument, required by "
            "TPUEstimator to pass batch size as params['batch_size']. Add a `params` argument."
        )


_VALID_MODEL_FN_ARGS = frozenset({"features", "labels", "mode", "params", "self", "config"})


def verify_model_fn_args(model_fn: Any, params: dict | None) -> None:
    """The Estimator constructor's `model_fn` checks, with its messages (ValueError).

    `model_fn` must take `features`, take `params` when params are given, and
    take nothing beyond `features, labels, mode, params, config` (and `self`).
    """
    args = set(function_args(model_fn, named_only=True))
    if "features" not in args:
        raise ValueError(f"model_fn ({model_fn}) must include features argument.")
    if params is not None and "params" not in args:
        raise ValueError(
            f"model_fn ({model_fn}) does not include params argument, but params ({params}) "
            "is passed to Estimator."
        )
    unexpected = list(args - _VALID_MODEL_FN_ARGS)
    if unexpected:
        raise ValueError(f"model_fn ({model_fn}) has following not expected args: {unexpected}")


_SPEC_FIELDS = (
    "mode",
    "predictions",
    "loss",
    "train_op",
    "eval_metrics",
    "export_outputs",
    "scaffold_fn",
    "host_call",
    "training_hooks",
    "evaluation_hooks",
    "prediction_hooks",
)


class TPUEstimatorSpec(collections.namedtuple("TPUEstimatorSpec", _SPEC_FIELDS)):
    """What a TPUEstimator `model_fn` returns.

    Args:
        mode: One of `ModeKeys`.
        predictions: Dict of batch-major tensors (or one tensor), for PREDICT.
        loss: Scalar loss tensor, for TRAIN and EVAL.
        train_op: Op that applies one update (TF1 `Optimizer.minimize(...)`),
            or `None` when the model is given a Keras optimizer.
        eval_metrics: `(metric_fn, tensors)`; tensors are a list (positional) or
            dict (keywords).
        export_outputs: Dict of serving signatures.
        scaffold_fn: Zero-argument function returning a Scaffold (or None-free value).
        host_call: `(fn, tensors)` run on the host for every step.
        training_hooks, evaluation_hooks, prediction_hooks: `SessionRunHook`s
            (run once per execution) or Keras callbacks.

    Example:

    ```python
    def model_fn(features, labels, mode, params):
        logits = tf.compat.v1.layers.dense(features["x"], 10)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits))
        opt = tf.compat.v1.train.AdamOptimizer(1e-3)
        train_op = opt.minimize(loss, tf.compat.v1.train.get_or_create_global_step())
        return TPUEstimatorSpec(mode, loss=loss, train_op=train_op)
    ```

    Differences from TPUEstimator: Keras callbacks are accepted as hooks too.
    """

    def __new__(
        cls,
        mode: str,
        predictions: Any = None,
        loss: Any = None,
        train_op: Any = None,
        eval_metrics: HostCall | None = None,
        export_outputs: Mapping[str, Any] | None = None,
        scaffold_fn: Callable[[], Any] | None = None,
        host_call: HostCall | None = None,
        training_hooks: Sequence[keras.callbacks.Callback] | None = None,
        evaluation_hooks: Sequence[keras.callbacks.Callback] | None = None,
        prediction_hooks: Sequence[keras.callbacks.Callback] | None = None,
    ) -> TPUEstimatorSpec:
        check_host_call("eval_metrics", eval_metrics)
        check_host_call("host_call", host_call)
        hooks = [check_hooks(name, value) for name, value in (
            ("training_hooks", training_hooks),
            ("evaluation_hooks", evaluation_hooks),
            ("prediction_hooks", prediction_hooks),
        )]
        predictions, loss = _check_fields(mode, predictions, loss, train_op, export_outputs)
        return super().__new__(
            cls, mode, predictions, loss, train_op, eval_metrics, export_outputs, scaffold_fn, host_call, *hooks
        )

    def as_estimator_spec(self) -> EstimatorSpec:
        """The equivalent `EstimatorSpec` for CPU training and evaluation, as the original built it.

        `eval_metrics` become `eval_metric_ops` (the metric function is called
        here) and `scaffold_fn` is called for the `scaffold`.

        Example:

        ```python
        def model_fn(features, labels, mode, params):
            spec = TPUEstimatorSpec(mode, loss=tf.constant(0.5), train_op=tf.no_op())
            return spec if params["use_tpu"] else spec.as_estimator_spec()

        assert isinstance(model_fn({}, None, ModeKeys.TRAIN, {"use_tpu": False}), EstimatorSpec)
        ```
        """
        if self.host_call is not None:
            raise NotImplementedError(
                "as_estimator_spec() with a host_call: the original ran it as a session hook. "
                "Return the TPUEstimatorSpec itself; keras_tpu_estimator runs its host_call on "
                "every path."
            )
        eval_metric_ops = None
        if self.eval_metrics is not None:
            metric_fn, tensors = self.eval_metrics
            eval_metric_ops = metric_fn(**tensors) if isinstance(tensors, dict) else metric_fn(*tensors)
        return EstimatorSpec(
            mode=self.mode,
            predictions=self.predictions,
            loss=self.loss,
            train_op=self.train_op,
            eval_metric_ops=eval_metric_ops,
            export_outputs=self.export_outputs,
            scaffold=self.scaffold_fn() if self.scaffold_fn else None,
            training_hooks=self.training_hooks,
            evaluation_hooks=self.evaluation_hooks,
            prediction_hooks=self.prediction_hooks,
        )


_ESTIMATOR_SPEC_FIELDS = (
    "mode",
    "predictions",
    "loss",
    "train_op",
    "eval_metric_ops",
    "export_outputs",
    "training_chief_hooks",
    "training_hooks",
    "scaffold",
    "evaluation_hooks",
    "prediction_hooks",
)


class EstimatorSpec(collections.namedtuple("EstimatorSpec", _ESTIMATOR_SPEC_FIELDS)):
    """The plain Estimator's spec, accepted where TPUEstimator accepted it.

    Example:

    ```python
    def model_fn(features, labels, mode, params):
        return EstimatorSpec(ModeKeys.TRAIN, loss=tf.constant(0.5), train_op=tf.no_op())

    estimator = kte.Estimator(model_fn, model_dir=model_dir)
    ```

    Differences from TPUEstimator: `training_chief_hooks` raise the original's
    TPU ValueError when the spec is used for training; a `scaffold` gets a
    warning naming the parts this library does not run.
    """

    def __new__(
        cls,
        mode: str,
        predictions: Any = None,
        loss: Any = None,
        train_op: Any = None,
        eval_metric_ops: Mapping[str, Any] | None = None,
        export_outputs: Mapping[str, Any] | None = None,
        training_chief_hooks: Sequence[Any] | None = None,
        training_hooks: Sequence[Any] | None = None,
        scaffold: Any = None,
        evaluation_hooks: Sequence[Any] | None = None,
        prediction_hooks: Sequence[Any] | None = None,
    ) -> EstimatorSpec:
        predictions, loss = _check_fields(mode, predictions, loss, train_op, export_outputs)
        if scaffold is not None and not isinstance(scaffold, tf.compat.v1.train.Scaffold):
            raise TypeError(f"scaffold must be tf.train.Scaffold. Given: {scaffold}")
        for hook in training_chief_hooks or ():
            if not isinstance(hook, tf.compat.v1.train.SessionRunHook | keras.callbacks.Callback):
                raise TypeError(f"All hooks must be SessionRunHook instances, given: {hook}")
        return super().__new__(
            cls,
            mode,
            predictions,
            loss,
            train_op,
            _check_eval_metric_ops(eval_metric_ops),
            export_outputs,
            tuple(training_chief_hooks or ()),
            check_hooks("training_hooks", training_hooks),
            scaffold,
            check_hooks("evaluation_hooks", evaluation_hooks),
            check_hooks("prediction_hooks", prediction_hooks),
        )

    def _replace(self, **changes: Any) -> EstimatorSpec:
        """A copy with `changes`; the mode cannot change (the Estimator's rule)."""
        if "mode" in changes and changes["mode"] != self.mode:
            raise ValueError("mode of EstimatorSpec cannot be changed.")
        return super()._replace(**changes)


def _check_graph(name: str, tensor: Any) -> None:
    """The Estimator's error for a tensor of another graph than the one `model_fn` builds."""
    graph = getattr(tensor, "graph", None)
    if graph is None or tf.executing_eagerly() or graph is tf.compat.v1.get_default_graph():
        return
    raise ValueError(
        f'{name} with "{tensor.name}" must be from the default graph. Possible causes of this '
        f"error include: \n\n1) {name} was created outside the context of the default graph."
        "\n\n2) The object passed through to EstimatorSpec was not created in the most recent "
        'call to "model_fn".'
    )


def _is_tensor(value: Any) -> bool:
    return tf.is_tensor(value) or isinstance(value, tf.Variable | tf.distribute.DistributedValues)


def _checked_loss(mode: Any, loss: Any, train_op: Any) -> Any:
    """`loss` after the Estimator's `loss` and `train_op` checks (a `[1]` loss reshaped to a scalar).

    A TRAIN spec without `train_op` is accepted here: this library trains it
    with the model's Keras optimizer, and raises "Missing train_op." when the
    model has none.
    """
    if train_op is not None and not (isinstance(train_op, tf.Operation) or _is_tensor(train_op)):
        raise TypeError(f"train_op must be Operation or Tensor, given: {train_op}")
    if loss is None:
        if mode in (ModeKeys.TRAIN, ModeKeys.EVAL):
            raise ValueError("Missing loss. TRAIN and EVAL specs need a scalar loss tensor.")
        return loss
    if not (tf.is_tensor(loss) or isinstance(loss, tf.Variable)):
        raise TypeError(f"loss must be Tensor, given: {loss}")
    if loss.shape.num_elements() not in (None, 1):
        raise ValueError(f"Loss must be scalar, given: {loss}. Reduce it, e.g. with tf.reduce_mean.")
    return tf.reshape(loss, []) if loss.shape.rank not in (0, None) else loss


def _check_fields(mode: Any, predictions: Any, loss: Any, train_op: Any, export_outputs: Any) -> tuple:
    """The Estimator's spec checks, with its messages: `(predictions, loss)` (see `_checked_loss`)."""
    loss = _checked_loss(mode, loss, train_op)
    for name, value in (("train_op", train_op), ("loss", loss)):
        if value is not None:
            _check_graph(name, value)
    if predictions is None:
        if mode == ModeKeys.PREDICT:
            raise ValueError("Missing predictions. PREDICT specs need a dict of batch-major tensors.")
    elif isinstance(predictions, dict):
        for key, value in predictions.items():
            if not _is_tensor(value):
                raise TypeError(f"predictions[{key}] must be Tensor, given: {value}")
            _check_graph("prediction values", value)
    elif not _is_tensor(predictions):
        raise TypeError(f"predictions must be Tensor, given: {predictions}")
    if mode == ModeKeys.PREDICT and export_outputs is not None:
        if not isinstance(export_outputs, dict):
            raise TypeError(f"`export_outputs` must be dict, received: {export_outputs}.")
        if not all(hasattr(output, "as_signature_def") for output in export_outputs.values()):
            raise TypeError(
                f"Values in `export_outputs` must be ExportOutput objects, received: {export_outputs}."
            )
    return predictions, loss


def _check_eval_metric_ops(eval_metric_ops: Any) -> dict:
    """`eval_metric_ops` as a dict of `(value, update_op)` pairs, with the Estimator's TypeErrors."""
    if eval_metric_ops is None:
        return {}
    if not isinstance(eval_metric_ops, dict):
        raise TypeError(f"eval_metric_ops must be a dict, given: {eval_metric_ops}")
    for key, value in eval_metric_ops.items():
        if not isinstance(value, tuple) or len(value) != 2:
            raise TypeError(
                "Values of eval_metric_ops must be (metric_value, update_op) tuples, given: "
                f"{value} for key: {key}"
            )
    return dict(eval_metric_ops)


AnySpec = TPUEstimatorSpec | EstimatorSpec


def check_spec(spec: Any, mode: str, model_fn: ModelFn) -> AnySpec:
    """Checks what `model_fn` returned in `mode`, with the Estimator's messages; returns it.

    A loss of shape `[1]` is reshaped to a scalar, as the Estimator did.

    Raises:
        ValueError: not a `TPUEstimatorSpec` or `EstimatorSpec`; a field the
            mode needs is missing; a non-scalar loss; `training_chief_hooks`.
        TypeError: `train_op`, `loss` or `predictions` of the wrong type.
    """
    fn_name = getattr(model_fn, "__name__", repr(model_fn))
    if not isinstance(spec, (TPUEstimatorSpec, EstimatorSpec)):
        raise ValueError(
            f"model_fn should return an EstimatorSpec. `model_fn` ({fn_name}) must return a "
            f"TPUEstimatorSpec or EstimatorSpec in mode {mode!r}. Received: {type(spec).__name__}."
        )
    if mode == ModeKeys.TRAIN and getattr(spec, "training_chief_hooks", None):
        raise ValueError(
            "training_chief_hooks returned by EstimatorSpec is not supported in TPUEstimator."
            "If you want to pass training hooks, please pass via training_hooks."
        )
    try:
        loss = _checked_loss(mode, spec.loss, spec.train_op)
    except ValueError as error:  # the spec was built for another mode (or None): say which
        raise ValueError(f"{error} (what `model_fn` ({fn_name}) returned in mode {mode!r})") from None
    if mode == ModeKeys.PREDICT and spec.predictions is None:
        raise ValueError(
            f"Missing predictions. `model_fn` ({fn_name}) returned a spec without `predictions` "
            "in mode 'infer' (PREDICT); return a dict of batch-major tensors."
        )
    return spec if loss is spec.loss else spec._replace(loss=loss)
