"""Input: calling `input_fn` as TPUEstimator did, and distributing its dataset.

Owns the `input_fn` contract (a required `params` argument; optional `mode`,
`config`, `input_context`), the split of dataset elements into
`(features, labels)`, and the per-replica element spec the build traces from.
Batch arithmetic comes from `inputs/batch_plan.py`.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import tensorflow as tf

from keras_tpu_estimator.contract import InputFn, InputPipelineConfig, ModeKeys, function_args
from keras_tpu_estimator.utils import get_logger

from .graph_input import NOT_TENSORS, GraphInput, is_tensor_input

_log = get_logger(__name__)

Element = tuple  # (features, labels or None)


def split_element(element: Any) -> Element:
    """`(features, labels)` from an input element: only a 2-tuple carries labels."""
    if isinstance(element, tuple) and len(element) == 2:
        return element
    if isinstance(element, tuple):
        raise ValueError(
            "input_fn should return (features, labels) as a len 2 tuple. "
            f"Received a tuple of {len(element)} items. Return a dict of features, "
            "or a (features, labels) pair."
        )
    return element, None


def call_input_fn(
    input_fn: InputFn,
    mode: str,
    params: dict,
    config: Any,
    input_context: tf.distribute.InputContext | None = None,
    use_tpu: bool = False,
) -> tf.data.Dataset:
    """Calls `input_fn` with the arguments it declares; returns a `tf.data.Dataset`.

    `params` must be a fresh dict for this call (the caller copies it).
    Tensors (the TF1 style: `make_one_shot_iterator(dataset).get_next()`) are
    run as TF1 ran them: `input_fn` is called again in a graph of its own, and
    the dataset yields the tensors' values of one `session.run` after another
    until `OutOfRangeError` (`inputs/graph_input.py`). An `input_fn` that fails
    eagerly for being TF1-only (`make_initializable_iterator`, queues) goes
    straight to the graph. Tensors are refused where the original's TPU
    path required a dataset (`PER_HOST_V2`, PREDICT).

    Example:

    ```python
    def input_fn(params):
        dataset = tf.data.Dataset.range(8).batch(params["batch_size"])
        return tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()

    [int(b[0]) for b in call_input_fn(input_fn, "train", {"batch_size": 4}, None)]   # [0, 4]
    ```

    Raises:
        ValueError: `input_fn` has no `params` argument.
        TypeError: it returned something that is neither a dataset nor tensors,
            or tensors where the original's TPU path required a dataset.
    """
    args = function_args(input_fn)
    if "params" not in args:
        raise ValueError(
            f"input_fn ({input_fn}) does not include params argument, required by "
            'TPUEstimator to pass batch size as params["batch_size"]. Add a `params` argument.'
        )
    kwargs: dict[str, Any] = {"params": params}
    if "mode" in args:
        kwargs["mode"] = mode
    if "config" in args:
        kwargs["config"] = config
    if "input_context" in args:
        kwargs["input_context"] = input_context
    first_params = copy.copy(params)  # as this call saw them, for each build in a graph

    def build() -> Any:
        return input_fn(**{**kwargs, "params": copy.copy(first_params)})

    try:
        result = input_fn(**kwargs)
    except RuntimeError as error:
        if "eager" not in str(error).lower():
            raise
        _log.info("input_fn cannot run eagerly (%s); calling it in a TF1 graph.", error)
        graph_input = GraphInput(build)
        if not graph_input.from_dataset:
            _check_tensors_allowed(mode, config, use_tpu)
        return graph_input.dataset()
    if isinstance(result, tf.data.Dataset):
        return result
    _check_tensors_allowed(mode, config, use_tpu)
    if not is_tensor_input(result):
        raise TypeError(NOT_TENSORS.format(type(result).__name__))
    return GraphInput(build).dataset()


def _check_tensors_allowed(mode: str, config: Any, use_tpu: bool) -> None:
    """The original's TypeErrors for tensors where its TPU path required a dataset."""
    if use_tpu and config.tpu_config.per_host_input_for_training == InputPipelineConfig.PER_HOST_V2:
        raise TypeError("`input_fn` must return a `Dataset` for the PER_HOST_V2 input pipeline configuration.")
    if use_tpu and mode == ModeKeys.PREDICT:
        raise TypeError("For mode PREDICT, `input_fn` must return `Dataset` instead of `features` and `labels`.")


def batch_tensor(data: Any) -> Any:
    """The first tensor of `data` with a batch dimension (rank >= 1), or None (all scalars).

    Its leading dimension is the batch's rows; a per-batch scalar among the
    features (a flag, a scale) has none.
    """
    return next((t for t in tf.nest.flatten(data) if t.shape.rank != 0), None)


def static_batch_size(element_spec: Any) -> int | None:
    """The static leading dimension shared by all tensors of a dataset element, or None."""
    sizes = {
        tf.compat.dimension_value(spec.shape[0]) if spec.shape.rank else None
        for spec in tf.nest.flatten(element_spec)
        if isinstance(spec, tf.TensorSpec)
    }
    if len(sizes) == 1:
        return sizes.pop()
    return None


