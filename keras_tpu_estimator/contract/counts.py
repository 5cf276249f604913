"""Counts as the Estimator took them: steps, intervals and limits checked and made plain ints.

The original accepted NumPy integers wherever it took a count, rounded a real step
interval up (its timers fired at the first step at or past it), and raised its own
TypeError or ValueError text for the rest; these helpers are those rules, in one place.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np


def plain_count(value: Any) -> Any:
    """`value` as a plain Python int when it is integral (`np.int64`, `np.int32`, `bool`); else unchanged.

    Counts reach Keras and TensorFlow as Python ints: a NumPy integer makes an
    int64 tensor where an int32 one is expected, and a proto field refuses a bool.

    Example:

    >>> type(plain_count(np.int64(12)))
    <class 'int'>
    """
    return int(value) if isinstance(value, int | np.integer) else value


def whole_count(value: Any) -> Any:
    """A step count or interval of the Estimator as an int: its step timers fired at the first step >= `value`.

    None and 0 (off) pass; a positive real number becomes its ceiling (`2.5` -> 3).

    Example:

    >>> whole_count(np.int64(3)), whole_count(2.5), whole_count(None)
    (3, 3, None)
    """
    if value is None or isinstance(value, str) or not value:
        return plain_count(value)
    return math.ceil(value)


def index_count(value: Any) -> int | None:
    """`value` (None, an int, a NumPy int or a bool) as a plain int; TypeError for the rest, as `range()` raises.

    What TF1's Saver made of `keep_checkpoint_max`: `2.5` and `1.0` were TypeErrors.

    Example:

    >>> index_count(np.int32(5)), index_count(None)
    (5, None)
    """
    return None if value is None else int(operator.index(value))


def check_positive_integer(value: Any, name: str) -> int:
    """The original's check: TypeError unless an int (NumPy ints too), ValueError unless > 0; returns a plain int.

    Example:

    >>> check_positive_integer(12.3, "Train steps")
    Traceback (most recent call last):
    TypeError: Train steps must be int, got <class 'float'>
    """
    if not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be int, got {type(value)}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return int(value)


def check_positive_int(name: str, value: Any, allow_none: bool = True) -> int | None:
    """Raises a ValueError naming `name` unless `value` is a positive integer (NumPy ints too; not a bool).

    Returns it as a plain int (None stays None, if allowed).

    Example:

    >>> check_positive_int("steps", np.int64(12))
    12
    """
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
    return int(value)
