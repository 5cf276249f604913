"""The text of `EstimatorModel.summary()`: every `model_fn` variable in a box-drawn table, then Keras' totals.

Keras' own summary walks layers called on inputs; an `EstimatorModel` has TF1-named
variables instead, so its table has a row per variable (name, shape, dtype, trainable,
parameters) and the totals Keras prints (parameters and bytes, in all and per kind).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf


def variable_table(
    variables: Mapping[str, Any],
    optimizer: list,
    line_length: int | None = None,
    positions: list[float] | None = None,
    layer_range: Any = None,
) -> str:
    """The table of `variables` (TF1 name to variable) and the totals, `optimizer`'s slots counted apart.

    `positions` are the right edges of the 5 columns (fractions of `line_length`, or
    characters); `layer_range` (two regexes) selects the rows by variable name.

    Example:

    >>> import keras
    >>> print(variable_table({"dense/kernel": keras.Variable(np.zeros((3, 1)), dtype="float32")}, []))
    ┌─────────────────────┬────────┬─────────┬───────────┬─────────┐
    │ Variable (TF1 name) │ Shape  │ Dtype   │ Trainable │ Param # │
    ├─────────────────────┼────────┼─────────┼───────────┼─────────┤
    │ dense/kernel        │ (3, 1) │ float32 │ Y         │       3 │
    └─────────────────────┴────────┴─────────┴───────────┴─────────┘
     Total params: 3 (12.00 B)
     Trainable params: 3 (12.00 B)
     Non-trainable params: 0 (0.00 B)
    """
    names = list(variables)
    first, last = _layer_range_rows(names, layer_range)
    rows = [["Variable (TF1 name)", "Shape", "Dtype", "Trainable", "Param #"]]
    for name in names[first:last]:
        v = variables[name]
        shape = "(" + ", ".join(str(d) for d in v.shape) + ("," if len(v.shape) == 1 else "") + ")"
        rows.append([name, shape, str(v.dtype), "Y" if v.trainable else "N", f"{int(np.prod(v.shape)):,}"])
    values = list(variables.values())
    text = _table(rows, _column_widths(rows, line_length, positions))
    text += _totals([v for v in values if v.trainable], [v for v in values if not v.trainable], optimizer)
    return "\n".join(text)


def _readable_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024:
            return f"{value:.2f} {unit}"
        value /= 1024
    return f"{value:.2f} TB"


def _column_widths(
    rows: list[list[str]], line_length: int | None, positions: list[float] | None
) -> list[int]:
    """Column widths (without borders) so that a line is `line_length` characters long."""
    natural = [max(len(row[i]) for row in rows) + 2 for i in range(len(rows[0]))]
    borders = len(natural) + 1
    content = (line_length - borders) if line_length else sum(natural)
    if positions is None:
        if line_length is None:
            return natural
        widths = [max(3, int(width * content / sum(natural))) for width in natural]
        widths[0] += max(0, content - sum(widths))
        return widths
    if len(positions) != len(natural):
        raise ValueError(
            f"`positions` must give the right edge of each of the {len(natural)} columns "
            f"({', '.join(rows[0])}). Received: {positions}"
        )
    edges = [0] + [int(content * p) if max(positions) <= 1 else int(p) for p in positions]
    return [max(3, b - a) for a, b in zip(edges, edges[1:], strict=False)]


def _cell(text: str, width: int, right: bool) -> str:
    if len(text) > width - 1:
        text = text[: max(width - 2, 0)] + "…"
    return text.rjust(width - 1) + " " if right else " " + text.ljust(width - 1)


def _table(rows: list[list[str]], widths: list[int]) -> list[str]:
    """The rows (the first is the header) as a box-drawn table; the last column right-aligned."""
    right = [False] * (len(widths) - 1) + [True]

    def line(row: list[str]) -> str:
        return "│" + "│".join(_cell(t, w, r) for t, w, r in zip(row, widths, right, strict=True)) + "│"

    def rule(left: str, mid: str, end: str) -> str:
        return left + mid.join("─" * w for w in widths) + end

    body = [line(row) for row in rows[1:]]
    return [rule("┌", "┬", "┐"), line(rows[0]), rule("├", "┼", "┤"), *body, rule("└", "┴", "┘")]


def _totals(trainable: list, non_trainable: list, optimizer: list) -> list[str]:
    """Keras' summary totals: parameters and bytes, in all and per kind."""

    def count(variables: list) -> tuple[int, int]:
        sizes = [int(np.prod(v.shape)) for v in variables]
        return sum(sizes), sum(n * tf.as_dtype(v.dtype).size for n, v in zip(sizes, variables, strict=True))

    kinds = {"Trainable": count(trainable), "Non-trainable": count(non_trainable)}
    if optimizer:
        kinds["Optimizer"] = count(optimizer)
    total = (sum(c for c, _ in kinds.values()), sum(b for _, b in kinds.values()))
    return [f" {kind} params: {c:,} ({_readable_size(b)})" for kind, (c, b) in {"Total": total, **kinds}.items()]


def _layer_range_rows(names: list[str], layer_range: Any) -> tuple[int, int]:
    if layer_range is None:
        return 0, len(names)
    if len(layer_range) != 2 or not all(isinstance(p, str) for p in layer_range):
        raise ValueError(f"layer_range must be two strings (regexes). Received: {layer_range}")
    starts = [i for i, name in enumerate(names) if re.match(layer_range[0], name)]
    ends = [i for i, name in enumerate(names) if re.match(layer_range[1], name)]
    if not starts or not ends:
        raise ValueError(f"layer_range {layer_range} matches no variable of {names}.")
    return starts[0], ends[-1] + 1
