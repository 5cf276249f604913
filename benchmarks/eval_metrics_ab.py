"""The cost of `eval_metrics` on the strategy path at `iterations_per_loop=1`, measured in one process.

Run: `.venv/bin/python -m benchmarks.eval_metrics_ab [--steps 300] [--rounds 10] [--order fwd|rev|mid]`
from the repository root.

Three models of the TF1 program in `benchmarks/workloads.py` (MLP 784-256-256-10, batch 128,
`EstimatorModel(..., use_tpu=True)` on the default strategy, one step per execution): one with
`eval_metrics` and two without (the second is an A/A control: its "cost" is this machine's noise).
Each round evaluates every model once for `--steps` steps, in turn (reversed every other round);
the cost is the median over rounds of `cpu(with) / cpu(without) - 1`, process CPU time (the host
thread included). `--order` rotates which model is built first (build order alone moves the result
by a few percent on a small VM). Separate processes per configuration, as `benchmarks.run` uses,
add process-to-process variance that hides a cost of this size.

Example:

```
$ .venv/bin/python -m benchmarks.eval_metrics_ab --order rev
eval_metrics cost (CPU, median of 10 pairs): +9.0 %; wall +11.4 %; A/A control -1.1 %
```
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import keras_tpu_estimator as kte
from benchmarks.workloads import make_input_fn, make_model_fn

ORDERS = {"fwd": ("with", "without", "control"), "rev": ("without", "control", "with"),
          "mid": ("control", "with", "without")}


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _model(with_metrics: bool) -> tuple[kte.EstimatorModel, Callable]:
    base = make_model_fn(kte.TPUEstimatorSpec)

    def model_fn(features: Any, labels: Any, mode: str, params: dict) -> Any:
        spec = base(features, labels, mode, params)
        return spec if with_metrics or mode != "eval" else spec._replace(eval_metrics=None)

    model = kte.EstimatorModel(model_fn, use_tpu=True, train_batch_size=128, eval_batch_size=128,
                               steps_per_execution=1)
    input_fn = make_input_fn()
    model.fit(input_fn, callbacks=[kte.StopAtStep(steps=10)], verbose=0)
    model.evaluate(input_fn, steps=20, verbose=0)  # traced, Sessions made
    return model, input_fn


def measure(steps: int, rounds: int, order: str) -> dict[str, float]:
    """`{"cpu", "wall", "control"}`: the median costs over `rounds` (fractions)."""
    names = ORDERS[order]
    models = {name: _model(name == "with") for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    wall: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        for name in names if index % 2 == 0 else names[::-1]:
            model, input_fn = models[name]
            cpu_start, wall_start = _cpu_seconds(), time.perf_counter()
            model.evaluate(input_fn, steps=steps, verbose=0)
            cpu[name].append(_cpu_seconds() - cpu_start)
            wall[name].append(time.perf_counter() - wall_start)

    def cost(values: dict[str, list[float]], name: str) -> float:
        return statistics.median(a / b - 1 for a, b in zip(values[name], values["without"], strict=True))

    return {"cpu": cost(cpu, "with"), "wall": cost(wall, "with"), "control": cost(cpu, "control")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--order", choices=sorted(ORDERS), default="fwd")
    args = parser.parse_args()
    result = measure(args.steps, args.rounds, args.order)
    print(f"eval_metrics cost (CPU, median of {args.rounds} pairs): {result['cpu']:+.1%}; "
          f"wall {result['wall']:+.1%}; A/A control {result['control']:+.1%}")


if __name__ == "__main__":
    main()
