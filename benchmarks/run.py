"""Speed of the bridge against plain Keras `fit`, a raw `tf.function` loop and the original TPUEstimator.

Run: `.venv/bin/python -m benchmarks.run [--rounds 3] [--quick] [--original PYTHON] [--json PATH]`
from the repository root (after `bash scripts/setup.sh`). `--original` is the python of the original
TPUEstimator (TF 2.15.1 + tensorflow-estimator 2.15; default /root/.cache/tpu-estimator-2.15/bin/python
if it exists, else its columns are skipped with a note; `bash /work/shared/original/setup.sh` builds
it). `--json PATH` writes every median (and the samples) to PATH; `--samples PATH` prints the tables
again from such a file. `--quick` runs a quarter of the steps. `--quick --rounds 1` took about
three minutes on 2 cores before the XLA and strategy-path `eval_metrics` rows were added (37
processes of 3-10 s each, mostly imports and tracing) and 13 minutes with them on a loaded VM
(2026-12-02); a full round somewhat longer.

Every measurement runs in its own process (one configuration, warm-up, then timed steps), rounds
are interleaved (each round runs every configuration once, in the same order), and the tables
report medians. What it measures:

1. Training (first table): an MLP 784-256-256-10 (batch 128, Adam) and a tiny overhead-bound linear
   model (8 -> 1, batch 8, SGD) at steps_per_execution 1, 32 and 100: the bridge (`EstimatorModel.fit`
   of a TF1 `model_fn`), plain Keras `fit` and a raw `tf.function` loop, once with its iterator built
   before the timing ("raw") and once building its dataset and iterator in each timed call, as every
   bridge call must (`input_fn` is called anew; "raw+input"); steps/s, steps per CPU-second, the
   ratios bridge/raw, bridge/raw+input and bridge/Keras, peak RSS. Below it: padded prediction
   against a raw predict loop (MLP, batch 128), the cost of a scalar `host_call` (1 - with/without,
   MLP at 100), and the cost of the NaN/Inf check of every trainable variable after each training
   execution (1 - with/without at steps_per_execution 1, MLP and tiny; "without" patches
   `EstimatorModel._after_train_execution` in that process only, see `_disable_finite_check`).
   XLA rows ("xla", MLP at 1, 32 and 100): the raw loop with its step in a
   `tf.function(jit_compile=True)` called from a plain `tf.function` loop (as Keras and the bridge
   compile the step, not the loop or the iterator), Keras `compile(jit_compile=True)` and
   `EstimatorModel(..., jit_compile=True)`; their ratios are against the XLA raw and Keras rows.
   The cost of `eval_metrics` on the strategy path (1 - with/without, MLP, `EstimatorModel(...,
   use_tpu=True).evaluate` of the TF1 program in `benchmarks/workloads.py` at steps_per_execution
   1, 32 and 100, "eval metrics" against "eval no-metrics", in wall and CPU time).
2. Evaluate with `eval_metrics` (second table): `TPUEstimator(model_fn, config=RunConfig(model_dir,
   tpu_config=TPUConfig(iterations_per_loop=N)), use_tpu=False, train_batch_size=128,
   eval_batch_size=128).evaluate(input_fn, steps=S)` at N = 1, 32, 100, on the bridge's facade
   (TF 2.21) and on the original `tf.compat.v1.estimator.tpu.TPUEstimator` (TF 2.15) running the
   same `model_fn` and `input_fn` (`benchmarks/workloads.py`; accuracy and mean loss metrics).
   Each side trains 10 steps into its own model_dir, then one facade object evaluates S = 100
   steps four times and L steps once: t_S, a repeated call's time (the median of calls 2-4), the
   steady rate (L - S) / (t_L - t_S) (per-call building, tracing and restoring taken away), the same
   per CPU-second of the process, and the long call's rate (L = 4000, 1000 with --quick), with
   the ratios bridge/original. The original with `use_tpu=False` runs one `session.run` per step
   whatever N is; the bridge runs N steps per execution. The CPU-second rates and costs are
   printed too because they move less than wall time when others load the machine.
3. Facade start-up (third table): on a trained model_dir, a new facade object's `evaluate(steps=1)`
   and `predict` of one batch (building, tracing, restoring): the first such call in a fresh
   process after the imports, and a second one; bridge, original, ratio.
   `benchmarks/facade.py` runs 2. and 3. under either python.

A shared 2-core machine drifts by +-20 %: compare ratios, not absolute rates; a 1-round `--quick`
run only checks that everything works.

Reliability (not speed): `.venv/bin/python -m benchmarks.reliability [--kills 20]`
SIGKILLs a training run at random moments (start-up, training, inside saves),
restarts it, and reports unreadable checkpoints, stray files and whether the
final weights equal an uninterrupted run's; see benchmarks/reliability.py.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

WORKLOADS = {"mlp": (784, [256, 256], 10, 128), "tiny": (8, [], 1, 8)}


def _disable_finite_check() -> list:
    """A/B only, in this process: training executions read the variables' finiteness as constant true.

    Wraps `EstimatorModel._after_train_execution` (read at the end of every training execution, in
    the same tf.function) so every boolean it returns becomes `tf.ones(shape, tf.bool)` of the same
    shape and structure; the step and anything else pass through. The `is_finite` ops it built are
    then unused, and tf.function prunes unused ops that are not stateful (measured: `is_finite` of a
    50M-float variable costs 17 ms per call when returned, 0.19 ms when unused, 0.16 ms when never
    built). Returns a list that gets one entry per trace of the patched method; the caller fails if
    it stays empty. Raises if the method or a boolean in its result is gone: adapt this function
    to the model's new layout instead of measuring nothing.
    """
    import tensorflow as tf

    from keras_tpu_estimator.model.estimator_model import EstimatorModel

    name = "_after_train_execution"
    original = getattr(EstimatorModel, name, None)
    if not callable(original):
        raise RuntimeError(f"keras_tpu_estimator.model.EstimatorModel.{name} no longer exists: "
                           "adapt benchmarks.run._disable_finite_check to the new NaN/Inf check")
    calls: list = []

    def constant_true(self):
        result = original(self)
        flags = [t for t in tf.nest.flatten(result) if t.dtype == tf.bool]
        if not flags:
            raise RuntimeError(f"EstimatorModel.{name} returned no boolean flags ({result}): adapt "
                               "benchmarks.run._disable_finite_check")
        calls.append(len(flags))
        return tf.nest.map_structure(
            lambda t: tf.ones(t.shape, tf.bool) if t.dtype == tf.bool else t, result)

    setattr(EstimatorModel, name, constant_true)
    return calls


def _measure(config: dict) -> dict:
    """Runs one configuration in this process; returns rates and peak RSS."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    import keras_tpu_estimator as kte

    inputs, hidden, outputs, batch = WORKLOADS[config["workload"]]
    spe, steps = config["spe"], config["steps"]
    rng = np.random.RandomState(0)
    x = rng.randn(batch * 8, inputs).astype(np.float32)
    y = rng.randint(0, max(outputs, 2), batch * 8).astype(np.int32)

    def dataset(size=batch):
        data = tf.data.Dataset.from_tensor_slices(({"x": x}, y)).cache().repeat()
        return data.batch(size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    def layers():
        return [keras.layers.Dense(u, activation="relu", name=f"dense_{i}") for i, u in enumerate(hidden)] + [
            keras.layers.Dense(max(outputs, 2), name="logits")
        ]

    def loss_of(labels, logits):
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))

    def optimizer_tf1():
        return (tf.compat.v1.train.AdamOptimizer(1e-3) if config["workload"] == "mlp"
                else tf.compat.v1.train.GradientDescentOptimizer(0.01))

    def model_fn(features, labels, mode, params):
        if mode == kte.ModeKeys.PREDICT:
            h = features["x"]
            for layer in layers():
                h = layer(h)
            return kte.TPUEstimatorSpec(mode, predictions={"logits": h})
        step = tf.reshape(tf.compat.v1.train.get_global_step(), [1])
        h = features["x"]
        for layer in layers():
            h = layer(h)
        loss = loss_of(labels, h)
        train_op = optimizer_tf1().minimize(loss, tf.compat.v1.train.get_global_step())
        host_call = None
        if config["kind"] == "bridge+host_call":
            host_call = (lambda step, loss: tf.identity(loss), [step, tf.reshape(loss, [1])])
        return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, host_call=host_call)

    kind = config["kind"]
    xla = bool(config.get("xla"))  # jit_compile=True: Keras' compile, the raw step, the bridge's replica step
    patched_calls = _disable_finite_check() if kind == "bridge no-finite-check" else None
    if kind in ("eval metrics", "eval no-metrics"):  # the strategy path's evaluate, with/without eval_metrics
        from benchmarks.workloads import make_input_fn, make_model_fn

        tpu_model_fn = make_model_fn(kte.TPUEstimatorSpec)

        def eval_model_fn(features, labels, mode, params):
            spec = tpu_model_fn(features, labels, mode, params)
            return spec._replace(eval_metrics=None) if kind == "eval no-metrics" and mode == "eval" else spec

        model = kte.EstimatorModel(eval_model_fn, use_tpu=True, train_batch_size=batch, eval_batch_size=batch,
                                   steps_per_execution=spe)
        eval_input = make_input_fn()
        model.fit(eval_input, callbacks=[kte.StopAtStep(steps=10)], verbose=0)
        run = lambda n: model.evaluate(eval_input, steps=n, verbose=0)  # noqa: E731
    elif kind in ("bridge", "bridge+host_call", "bridge no-finite-check"):
        extra = {"jit_compile": True} if xla else {}  # the API of issue 32
        model = kte.EstimatorModel(model_fn, train_batch_size=batch, steps_per_execution=spe, **extra)
        run = lambda n: model.fit(lambda params: dataset(params["batch_size"]),  # noqa: E731
                                  callbacks=[kte.StopAtStep(steps=n)], verbose=0)
    elif kind == "keras":
        model = keras.Sequential([keras.Input((inputs,)), *layers()])
        optimizer = keras.optimizers.Adam(1e-3) if config["workload"] == "mlp" else keras.optimizers.SGD(0.01)
        model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      steps_per_execution=spe, jit_compile=xla)
        data = dataset().map(lambda f, labels: (f["x"], labels))
        run = lambda n: model.fit(data, steps_per_epoch=n, epochs=1, verbose=0)  # noqa: E731
    elif kind in ("raw", "raw+input"):
        model = keras.Sequential([keras.Input((inputs,)), *layers()])
        optimizer = keras.optimizers.Adam(1e-3) if config["workload"] == "mlp" else keras.optimizers.SGD(0.01)
        optimizer.build(model.trainable_variables)
        built = iter(dataset())

        # With xla, the step is compiled and the loop around it is not (as Keras' jit_compile and the
        # bridge's: the iterator stays outside XLA).
        @tf.function(jit_compile=True if xla else None)
        def train_step(features, labels):
            with tf.GradientTape() as tape:
                loss = loss_of(labels, model(features["x"]))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

        @tf.function
        def loop(iterator, n):
            for _ in tf.range(n):
                features, labels = next(iterator)
                train_step(features, labels)

        def run(n):
            # "raw+input" builds its dataset and iterator per call, as a TPUEstimator/bridge call
            # must (input_fn is called anew); "raw" reuses one built before the timing.
            iterator = iter(dataset()) if kind == "raw+input" else built
            for _ in range(n // spe):
                loop(iterator, tf.constant(spe))
    elif kind in ("predict padded", "predict raw"):
        model = kte.EstimatorModel(model_fn, predict_batch_size=batch, steps_per_execution=spe)
        rows = x[np.arange(batch * steps) % len(x)]
        predict_input = lambda params: tf.data.Dataset.from_tensor_slices({"x": rows}).batch(params["batch_size"])  # noqa: E731
        model.predict(predict_input, steps=1, verbose=0)
        weights = [v.value for v in model.trainable_variables]

        @tf.function
        def raw_loop(iterator, n):
            out = tf.TensorArray(tf.float32, size=n)
            for i in tf.range(n):
                h = next(iterator)["x"]
                for j in range(0, len(weights), 2):
                    h = tf.matmul(h, weights[j]) + weights[j + 1]
                    h = tf.nn.relu(h) if j + 2 < len(weights) else h
                out = out.write(i, h)
            return out.concat()

        def run(n):
            if kind == "predict padded":
                return model.predict(predict_input, verbose=0)
            iterator = iter(predict_input({"batch_size": batch}))
            return np.concatenate([raw_loop(iterator, tf.constant(spe)).numpy() for _ in range(n // spe)])
    else:
        raise ValueError(kind)

    run(spe * 2)  # warm-up: trace and build
    start, cpu = time.perf_counter(), time.process_time()
    run(steps)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    if patched_calls is not None and not patched_calls:
        raise RuntimeError("the patched EstimatorModel._after_train_execution was never called: the "
                           "training loop no longer reads it; adapt _disable_finite_check")
    return {"rate": steps / wall, "cpu_rate": steps / cpu,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


ORIGINAL_PYTHON = "/root/.cache/tpu-estimator-2.15/bin/python"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def configurations(quick: bool) -> list[dict]:
    """Every measurement of a round, in the order it runs: `{"group", "backend", "config"}`."""
    div = 4 if quick else 1
    train = []
    for workload in ("mlp", "tiny"):
        for spe in (1, 32, 100):
            steps = (200 if spe == 1 else 1000) // div // spe * spe or spe
            for kind in ("raw", "raw+input", "keras", "bridge"):
                train.append({"workload": workload, "spe": spe, "kind": kind, "steps": steps})
    for spe in (1, 32, 100):  # jit_compile=True (XLA): the MLP only
        steps = (200 if spe == 1 else 1000) // div // spe * spe or spe
        for kind in ("raw", "keras", "bridge"):
            train.append({"workload": "mlp", "spe": spe, "kind": kind, "steps": steps, "xla": True})
    train.append({"workload": "mlp", "spe": 100, "kind": "bridge+host_call", "steps": 1000 // div // 100 * 100})
    for spe in (1, 32, 100):  # evaluate's eval_metrics on the strategy path: with and without, side by side
        for kind in ("eval metrics", "eval no-metrics"):
            train.append({"workload": "mlp", "spe": spe, "kind": kind, "steps": 800 // div // spe * spe or spe,
                          "ab": "eval_metrics"})
    for kind in ("predict raw", "predict padded"):
        train.append({"workload": "mlp", "spe": 100, "kind": kind, "steps": 1000 // div // 100 * 100})
    for workload in ("mlp", "tiny"):  # the NaN/Inf check A/B: longer runs than the table's, side by side
        for kind in ("bridge", "bridge no-finite-check"):
            train.append({"workload": workload, "spe": 1, "kind": kind, "steps": 1000 // div, "ab": "finite"})
    jobs = [{"group": "train", "backend": "bridge", "config": c} for c in train]
    short, long = 100, 4000 // div
    for ipl in (1, 32, 100):
        for backend in ("bridge", "original"):
            jobs.append({"group": "evaluate", "backend": backend,
                         "config": {"kind": "evaluate", "ipl": ipl, "short": short, "long": long}})
    for call in ("evaluate", "predict"):
        for backend in ("bridge", "original"):
            jobs.append({"group": "startup", "backend": backend, "config": {"kind": "startup", "call": call}})
    return jobs


def _key(job: dict) -> str:
    return json.dumps({"backend": job["backend"], **job["config"]}, sort_keys=True)


def _run(python: str, module: str, args: list[str]) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([python, "-m", module, *args], capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode:
        sys.stderr.write(proc.stderr[-6000:])
        raise RuntimeError(f"{python} -m {module} {' '.join(args)} failed with exit code {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _run_job(job: dict, pythons: dict, model_dirs: dict, scratch: str, round_index: int) -> dict:
    if job["group"] == "train":
        return _run(pythons["bridge"], "benchmarks.run", ["--one", json.dumps(job["config"])])
    config = dict(job["config"])
    if job["group"] == "evaluate":  # a fresh model_dir per measurement: it trains its own checkpoint
        config["model_dir"] = os.path.join(scratch, f"eval_{job['backend']}_{config['ipl']}_{round_index}")
    else:
        config["model_dir"] = model_dirs[job["backend"]]
    return _run(pythons[job["backend"]], "benchmarks.facade",
                ["--backend", job["backend"], "--one", json.dumps(config)])


def _measure_all(jobs: list[dict], pythons: dict, rounds: int) -> dict[str, list]:
    """Runs every job once per round, in order, each in its own process; returns the samples by key."""
    samples: dict[str, list] = {_key(j): [] for j in jobs}
    backends = sorted({j["backend"] for j in jobs})
    with tempfile.TemporaryDirectory(prefix="kte_bench_") as scratch:
        model_dirs = {}
        for backend in backends:  # a trained model_dir per side for the start-up calls
            model_dirs[backend] = os.path.join(scratch, f"startup_{backend}")
            _run(pythons[backend], "benchmarks.facade",
                 ["--backend", backend, "--one", json.dumps({"kind": "prepare", "model_dir": model_dirs[backend]})])
        for round_index in range(rounds):
            for job in jobs:
                samples[_key(job)].append(_run_job(job, pythons, model_dirs, scratch, round_index))
    return samples


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _fmt(value: float | None, width: int, digits: int = 2) -> str:
    return f"{'-':>{width}s}" if value is None or value != value else f"{value:{width}.{digits}f}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a quarter of the steps")
    parser.add_argument("--original", help=f"the original TPUEstimator's python (default {ORIGINAL_PYTHON} if it exists)")
    parser.add_argument("--json", help="write every median (and the samples) to this file")
    parser.add_argument("--samples", help="print the tables from this earlier --json file instead of measuring")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(_measure(json.loads(args.one))))
        return {}
    original = args.original or (ORIGINAL_PYTHON if os.path.exists(ORIGINAL_PYTHON) else None)
    if args.original and not os.path.exists(args.original):
        parser.error(f"--original {args.original}: no such file")
    pythons = {"bridge": sys.executable, "original": original}
    if args.samples:  # print the tables again from a previous --json file
        with open(args.samples) as f:
            previous = json.load(f)
        samples, args.quick, args.rounds = previous["samples"], previous["quick"], previous["rounds"]
        original = previous["original"]
    jobs = [j for j in configurations(args.quick) if j["backend"] != "original" or original]
    if not args.samples:
        samples = _measure_all(jobs, pythons, args.rounds)
        if args.json:  # the samples first: a failure below still leaves them for --samples
            with open(args.json, "w") as f:
                json.dump({"samples": samples, "quick": args.quick, "rounds": args.rounds, "original": original}, f)

    def median(job: dict, key: str = "rate") -> float | None:
        values = [r[key] for r in samples.get(_key(job), [])]
        return statistics.median(values) if values else None

    def train_job(**config) -> dict:
        return {"group": "train", "backend": "bridge", "config": config}

    report: dict = {"rounds": args.rounds, "quick": args.quick, "python": sys.executable, "original": original,
                    "train": [], "evaluate": [], "startup": [], "summary": {}}
    print(f"{'workload':8s} {'spe':>4s} {'configuration':28s} {'steps/s':>9s} {'per CPU-s':>10s}"
          f" {'vs raw':>7s} {'vs raw+in':>9s} {'vs keras':>8s} {'RSS MB':>7s}")
    for job in jobs:
        config = job["config"]
        if job["group"] != "train" or config["kind"].startswith(("predict", "eval")):
            continue
        rate, cpu, rss = (median(job, k) for k in ("rate", "cpu_rate", "peak_rss_mb"))
        base = {k: v for k, v in config.items() if k not in ("kind", "ab")}
        raw, raw_input, keras_rate = (median(train_job(**base, kind=k)) for k in ("raw", "raw+input", "keras"))
        report["train"].append({**config, "rate": rate, "cpu_rate": cpu, "peak_rss_mb": rss,
                                "vs_raw": _ratio(rate, raw), "vs_raw_input": _ratio(rate, raw_input),
                                "vs_keras": _ratio(rate, keras_rate)})
        label = config["kind"] + (" xla" if config.get("xla") else "") + (" (A/B)" if config.get("ab") else "")
        print(f"{config['workload']:8s} {config['spe']:4d} {label:28s} {rate:9.1f} {cpu:10.1f}"
              f" {_fmt(_ratio(rate, raw), 7)} {_fmt(_ratio(rate, raw_input), 9)}"
              f" {_fmt(_ratio(rate, keras_rate), 8)} {rss:7.0f}")
    predict_steps = next(j["config"]["steps"] for j in jobs if j["config"].get("kind") == "predict raw")
    predict = {k: median(train_job(workload="mlp", spe=100, kind=k, steps=predict_steps), "rate")
               for k in ("predict raw", "predict padded")}
    report["summary"]["predict_padded_vs_raw"] = _ratio(predict["predict padded"], predict["predict raw"])
    report["summary"]["predict_rates"] = predict
    host_steps = next(j["config"]["steps"] for j in jobs if j["config"].get("kind") == "bridge+host_call")
    host_jobs = [train_job(workload="mlp", spe=100, kind=k, steps=host_steps) for k in ("bridge+host_call", "bridge")]
    with_host, without_host = (median(j) for j in host_jobs)
    report["summary"]["host_call_cost"] = 1 - with_host / without_host
    report["summary"]["host_call_cost_cpu"] = 1 - median(host_jobs[0], "cpu_rate") / median(host_jobs[1], "cpu_rate")
    print(f"predict (mlp, batch 128): padded bridge / raw loop = {report['summary']['predict_padded_vs_raw']:.2f}")
    print(f"host_call (scalar, mlp, spe 100): costs {100 * report['summary']['host_call_cost']:.1f} %"
          f" (1 - with/without: {with_host:.1f} / {without_host:.1f} steps/s;"
          f" per CPU-s {100 * report['summary']['host_call_cost_cpu']:.1f} %)")
    report["summary"]["finite_check_cost"], report["summary"]["finite_check_cost_cpu"] = {}, {}
    for workload in ("mlp", "tiny"):
        ab = [j for j in jobs if j["config"].get("ab") == "finite" and j["config"]["workload"] == workload]
        with_check, without = (median(j) for j in ab)  # "bridge", then "bridge no-finite-check"
        cost_cpu = 1 - median(ab[0], "cpu_rate") / median(ab[1], "cpu_rate")
        report["summary"]["finite_check_cost"][workload] = 1 - with_check / without
        report["summary"]["finite_check_cost_cpu"][workload] = cost_cpu
        print(f"NaN/Inf check ({workload}, spe 1, {ab[0]['config']['steps']} steps): costs"
              f" {100 * (1 - with_check / without):.1f} % (1 - with/without: {with_check:.1f} / {without:.1f}"
              f" steps/s; per CPU-s {100 * cost_cpu:.1f} %)")
    report["summary"]["eval_metrics_cost"] = {}
    for spe in (1, 32, 100):  # 1 - with/without, in wall and CPU time
        ab = [j for j in jobs if j["config"].get("ab") == "eval_metrics" and j["config"]["spe"] == spe]
        with_metrics, without = (median(j) for j in ab)
        cost_cpu = 1 - median(ab[0], "cpu_rate") / median(ab[1], "cpu_rate")
        report["summary"]["eval_metrics_cost"][spe] = {"wall": 1 - with_metrics / without, "cpu": cost_cpu}
        print(f"eval_metrics (strategy path, mlp, spe {spe}, {ab[0]['config']['steps']} steps): costs"
              f" {100 * (1 - with_metrics / without):.1f} % (1 - with/without: {with_metrics:.1f} / {without:.1f}"
              f" steps/s; per CPU-s {100 * cost_cpu:.1f} %)")
    if not original:
        print(f"\n(no original TPUEstimator: {ORIGINAL_PYTHON} is missing and --original was not given;"
              " its columns are '-'. `bash /work/shared/original/setup.sh` builds it.)")

    def facade(group: str, backend: str, config: dict, key: str) -> float | None:
        return median({"group": group, "backend": backend, "config": config}, key)

    evals = [j["config"] for j in configurations(args.quick) if j["group"] == "evaluate" and j["backend"] == "bridge"]
    short, long = evals[0]["short"], evals[0]["long"]
    columns = (("again_s", f"t_{short} per call (s)", 3), ("steady_rate", "steady steps/s", 1),
               ("steady_cpu_rate", "steady per CPU-s", 1), ("long_rate", f"{long}-step call steps/s", 1))
    print("\nevaluate with eval_metrics (mlp, batch 128, use_tpu=False, on a trained checkpoint, one facade"
          f" object; ratio = bridge / original):\nt_{short} is the median of calls 2-4 of {short} steps; steady ="
          f" ({long} - {short}) / (t_{long} - t_{short}), in wall and in CPU seconds; then a {long}-step call's rate")
    print(f"{'':4s} | " + " | ".join(f"{title:23s}" for _, title, _ in columns))
    print(f"{'ipl':>4s} | " + " | ".join(f"{'bridge':>8s} {'orig':>8s} {'ratio':>5s}" for _ in columns))
    for config in evals:
        row = {"iterations_per_loop": config["ipl"], "short_steps": short, "long_steps": long}
        for key in ("again_s", "again_cpu_s", "steady_rate", "steady_cpu_rate", "long_rate", "first_s", "second_s"):
            bridge, orig = (facade("evaluate", b, config, key) for b in ("bridge", "original"))
            row[key] = {"bridge": bridge, "original": orig, "ratio": _ratio(bridge, orig)}
        report["evaluate"].append(row)
        cells = [f"{_fmt(row[k]['bridge'], 8, d)} {_fmt(row[k]['original'], 8, d)} {_fmt(row[k]['ratio'], 5)}"
                 for k, _, d in columns]
        print(f"{config['ipl']:4d} | " + " | ".join(cells))

    print("\nfacade start-up (s; a new TPUEstimator object per call on a trained model_dir, iterations_per_loop"
          " 100):\nthe first call in a fresh process (after the imports) and a second one; ratio = bridge / original")
    print(f"{'call':22s} | {'first':>7s} {'original':>9s} {'ratio':>6s} | {'again':>7s} {'original':>9s} {'ratio':>6s}")
    for call, label in (("evaluate", "evaluate(steps=1)"), ("predict", "predict (one batch)")):
        config = {"kind": "startup", "call": call}
        row = {"call": call}
        for key in ("first_s", "again_s"):
            bridge, orig = (facade("startup", b, config, key) for b in ("bridge", "original"))
            row[key] = {"bridge": bridge, "original": orig, "ratio": _ratio(bridge, orig)}
        report["startup"].append(row)
        cells = [f"{_fmt(row[k]['bridge'], 7, 3)} {_fmt(row[k]['original'], 9, 3)} {_fmt(row[k]['ratio'], 6)}"
                 for k in ("first_s", "again_s")]
        print(f"{label:22s} | " + " | ".join(cells))
    report["samples"] = samples
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"\nmedians written to {args.json}")
    return report


if __name__ == "__main__":
    main()
