"""Calling a `model_fn`: the one path training, evaluation, prediction and export share.

`invoke_model_fn` gives `model_fn` the arguments it declares (`features` by
keyword when it names it, else positionally; `labels`, `mode`, `config` and
`params` when it names them), refuses labels a `model_fn` does not take (as
the Estimator did), calls it inside `legacy.model_fn_scope()` and the
caller's own context managers, and checks the spec it returns
(`spec.check_spec`, and `check_scaffold` on an `EstimatorSpec.scaffold`).
`call_scaffold_fn` calls a `TPUEstimatorSpec.scaffold_fn` the same way, so a
`Saver` built there is a `tf1_saver.TracedSaver` in a traced graph.

What differs between callers is only what they pass: the model's runner
(`engine/runner.py`) its variable store, optimizer recording, padding mask and
synchronized gradients as contexts; the exporter (`export/saved_model.py`) Keras naming
contexts; `inference.model_fn_inference_on_tpu` nothing, and the two
behaviours of the original's TPU inference (undeclared labels dropped, the
Scaffold left to the exporter).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from keras_tpu_estimator.contract import AnySpec, EstimatorSpec, ModelFn, check_spec, function_args
from keras_tpu_estimator.tf1 import model_fn_scope, traced_saver_of
from keras_tpu_estimator.utils import get_logger

_log = get_logger(__name__)

_SCAFFOLD_UNUSED = ("ready_op", "ready_for_local_init_op", "saver", "summary_op")


def check_scaffold(scaffold: Any, where: str) -> None:
    """Warns on the parts of a Scaffold this library does not use.

    Used: the saver (what evaluation, prediction and export restore, see
    `tf1_saver.TracedSaver`), `init_op` / `init_feed_dict` / `init_fn` (run
    when nothing was restored) and `local_init_op` (every call). Not used:
    the ready ops (variables are always ready) and `summary_op`.

    Example:

    ```python
    with tf.Graph().as_default():
        scaffold = tf.compat.v1.train.Scaffold(summary_op=tf.constant(""))
        check_scaffold(scaffold, "scaffold_fn")   # warns: summary_op is not used
    ```
    """
    unused = [name for name in _SCAFFOLD_UNUSED if getattr(scaffold, name, None) is not None]
    if traced_saver_of(scaffold) is not None:  # evaluation and prediction restore with it
        unused.remove("saver")
    if unused:
        _log.warning(
            "The Scaffold of %s sets %s, which keras_tpu_estimator does not use: a Saver built "
            "outside model_fn is not read (checkpoints are written by the library's own saver, "
            "RunConfig.keep_checkpoint_max), summaries go through host_call, and variables are always ready.",
            where,
            unused,
        )


def call_scaffold_fn(scaffold_fn: Any, check: bool = True) -> Any:
    """`TPUEstimatorSpec.scaffold_fn()` called as TF1 called it, in the graph (a `Saver` is a `TracedSaver`).

    Raises ValueError when it returns None and warns (`check_scaffold`) on the
    parts this library does not use, unless `check` is False (an export, which
    the original let through `as_estimator_spec` unchecked).

    Example:

    ```python
    with tf.Graph().as_default():
        scaffold = call_scaffold_fn(lambda: tf.compat.v1.train.Scaffold())
        try:
            call_scaffold_fn(lambda: None)
        except ValueError as error:
            assert "returns None" in str(error)
    ```
    """
    with model_fn_scope():
        scaffold = scaffold_fn()
    if scaffold is None and check:
        raise ValueError(
            "TPUEstimatorSpec.scaffold_fn returns None, which is not allowed. "
            "Return `tf.compat.v1.train.Scaffold()`."
        )
    if check:
        check_scaffold(scaffold, "scaffold_fn")
    return scaffold


def invoke_model_fn(
    model_fn: ModelFn,
    features: Any,
    labels: Any,
    mode: str,
    params: Any,
    config: Any,
    *,
    contexts: Iterable[contextlib.AbstractContextManager] = (),
    drop_undeclared_labels: bool = False,
    check_estimator_scaffold: bool = True,
) -> AnySpec:
    """Calls `model_fn` with the arguments it declares and returns the checked spec.

    `features` goes by keyword when `model_fn` names it, else first; `labels`,
    `mode`, `config` and `params` only when `model_fn` names them, as the
    Estimator passed them. `contexts` are entered in order (the first
    outermost), then `legacy.model_fn_scope()`, around the call alone; all are
    exited, last first, when `model_fn` raises. Use it while a graph or a
    `tf.function` is traced.

    Args:
        model_fn: The user's `model_fn`.
        features: Passed to `model_fn`.
        labels: Passed when `model_fn` takes `labels`; `None` when there are none.
        mode: A `ModeKeys` value; `check_spec` checks the spec for it.
        params: Passed as is when `model_fn` takes `params` (the caller copies).
        config: Passed as is when `model_fn` takes `config`.
        contexts: Context managers (not yet entered) to call `model_fn` in.
        drop_undeclared_labels: Drop labels `model_fn` does not take instead of
            raising, as the original's `model_fn_inference_on_tpu` did.
        check_estimator_scaffold: Run `check_scaffold` on an
            `EstimatorSpec.scaffold` (off where a serving graph is built).

    Returns:
        The `TPUEstimatorSpec` or `EstimatorSpec` from `spec.check_spec`.

    Raises:
        ValueError: labels given to a `model_fn` without a `labels` argument,
            or a spec `check_spec` refuses.

    Example:

    ```python
    from keras_tpu_estimator.tf1.legacy import legacy_layers

    with tf.Graph().as_default():
        features, labels = {"x": tf.zeros([8, 4])}, tf.zeros([8, 1])
        spec = invoke_model_fn(model_fn, features, labels, kte.ModeKeys.TRAIN,
                               params={"batch_size": 8}, config=kte.RunConfig(),
                               contexts=[legacy_layers()])
        assert spec.train_op is not None
    ```
    """
    args = function_args(model_fn)
    if labels is not None and "labels" not in args and not drop_undeclared_labels:
        raise ValueError(
            "model_fn does not take labels, but input_fn returns labels. Add a "
            "`labels` argument to model_fn, or return only features from input_fn."
        )
    kwargs: dict[str, Any] = {}
    for name, value in (("labels", labels), ("mode", mode), ("config", config), ("params", params)):
        if name in args:
            kwargs[name] = value
    with contextlib.ExitStack() as stack:
        for context in contexts:
            stack.enter_context(context)
        stack.enter_context(model_fn_scope())
        if "features" in args:
            spec = model_fn(features=features, **kwargs)
        else:
            spec = model_fn(features, **kwargs)
    spec = check_spec(spec, mode, model_fn)
    if check_estimator_scaffold and isinstance(spec, EstimatorSpec) and spec.scaffold is not None:
        check_scaffold(spec.scaffold, "the EstimatorSpec")
    return spec


__all__ = ["call_scaffold_fn", "check_scaffold", "invoke_model_fn"]
