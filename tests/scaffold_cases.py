"""Scaffold initialisers (`init_fn`, `init_op`, `local_init_op`), as cases run on both libraries.

The `api` namespace is `ema_cases`' (`estimator`, `model_dir`, `use_tpu`, `strategy`).
Filled in below; recorded by `scripts/record_ema_numbers.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Case = Callable[[Any], Any]
DEFAULTS: dict[str, Case] = {}
