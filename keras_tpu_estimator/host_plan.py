"""The host plan: what each step sends to the host, in which order, written once for both sides.

A step's host tensors travel as one flat list: `host_call`'s tensors, then
`eval_metrics`' (EVAL only), then the padding mask when the batch is padded.
`HostPlan` is made once per mode at build (`HostRunner.record`); the device
step builds the list with `HostPlan.device_values` and the host takes it apart
with `HostPlan.split`, so the order is written here only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from keras_tpu_estimator.logs import get_logger
from keras_tpu_estimator.spec import ModeKeys

_log = get_logger(__name__)


def split_host_call(name: str, host_call: Any) -> tuple[Callable, list[str] | None, list[Any]]:
    """`(fn, keys or None, flat tensors)` from a validated `(fn, list or dict)` pair."""
    fn, tensors = host_call
    if isinstance(tensors, dict):
        keys = sorted(tensors)
        return fn, keys, [tensors[key] for key in keys]
    return fn, None, list(tensors)


def check_batch_major(name: str, tensors: Sequence[Any], keys: list[str] | None) -> None:
    """Raises a ValueError naming any host tensor that cannot be concatenated across replicas."""
    for index, tensor in enumerate(tensors):
        label = f"{name}[1][{keys[index]!r}]" if keys else f"{name}[1][{index}]"
        if not isinstance(tensor, (tf.Tensor, tf.Variable)) and not hasattr(tensor, "shape"):
            raise ValueError(
                f"{label} must be a tensor; received {type(tensor).__name__}. Nested "
                "structures are not supported: pass a flat list or dict of tensors."
            )
        if tensor.shape.rank == 0:
            raise RuntimeError(
                "All tensors outfed from TPU should preserve batch size dimension, but got scalar "
                f"{tensor}. {label} must keep a batch dimension so it can be concatenated across "
                "replicas: use `tf.reshape(t, [1])` for a scalar."
            )


def drop_padding(values: Sequence[np.ndarray], mask: np.ndarray) -> list[np.ndarray]:
    """One step's values without its padded rows.

    Per-row values (as many rows as `mask`) lose the rows whose mask is 0;
    others (a `[1]` tensor) pass as they are.
    """
    keep = mask > 0.5
    return [v[keep] if v.shape[:1] == keep.shape else v for v in values]


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
            loses the padded rows), as far as the build's static shapes tell.

    Example:

    ```python
    part = plan.eval_metrics
    part.call([labels, predictions])   # metric_fn(labels, predictions)
    ```
    """

    name: str
    fn: Callable
    keys: tuple[str, ...] | None
    specs: tuple[tf.TensorSpec, ...]
    per_row: tuple[bool, ...]

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
    `device_values`; the device loop stacks them per step (`specs`); the host
    takes each execution's arrays apart with `split`.

    Attributes:
        mode: The mode.
        host_call: The `host_call` part, or None.
        eval_metrics: The `eval_metrics` part (EVAL only), or None.
        padded: The host receives a padding mask (last) and drops padded rows.
        rows: With `padded`, the per-replica batch that tensors without a
            static row count are padded to on the device (EVAL on the CPU path).
        specs: Per-replica `tf.TensorSpec`s of `device_values` (the device
            loop's `host_spec`; a list, as `device_values` returns).

    Example:

    ```python
    plan = HostPlan.from_spec("eval", spec, replicas=4, padded=True)      # at build
    tensors = plan.device_values(spec, mask)                              # in the device step
    host_call, metrics, mask = plan.split(execution_arrays)               # on the host
    ```
    """

    mode: str
    host_call: HostPart | None
    eval_metrics: HostPart | None
    padded: bool
    rows: int | None
    specs: list[tf.TensorSpec]

    @classmethod
    def from_spec(
        cls, mode: str, spec: Any, replicas: int, padded: bool, rows: int | None = None,
        only_if_dynamic: bool = False,
    ) -> HostPlan | None:
        """Checks `spec`'s host tensors; the plan, or None when it has no `host_call` or `eval_metrics`.

        `only_if_dynamic`: pad (`padded`) only when a tensor's row count is not static.
        """
        pairs = [("host_call", getattr(spec, "host_call", None))]
        if mode == ModeKeys.EVAL:
            pairs.append(("eval_metrics", getattr(spec, "eval_metrics", None)))
        tensors: list = []
        found: dict[str, tuple] = {}
        for name, pair in pairs:
            if pair is not None:
                fn, keys, part_tensors = split_host_call(name, pair)
                check_batch_major(name, part_tensors, keys)
                found[name] = (fn, keys, part_tensors)
                tensors += part_tensors
        if not found:
            return None
        if not tensors:  # host_call=(fn, []): nothing travels, but fn still runs once per step
            padded = False
        if only_if_dynamic and all(t.shape[0] is not None for t in tensors):
            padded = False
        specs = [
            tf.TensorSpec([rows if t.shape[0] is None else t.shape[0], *t.shape[1:]], t.dtype)
            for t in tensors
        ]
        mask_rows = None
        if padded:
            mask_rows = rows or specs[0].shape[0]
            specs.append(tf.TensorSpec([mask_rows], tf.float32))

        def part(name: str) -> HostPart | None:
            if name not in found:
                return None
            fn, keys, part_tensors = found[name]
            gathered = []
            for t in part_tensors:
                shape = t.shape.as_list()
                # Padded rows are dropped before the host sees them: any row count.
                shape[0] = None if padded or shape[0] is None else shape[0] * replicas
                gathered.append(tf.TensorSpec(shape, t.dtype))
            device_rows = [rows if t.shape[0] is None else t.shape[0] for t in part_tensors]
            per_row = tuple(mask_rows is not None and r == mask_rows for r in device_rows)
            return HostPart(name, fn, None if keys is None else tuple(keys), tuple(gathered), per_row)

        return cls(mode, part("host_call"), part("eval_metrics"), padded, rows, specs)

    def device_values(self, spec: Any, mask: Any, features: Any = None) -> list[tf.Tensor]:
        """One replica's host tensors for one step, in transfer order (the device side).

        Args:
            spec: The step's `model_fn` spec.
            mask: The step's padding mask, or None. When the plan is padded
                and there is no mask (unpadded EVAL batches, the CPU path),
                per-row tensors are padded to `rows` and a mask of ones added,
                so every step's tensors stack.
            features: The step's features (their rows), needed in that case.
        """
        tensors: list = []
        for part in (self.host_call, self.eval_metrics):
            if part is not None:
                pair = getattr(spec, part.name, None)
                if pair is None:
                    raise ValueError(
                        f"model_fn returned {part.name} when the model was built but None now. "
                        "Return the same kind of spec on every call."
                    )
                tensors += split_host_call(part.name, pair)[2]
        if mask is None and self.padded:
            if features is None:
                raise ValueError("An unpadded step needs its features to pad the host tensors.")
            rows = tf.shape(tf.nest.flatten(features)[0])[0]
            size = self.specs[-1].shape[0]
            check = tf.debugging.Assert(
                rows <= size,
                ["The real batch size should not be greater than batch_size (host_call and eval_metrics "
                 "tensors are padded to it).", rows, size],
            )
            with tf.control_dependencies([check]):
                rows = tf.identity(rows)
            mask = tf.pad(tf.ones([rows]), [[0, size - rows]])
            tensors = [
                tf.ensure_shape(
                    tf.pad(t, [[0, size - rows]] + [[0, 0]] * (t.shape.rank - 1)), s.shape
                )
                if t.shape[0] is None
                else t
                for t, s in zip(tensors, self.specs[:-1], strict=True)
            ]
        return tensors + ([mask] if mask is not None and self.padded else [])

    def split(self, values: Sequence[Any]) -> HostValues:
        """Takes one step's values (or an execution's, stacked over steps) apart (the host side)."""
        count = self.host_call.size if self.host_call is not None else 0
        metrics = self.eval_metrics.size if self.eval_metrics is not None else 0
        return HostValues(
            list(values[:count]),
            list(values[count : count + metrics]),
            values[count + metrics] if self.padded else None,
        )
