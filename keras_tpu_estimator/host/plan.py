"""The host plan: what each step sends to the host, in which order, written once for both sides.

A step's host tensors travel as one flat list: `host_call`'s tensors, then
`eval_metrics`' (EVAL only), then the step's merged TF1 summary (TRAIN, when
`model_fn` makes `tf.compat.v1.summary.*`: `tf1/summaries.py`), then the
padding mask when the batch is padded.
`HostPlan` is made once per mode at build (`HostRunner.record`); the device
step builds the list with `HostPlan.device_values` and the host takes it apart
with `HostPlan.split`, so the order is written here only.

On the strategy path every step's tensors have the same shape (batches are
padded to a static size) and are stacked over an execution's steps. On the
CPU path (`use_tpu=False`) a step's tensors are whatever `model_fn` made, as
TPUEstimator's CPU path passed them to the host function: a tensor whose
static shape is not fully known (a partial last batch, a batch of the
input's own size) travels *ragged*, in the one transfer format of
`transfer.py` (values, dims and rank, concatenated over steps), and the host
cuts the steps apart (`RaggedSteps`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import tensorflow as tf

from keras_tpu_estimator.contract import ModeKeys
from keras_tpu_estimator.tf1 import SPEC as SUMMARY_SPEC
from keras_tpu_estimator.utils import get_logger

from .transfer import RaggedSteps, ragged_encoding, ragged_specs

_log = get_logger(__name__)


def split_host_call(name: str, host_call: Any) -> tuple[Callable, list[str] | None, list[Any]]:
    """`(fn, keys or None, flat tensors)` from a validated `(fn, list or dict)` pair."""
    fn, tensors = host_call
    if isinstance(tensors, dict):
        keys = sorted(tensors)
        return fn, keys, [tensors[key] for key in keys]
    return fn, None, list(tensors)


def check_batch_major(name: str, tensors: Sequence[Any], keys: list[str] | None, scalars: bool = False) -> None:
    """Raises a ValueError naming any host tensor that cannot be concatenated across replicas.

    `scalars`: scalars are allowed (the CPU path: nothing is concatenated).
    """
    for index, tensor in enumerate(tensors):
        label = f"{name}[1][{keys[index]!r}]" if keys else f"{name}[1][{index}]"
        if not isinstance(tensor, (tf.Tensor, tf.Variable)) and not hasattr(tensor, "shape"):
            raise ValueError(
                f"{label} must be a tensor; received {type(tensor).__name__}. Nested "
                "structures are not supported: pass a flat list or dict of tensors."
            )
        if tensor.shape.rank == 0 and not scalars:
            raise RuntimeError(
                "All tensors outfed from TPU should preserve batch size dimension, but got scalar "
                f"{tensor}. {label} must keep a batch dimension so it can be concatenated across "
                "replicas: use `tf.reshape(t, [1])` for a scalar."
            )


def _per_row(tensor: Any, mask_rows: int | None) -> bool | None:
    """Whether `tensor` has one row per padded batch row (None: its first dimension is not static)."""
    if mask_rows is None or not tensor.shape.rank:
        return False
    rows = tensor.shape.as_list()[0]
    return None if rows is None else rows == mask_rows


@dataclasses.dataclass(frozen=True)
class HostPart:
    """One `(fn, tensors)` pair of the spec, as the host sees it.

    Attributes:
        name: `"host_call"` or `"eval_metrics"`.
        fn: The user's function.
        keys: Dict keys (tensors passed as keywords, sorted), or None (positional).
        specs: `tf.TensorSpec` of each tensor as gathered for one step
            (concatenated over replicas; any row count when padded).
        per_row: For each tensor, whether it has one row per batch row (so
            loses the padded rows: `transfer.drop_padding`), as the build's
            static shapes tell; None where its first dimension is not static.
        ragged: For each tensor, whether it travels ragged (`RaggedSteps`).

    Example:

    ```python
    from keras_tpu_estimator.tf1 import model_fn_scope

    with tf.Graph().as_default(), model_fn_scope():   # the build's EVAL spec
        spec = model_fn({"x": tf.zeros([4, 4])}, tf.zeros([4, 1]), kte.ModeKeys.EVAL, {})
        plan = HostPlan.from_spec("eval", spec, replicas=1, padded=False)
    part = plan.eval_metrics
    with tf.Graph().as_default():   # the host's graph
        metrics = part.call([tf.ones([4, 1]), tf.ones([4, 1])])   # metric_fn(labels, y)
    assert list(metrics) == ["accuracy"]
    ```
    """

    name: str
    fn: Callable
    keys: tuple[str, ...] | None
    specs: tuple[tf.TensorSpec, ...]
    per_row: tuple[bool | None, ...]
    ragged: tuple[bool, ...]

    @property
    def size(self) -> int:
        """How many tensors this part sends per step."""
        return len(self.specs)

    def call(self, values: Sequence[Any], warn: bool = True) -> Any:
        """`fn(*values)`, or `fn(**{key: value})` for dict tensors."""
        try:
            if self.keys is None:
                return self.fn(*values)
            return self.fn(**dict(zip(self.keys, values, strict=True)))
        except TypeError:
            if warn:
                _log.warning(
                    "Exception while calling %s. It is likely the tensors (%s[1]) do not match "
                    "the function's arguments.",
                    self.name,
                    self.name,
                )
            raise


class HostValues(NamedTuple):
    """One step's (or one execution's stacked) host values, taken apart by `HostPlan.split`."""

    host_call: list
    eval_metrics: list
    mask: Any


@dataclasses.dataclass(frozen=True, eq=False)
class HostPlan:
    """What each step of one mode sends to the host: `host_call`, `eval_metrics`, mask.

    Made once per mode at build by `HostRunner.record`. The device step calls
    `device_values`; the device loop stacks (or, for ragged tensors,
    concatenates) them per step (`specs`, `concat`); the host takes each
    execution's arrays apart with `split`.

    Attributes:
        mode: The mode.
        host_call: The `host_call` part, or None.
        eval_metrics: The `eval_metrics` part (EVAL only), or None.
        padded: The host receives a padding mask (last) and drops padded rows.
        specs: Per-replica `tf.TensorSpec`s of `device_values` (the device
            loop's `host_spec`; a list, as `device_values` returns).
        concat: For each of `specs`, whether the loop concatenates it over
            steps (a ragged tensor's flat values) instead of stacking it.
        summaries: Each step sends its merged TF1 summary (`tf1.summaries.SPEC`).

    Example:

    ```python
    from keras_tpu_estimator.tf1 import model_fn_scope

    with tf.Graph().as_default(), model_fn_scope():   # a replica's EVAL step
        spec = model_fn({"x": tf.zeros([4, 4])}, tf.zeros([4, 1]), kte.ModeKeys.EVAL, {})
        plan = HostPlan.from_spec("eval", spec, replicas=4, padded=True)      # at build
        tensors = plan.device_values(spec, tf.ones([4]))                      # in the device step
    # on the host: host_call, metrics, mask = plan.split(execution_arrays)
    ```
    """

    mode: str
    host_call: HostPart | None
    eval_metrics: HostPart | None
    padded: bool
    specs: list[tf.TensorSpec]
    concat: tuple[bool, ...]
    summaries: bool = False

    @classmethod
    def from_spec(
        cls, mode: str, spec: Any, replicas: int, padded: bool, ragged: bool = False, summaries: bool = False,
        mask_rows: int | None = None,
    ) -> HostPlan | None:
        """Checks `spec`'s host tensors; the plan, or None when nothing travels to the host.

        `ragged` (the CPU path: one replica, batches as the input made them):
        a tensor whose static shape is not fully known travels ragged, and
        scalars are allowed. `summaries`: each step also sends its TF1 summary.
        `mask_rows`: a padded step's rows per replica (default: the first
        tensor's first dimension).
        """
        pairs = [("host_call", getattr(spec, "host_call", None))]
        if mode == ModeKeys.EVAL:
            pairs.append(("eval_metrics", getattr(spec, "eval_metrics", None)))
        tensors: list = []
        found: dict[str, tuple] = {}
        for name, pair in pairs:
            if pair is not None:
                fn, keys, part_tensors = split_host_call(name, pair)
                check_batch_major(name, part_tensors, keys, scalars=ragged)
                found[name] = (fn, keys, part_tensors)
                tensors += part_tensors
        if not found and not summaries:
            return None
        if not tensors or ragged:  # host_call=(fn, []): nothing travels, but fn still runs once per step
            padded = False
        specs: list[tf.TensorSpec] = []
        concat: list[bool] = []
        for t in tensors:
            if ragged and not t.shape.is_fully_defined():
                specs += ragged_specs(t.dtype)
                concat += [True, True, True]
            else:
                specs.append(tf.TensorSpec(t.shape, t.dtype))
                concat.append(False)
        if padded and mask_rows is None:
            mask_rows = tf.compat.dimension_value(specs[0].shape[0])
        mask_rows = mask_rows if padded else None
        if summaries:
            specs.append(SUMMARY_SPEC)
            concat.append(False)
        if padded:
            specs.append(tf.TensorSpec([mask_rows], tf.float32))
            concat.append(False)

        def part(name: str) -> HostPart | None:
            if name not in found:
                return None
            fn, keys, part_tensors = found[name]
            gathered = []
            for t in part_tensors:
                shape = t.shape.as_list() if t.shape.rank is not None else None
                if shape:  # padded rows are dropped before the host sees them: any row count
                    shape[0] = None if padded or shape[0] is None else shape[0] * replicas
                gathered.append(tf.TensorSpec(shape, t.dtype))
            per_row = tuple(_per_row(t, mask_rows) for t in part_tensors)
            is_ragged = tuple(ragged and not t.shape.is_fully_defined() for t in part_tensors)
            return HostPart(name, fn, None if keys is None else tuple(keys), tuple(gathered), per_row, is_ragged)

        return cls(mode, part("host_call"), part("eval_metrics"), padded, specs, tuple(concat), summaries)

    def _parts(self) -> list[HostPart]:
        return [part for part in (self.host_call, self.eval_metrics) if part is not None]

    def device_values(self, spec: Any, mask: Any, summary: Any = None) -> list[tf.Tensor]:
        """One replica's host tensors for one step, in transfer order (the device side).

        Args:
            spec: The step's `model_fn` spec.
            mask: The step's padding mask, or None.
            summary: The step's merged TF1 summary (`TF1Summaries.step_summary`),
                when the plan sends `summaries` (None: an empty one).
        """
        tensors: list = []
        for part in self._parts():
            pair = getattr(spec, part.name, None)
            if pair is None:
                raise ValueError(
                    f"model_fn returned {part.name} when the model was built but None now. "
                    "Return the same kind of spec on every call."
                )
            for tensor, ragged in zip(split_host_call(part.name, pair)[2], part.ragged, strict=True):
                tensors += ragged_encoding(tensor) if ragged else [tensor]
        if self.summaries:
            tensors.append(tf.constant([""]) if summary is None else summary)
        return tensors + ([mask] if mask is not None and self.padded else [])

    def split(self, values: Sequence[Any]) -> HostValues:
        """Takes an execution's values (stacked over steps) apart (the host side).

        A ragged tensor's three arrays become one `RaggedSteps`; either way
        `value[i]` is step i's.
        """
        arrays = iter(values)

        def take(part: HostPart | None) -> list:
            if part is None:
                return []
            return [
                RaggedSteps(next(arrays), next(arrays), next(arrays)) if ragged else next(arrays) for ragged in part.ragged
            ]

        host_call, metrics = take(self.host_call), take(self.eval_metrics)
        if self.summaries:
            next(arrays)  # `summaries_of`'s
        return HostValues(host_call, metrics, next(arrays) if self.padded else None)

    def summaries_of(self, values: Sequence[Any]) -> Any:
        """An execution's `[steps, replicas]` serialized TF1 summaries (the host side), or None."""
        if not self.summaries:
            return None
        return values[len(values) - 1 - int(self.padded)]
