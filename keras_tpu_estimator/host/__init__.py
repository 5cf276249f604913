"""The device-to-host side: what each step sends to the host, and what runs there.

On the strategy path, `host_call` and `eval_metrics` run on the host in TF1 graphs, on
tensors each replica step sends out. `plan` writes once, for both sides, what each step
sends and in which order; `loop` runs a host function once per stacked step inside one
graph; `gather` groups one-step executions into one host run; `functions` is one user
function built once in a TF1 graph and run by a Session (`HostFunction`), `metrics` the
`eval_metrics` accumulated over an evaluation (`HostMetrics`), and `runner` owns them per
mode with the host thread (`HostRunner`); `predictions` carries prediction outputs from the
device loop to the caller. Every one of them speaks `transfer`'s one format: a tensor is
stacked over steps, or travels ragged as values, dims and rank; padded rows drop by one rule.
"""

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
