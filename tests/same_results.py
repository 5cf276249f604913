"""Comparing this library's results with the original's recorded ones (one rule for every test file)."""

from __future__ import annotations

import builtins
import math

import tensorflow as tf

# Floats within float32 round-off of the original's (summation order differs across replicas).
RTOL, ATOL = 2e-5, 1e-6


def assert_same(ours, original, where: str = "", rtol: float = RTOL) -> None:
    """Equal structure and values; floats within float32 round-off of the original's (`rtol`)."""
    if isinstance(original, dict):
        assert isinstance(ours, dict) and sorted(ours) == sorted(original), f"{where}: {ours} != {original}"
        for key in original:
            assert_same(ours[key], original[key], f"{where}.{key}", rtol)
    elif isinstance(original, list | tuple):
        assert isinstance(ours, list | tuple) and len(ours) == len(original), f"{where}: {ours} != {original}"
        for i, (a, b) in enumerate(zip(ours, original, strict=True)):
            assert_same(a, b, f"{where}[{i}]", rtol)
    elif isinstance(original, float):
        assert isinstance(ours, int | float) and math.isclose(ours, original, rel_tol=rtol, abs_tol=ATOL), (
            f"{where}: {ours} != {original}")
    else:
        assert ours == original, f"{where}: {ours!r} != {original!r}"


def error_type(error: BaseException) -> str:
    """As the recording scripts name them: builtins by name, TF errors as `tf.errors.X`."""
    kind = type(error)
    if getattr(builtins, kind.__name__, None) is kind:
        return kind.__name__
    if isinstance(error, tf.errors.OpError):
        for base in kind.__mro__:
            if getattr(tf.errors, base.__name__, None) is base:
                return f"tf.errors.{base.__name__}"
    return kind.__name__