def per_replica_spec(global_spec: Any, num_replicas: int) -> Any:
    """The element spec one replica sees when a global batch is split `num_replicas` ways."""

    def split(spec: Any) -> Any:
        if not isinstance(spec, tf.TensorSpec) or not spec.shape.rank:
            return spec
        batch = tf.compat.dimension_value(spec.shape[0])
        batch = None if batch is None else batch // num_replicas
        return tf.TensorSpec([batch] + spec.shape[1:].as_list(), spec.dtype, spec.name)

    return tf.nest.map_structure(split, global_spec)


def placeholders(element_spec: Any) -> Any:
    """Graph placeholders matching `element_spec` (inside a build graph)."""

    def make(spec: Any) -> Any:
        if isinstance(spec, tf.TensorSpec):
            return tf.compat.v1.placeholder(spec.dtype, spec.shape)
        raise TypeError(
            f"Input elements must be dense tensors; received a {type(spec).__name__}."
        )

    return tf.nest.map_structure(make, element_spec)


def keras_input(x: Any, y: Any) -> Any:
    """The model's input from Keras' `(x, y)`: `(x, y)` for arrays, `x` alone otherwise.

    Raises:
        ValueError: `y` given with an `input_fn` or a dataset (they yield labels themselves).
    """
    if y is None:
        return x
    if callable(x) or isinstance(x, tf.data.Dataset):
        raise ValueError(
            "`y` is only for array input: an input_fn or a tf.data.Dataset yields "
            "(features, labels) itself. Pass `fit(input_fn)` or `fit(features, labels)`."
        )
    return (x, y)


def _is_zero(value: Any) -> bool:
    return isinstance(value, int | float) and value == 0


def refuse_keras_arguments(method: str, **arguments: Any) -> None:
    """Raises a ValueError naming Keras arguments `model_fn` has no meaning for.

    `sample_weight` / `class_weight` / `validation_split` are Keras' weighting
    and splitting of array input; a `model_fn` computes its own loss.
    """
    given = sorted(name for name, value in arguments.items() if value is not None and not _is_zero(value))
    if given:
        raise ValueError(
            f"EstimatorModel.{method} does not take {given}: the loss, and any weighting, come "
            "from model_fn. Put weights in the features (features['weight']) and use them in "
            "model_fn's loss; split validation data yourself and pass `validation_data`."
        )


def array_dataset(x: Any, batch_size: int, shuffle: bool, drop_remainder: bool) -> tf.data.Dataset:
    """Batches in-memory arrays as Keras' `fit` does: shuffled per epoch if asked.

    With `drop_remainder`, rows past the last full batch are dropped with a warning.
    """
    rows = int(tf.nest.flatten(x)[0].shape[0])
    dataset = tf.data.Dataset.from_tensor_slices(x)
    if shuffle:
        dataset = dataset.shuffle(rows, reshuffle_each_iteration=True)
    if drop_remainder and rows % batch_size:
        _log.warning(
            "%d of %d rows are not trained on: a TPU needs full batches of %d.",
            rows % batch_size, rows, batch_size,
        )
    return dataset.batch(batch_size, drop_remainder=drop_remainder)


def check_batch_rows(static: int | None, expected: int, partial: bool, source: str) -> None:
    """Raises when `source`'s static batch of `static` rows does not fit `params['batch_size']`.

    Training needs exactly `expected` rows; EVAL / PREDICT (`partial`) at most that.
    """
    if static is None or static == expected or (partial and static < expected):
        return
    if partial:  # the original's runtime check, made when the static batch shows it
        raise tf.errors.InvalidArgumentError(
            None,
            None,
            "The real batch size should not be greater than batch_size. "
            f"{source} returned batches of {static} rows, but params['batch_size'] is {expected}.",
        )
    raise ValueError(
        f"{source} returned batches of {static} rows, but params['batch_size'] is "
        f"{expected}" + (" (the real batch size should not be greater than batch_size)" if partial else "")
        + ". Batch with params['batch_size']."
    )


@dataclasses.dataclass(frozen=True)
class InputFnCall:
    """How one call of a model calls its `input_fn`: `call(input_context, batch_size)` returns the dataset.

    Each call gets a fresh copy of the user's params with this call's batch
    (`RunPath.params`: `batch_size`, and `context` on the strategy path), and
    on the strategy path the dataset's static batch is checked against it.

    Attributes:
        input_fn: The user's `input_fn`.
        mode: A `ModeKeys` value.
        path: The model's `RunPath`.
        config: `RunConfig`.
        params: The user's params.
        batch: The call's `BatchPlan`.
    """

    input_fn: Any
    mode: str
    path: Any
    config: Any
    params: dict
    batch: Any

    def __call__(self, input_context: Any, batch_size: int | None) -> tf.data.Dataset:
        plan, path = self.batch, self.path
        params = path.params(self.params, self.mode, plan.global_size, plan.per_replica, input_context, for_input_fn=True)
        if batch_size is not None:
            params["batch_size"] = batch_size
        dataset = call_input_fn(self.input_fn, self.mode, params, self.config, input_context, path.strategy_path)
        if path.needs_static_batch:
            partial = self.mode != ModeKeys.TRAIN
            check_batch_rows(static_batch_size(dataset.element_spec), batch_size, partial, "input_fn")
        return dataset
