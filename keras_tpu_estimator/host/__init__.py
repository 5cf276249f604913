"""TODO host."""

from .plan import (
    HostPlan,
)
from .predictions import (
    PredictionPlan,
    batch_length,
    select_keys,
)
from .runner import (
    HostRunner,
)

__all__ = [
    "HostPlan",
    "HostRunner",
    "PredictionPlan",
    "batch_length",
    "select_keys",
]
