"""Steps per second of the bridge against plain Keras `fit` and a raw `tf.function` loop.

Run: `.venv/bin/python -m benchmarks.run [--rounds 3] [--quick]` (after `bash scripts/setup.sh`).

Every measurement runs in its own process (one configuration, warm-up, then
timed steps), rounds are interleaved, and the table reports medians with the
ratios bridge/raw and bridge/Keras, steps per CPU-second and peak RSS.
Workloads: an MLP 784-256-256-10 (batch 128, Adam) and a tiny overhead-bound
linear model (8 -> 1, batch 8, SGD), at steps_per_execution 1, 32 and 100;
plus a scalar `host_call` on/off and padded prediction against a raw loop.
A shared 2-core machine drifts by +-20 %: compare ratios, not absolute rates.

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
import time

WORKLOADS = {"mlp": (784, [256, 256], 10, 128), "tiny": (8, [], 1, 8)}


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
    if kind in ("bridge", "bridge+host_call"):
        model = kte.EstimatorModel(model_fn, train_batch_size=batch, steps_per_execution=spe)
        run = lambda n: model.fit(lambda params: dataset(params["batch_size"]),  # noqa: E731
                                  callbacks=[kte.StopAtStep(steps=n)], verbose=0)
    elif kind == "keras":
        model = keras.Sequential([keras.Input((inputs,)), *layers()])
        optimizer = keras.optimizers.Adam(1e-3) if config["workload"] == "mlp" else keras.optimizers.SGD(0.01)
        model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      steps_per_execution=spe)
        data = dataset().map(lambda f, labels: (f["x"], labels))
        run = lambda n: model.fit(data, steps_per_epoch=n, epochs=1, verbose=0)  # noqa: E731
    elif kind == "raw":
        model = keras.Sequential([keras.Input((inputs,)), *layers()])
        optimizer = keras.optimizers.Adam(1e-3) if config["workload"] == "mlp" else keras.optimizers.SGD(0.01)
        optimizer.build(model.trainable_variables)
        iterator = iter(dataset())

        @tf.function
        def loop(n):
            for _ in tf.range(n):
                features, labels = next(iterator)
                with tf.GradientTape() as tape:
                    loss = loss_of(labels, model(features["x"]))
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

        def run(n):
            for _ in range(n // spe):
                loop(tf.constant(spe))
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
    return {"rate": steps / wall, "cpu_rate": steps / cpu,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def configurations(quick: bool) -> list[dict]:
    configs = []
    for workload in ("mlp", "tiny"):
        for spe in (1, 32, 100):
            steps = (200 if spe == 1 else 1000) // (4 if quick else 1) // spe * spe or spe
            for kind in ("raw", "keras", "bridge"):
                configs.append({"workload": workload, "spe": spe, "kind": kind, "steps": steps})
    configs.append({"workload": "mlp", "spe": 100, "kind": "bridge+host_call", "steps": 1000 // (4 if quick else 1) // 100 * 100})
    for kind in ("predict raw", "predict padded"):
        configs.append({"workload": "mlp", "spe": 100, "kind": kind, "steps": 1000 // (4 if quick else 1) // 100 * 100})
    return configs


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a quarter of the steps")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(_measure(json.loads(args.one))))
        return {}
    configs = configurations(args.quick)
    results: dict = {json.dumps(c, sort_keys=True): [] for c in configs}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    for _ in range(args.rounds):
        for config in configs:
            out = subprocess.run([sys.executable, "-m", "benchmarks.run", "--one", json.dumps(config)],
                                 capture_output=True, text=True, env=env, check=True).stdout
            results[json.dumps(config, sort_keys=True)].append(json.loads(out.strip().splitlines()[-1]))

    def median(config: dict, key: str = "rate") -> float:
        return statistics.median(r[key] for r in results[json.dumps(config, sort_keys=True)])

    print(f"{'workload':8s} {'spe':>4s} {'configuration':18s} {'steps/s':>9s} {'per CPU-s':>10s}"
          f" {'vs raw':>7s} {'vs keras':>8s} {'RSS MB':>7s}")
    for config in configs:
        if config["kind"].startswith("predict"):
            continue
        base = {k: v for k, v in config.items() if k != "kind"}
        raw, keras_rate = median({**base, "kind": "raw"}), median({**base, "kind": "keras"})
        rate = median(config)
        print(f"{config['workload']:8s} {config['spe']:4d} {config['kind']:18s} {rate:9.1f}"
              f" {median(config, 'cpu_rate'):10.1f} {rate / raw:7.2f} {rate / keras_rate:8.2f}"
              f" {median(config, 'peak_rss_mb'):7.0f}")
    predict = {k: median({**configs[-1], "kind": k}) for k in ("predict raw", "predict padded")}
    print(f"predict (mlp, batch 128): padded bridge / raw loop = {predict['predict padded'] / predict['predict raw']:.2f}")
    return results


if __name__ == "__main__":
    main()
