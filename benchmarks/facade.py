"""Times `TPUEstimator` calls on the bridge's facade or on the original; either Python runs it.

`python -m benchmarks.facade --backend bridge|original --one JSON` (from the repository root;
`benchmarks.run` starts it) runs one measurement of the workload in `benchmarks/workloads.py` and
prints a JSON line:

- `{"kind": "prepare", "model_dir": D}`: trains 10 steps into D (for the start-up measurement).
- `{"kind": "evaluate", "ipl": N, "short": S, "long": L, "model_dir": D}`: trains 10 steps into D
  (a new directory; a temporary one without "model_dir"),
  then on the same facade object calls `evaluate(steps=S)` 1 + 3 times and `evaluate(steps=L)`
  once (each call builds, traces and restores anew, as the Estimator did). Reports the first and
  second calls' wall times, t_S (the median of the three repeated calls), the long call's rate and
  the steady rate `(L - S) / (t_L - t_S)`, which takes away what a call costs before and after its
  steps (one slow short call no longer inflates it), and the same with the process's CPU seconds
  (steady steps per CPU-second: less sensitive to other load on the machine).
- `{"kind": "startup", "call": "evaluate"|"predict", "model_dir": D}`: on a new facade object per
  call, `evaluate(steps=1)` or `predict` of one batch, twice: the first call in the process (after
  the imports) and a second one.

Every call here uses `use_tpu=False`; the original then runs its CPU path (one `session.run` per
step whatever `iterations_per_loop` is), the bridge runs `iterations_per_loop` steps per execution.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

from benchmarks.workloads import make_estimator, make_input_fn

TRAIN_STEPS = 10
SHORT_REPEATS = 3  # repeated short evaluate calls; their median is t_S
STARTUP_IPL = 100


def _timed(call) -> tuple[float, object]:
    start = time.perf_counter()
    out = call()
    return time.perf_counter() - start, out


def _timed_cpu(call) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of the whole process, result)."""
    cpu = time.process_time()
    wall, out = _timed(call)
    return wall, time.process_time() - cpu, out


def measure(backend: str, config: dict) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    train_input, predict_input = make_input_fn(), make_input_fn(labels=False)
    kind = config["kind"]
    if kind == "prepare":
        make_estimator(backend, config["model_dir"], STARTUP_IPL).train(train_input, steps=TRAIN_STEPS)
        return {}
    if kind == "evaluate":
        ipl, short, long = config["ipl"], config["short"], config["long"]
        estimator = make_estimator(backend, config.get("model_dir") or tempfile.mkdtemp(prefix="bench_eval_"), ipl)
        estimator.train(train_input, steps=TRAIN_STEPS)
        first, _ = _timed(lambda: estimator.evaluate(train_input, steps=short))
        repeats = [_timed_cpu(lambda: estimator.evaluate(train_input, steps=short)) for _ in range(SHORT_REPEATS)]
        long_time, long_cpu, _ = _timed_cpu(lambda: estimator.evaluate(train_input, steps=long))
        metrics = repeats[-1][2]
        missing = {"accuracy", "mean_loss", "loss", "global_step"} - set(metrics)
        if missing or int(metrics["global_step"]) != TRAIN_STEPS:
            raise RuntimeError(f"evaluate returned {metrics}: missing {missing} or a wrong global_step")
        again = statistics.median(wall for wall, _, _ in repeats)
        again_cpu = statistics.median(cpu for _, cpu, _ in repeats)
        steady = (long - short) / (long_time - again) if long_time > again else float("nan")
        steady_cpu = (long - short) / (long_cpu - again_cpu) if long_cpu > again_cpu else float("nan")
        return {"first_s": first, "second_s": repeats[0][0], "again_s": again, "again_cpu_s": again_cpu,
                "long_rate": long / long_time, "steady_rate": steady, "steady_cpu_rate": steady_cpu}
    if kind == "startup":
        times = []
        for _ in range(2):
            estimator = make_estimator(backend, config["model_dir"], STARTUP_IPL)
            if config["call"] == "evaluate":
                seconds, out = _timed(lambda e=estimator: e.evaluate(train_input, steps=1))
                assert int(out["global_step"]) == TRAIN_STEPS, out
            else:
                seconds, out = _timed(
                    lambda e=estimator: list(e.predict(predict_input, yield_single_examples=False))
                )
                assert sum(len(b["logits"]) for b in out) == 128, out
            times.append(seconds)
        return {"first_s": times[0], "again_s": times[1]}
    raise ValueError(kind)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("bridge", "original"), required=True)
    parser.add_argument("--one", required=True, help="the measurement, as JSON")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.backend, json.loads(args.one))))


if __name__ == "__main__":
    main()
