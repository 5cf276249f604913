"""One-step evaluation executions gathered into one host run.

With `iterations_per_loop=1` every EVAL execution is one step, and running
`eval_metrics` for it is one host `Session` call (a hand-off to the host
thread and back, the call itself) that costs about a third of a small eval
step: measured on an MLP 784-256-256-10 at batch 128, 41 % more CPU time
per evaluation than without metrics. Nothing reads the host's metrics before
the evaluation ends (`HostRunner.metric_results` drains first), so one-step
executions are gathered here, their arrays concatenated over steps, and run
as one execution of many steps: `eval_metrics` then runs once per step inside
one `Session` call (`host/loop.py`), on the same values in the same order,
so the results are the same to the bit. A longer execution takes the gathered
steps with it (still one host run per execution).

Example:

```python
gathered = GatheredSteps(steps=2)   # a host run once 2 steps wait (64 by default)
labels, logits, mask = np.zeros([1, 4]), np.zeros([1, 4]), np.ones([1, 4])   # one step's
assert not gathered.add([labels, logits, mask], first_step=10, steps=1)
if gathered.add([labels, logits, mask], first_step=10, steps=1):   # True: enough to run
    host, first_step, steps = gathered.take()                         # arrays [steps, ...]
assert host[0].shape == (2, 4) and (first_step, steps) == (10, 2)
```
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

GATHER_STEPS = 64
"""Gathered steps that make a host run (a Session call costs about 5 steps of the host loop)."""
GATHER_BYTES = 32 << 20
"""Gathered bytes that make a host run, whatever the steps (large host tensors)."""


class GatheredSteps:
    """Executions of one mode waiting for one host run: their arrays, first step and steps.

    Each execution's arrays are `HostPlan.specs`' values stacked (or, ragged,
    concatenated) over its steps, so those of consecutive executions
    concatenate along axis 0 into one execution's.
    """

    def __init__(self, steps: int = GATHER_STEPS, nbytes: int = GATHER_BYTES):
        self._limit_steps, self._limit_bytes = steps, nbytes
        self._arrays: list[Sequence[np.ndarray]] = []
        self._first_step: int | None = None
        self.steps = 0
        self._bytes = 0

    def __bool__(self) -> bool:
        return bool(self._arrays)

    def accepts(self, first_step: int) -> bool:
        """Whether an execution at `first_step` can join (the same global step for all)."""
        return not self._arrays or first_step == self._first_step

    def add(self, host: Sequence[np.ndarray], first_step: int, steps: int) -> bool:
        """Gathers an execution (`accepts(first_step)` must hold); True when enough wait to run."""
        if not self.accepts(first_step):
            raise ValueError(f"Gathered executions at global step {self._first_step} cannot take one at {first_step}.")
        self._arrays.append(list(host))
        self._first_step = first_step
        self.steps += steps
        self._bytes += sum(np.asarray(a).nbytes for a in host)
        return self.steps >= self._limit_steps or self._bytes >= self._limit_bytes

    def clear(self) -> None:
        """Drops every gathered execution (their call ended without running them)."""
        self._arrays, self._first_step, self.steps, self._bytes = [], None, 0, 0

    def take(self) -> tuple[list[np.ndarray], int, int]:
        """`(arrays, first_step, steps)` of every gathered execution as one; empties the gathering."""
        arrays, first_step, steps = self._arrays, self._first_step, self.steps
        self.clear()
        if len(arrays) == 1:
            return list(arrays[0]), first_step, steps
        return [np.concatenate(parts, axis=0) for parts in zip(*arrays, strict=True)], first_step, steps
