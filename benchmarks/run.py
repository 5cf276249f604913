"""Steps per second of the bridge against plain Keras and a raw tf.function loop, in one run.

Run: `.venv/bin/python -m benchmarks.run [--steps 1024] [--rounds 3]`
(after `bash scripts/setup.sh`). Model: MLP 784-256-256-10, batch 128, Adam,
synthetic cached data, `steps_per_execution` = 100. Configurations are
interleaved round by round and the median is reported, with ratios against
the raw loop, because a shared 2-core machine drifts by +-20 %.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_tpu_estimator as kte  # noqa: E402

BATCH, SPE = 128, 100


def dataset(batch=BATCH):
    rng = np.random.RandomState(0)
    x = rng.randn(BATCH * 8, 784).astype(np.float32)
    y = rng.randint(0, 10, BATCH * 8).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).cache().repeat().batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def input_fn(params):
    return dataset(params["batch_size"])


def model_fn(features, labels, mode, params):
    hidden = features["x"]
    for i, units in enumerate([256, 256]):
        hidden = keras.layers.Dense(units, activation="relu", name=f"dense_{i}")(hidden)
    logits = keras.layers.Dense(10, name="logits")(hidden)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    train_op = tf.compat.v1.train.AdamOptimizer(1e-3).minimize(loss, tf.compat.v1.train.get_global_step())
    host_call = None
    if params.get("host_call"):
        step = tf.reshape(tf.compat.v1.train.get_global_step(), [1])

        def host_fn(step, loss):
            return tf.identity(loss)

        host_call = (host_fn, [step, tf.reshape(loss, [1])])
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, host_call=host_call)


def keras_runner():
    model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=SPE)
    data = dataset().map(lambda f, y: (f["x"], y))
    model.fit(data, steps_per_epoch=SPE, epochs=1, verbose=0)
    return lambda steps: model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)


def raw_runner():
    layers = [keras.layers.Dense(256, activation="relu"), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)]
    model = keras.Sequential([keras.Input((784,)), *layers])
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(model.trainable_variables)
    iterator = iter(dataset())

    @tf.function
    def loop(n):
        for _ in tf.range(n):
            features, labels = next(iterator)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, model(features["x"])))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

    loop(tf.constant(SPE))

    def run(steps):
        for _ in range(steps // SPE):
            loop(tf.constant(SPE))
    return run


def bridge_runner(host_call):
    model = kte.EstimatorModel(model_fn, params={"host_call": host_call}, train_batch_size=BATCH,
                               steps_per_execution=SPE)
    model.fit(input_fn, callbacks=[kte.StopAtStep(steps=SPE)], verbose=0)
    return lambda steps: model.fit(input_fn, callbacks=[kte.StopAtStep(steps=steps)], verbose=0)


def predict_model_fn(features, labels, mode, params):
    hidden = features["x"]
    for i, units in enumerate([256, 256]):
        hidden = keras.layers.Dense(units, activation="relu", name=f"dense_{i}")(hidden)
    return kte.TPUEstimatorSpec(mode, predictions={"logits": keras.layers.Dense(10, name="logits")(hidden)})


def predict_input_fn(params):
    rng = np.random.RandomState(1)
    x = rng.randn(BATCH * 1000, 784).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices({"x": x}).batch(params["batch_size"]).prefetch(tf.data.AUTOTUNE)


def predict_runners():
    """Prediction over 1000 full batches: the bridge pads every batch; the raw loop does not."""
    model = kte.EstimatorModel(predict_model_fn, predict_batch_size=BATCH, steps_per_execution=SPE)
    model.predict(predict_input_fn, verbose=0)
    dense = [model.variables_by_name[f"{name}/{part}"] for name in ("dense_0", "dense_1", "logits") for part in ("kernel", "bias")]

    @tf.function
    def raw_loop(iterator, n):
        outputs = tf.TensorArray(tf.float32, size=n)
        for i in tf.range(n):
            hidden = next(iterator)["x"]
            for layer in range(3):
                hidden = tf.matmul(hidden, dense[2 * layer]) + dense[2 * layer + 1]
                hidden = tf.nn.relu(hidden) if layer < 2 else hidden
            outputs = outputs.write(i, hidden)
        return outputs.concat()

    def raw(_):
        iterator, rows = iter(predict_input_fn({"batch_size": BATCH})), []
        for _ in range(1000 // SPE):
            rows.append(raw_loop(iterator, tf.constant(SPE)).numpy())
        return np.concatenate(rows)

    raw(None)
    return {"raw predict loop": raw, "bridge predict (padded)": lambda _: model.predict(predict_input_fn, verbose=0)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    runners = {
        "raw tf.function loop": raw_runner(),
        "keras fit (spe=100)": keras_runner(),
        "bridge, no host_call": bridge_runner(False),
        "bridge, scalar host_call": bridge_runner(True),
    }
    rates = {name: [] for name in runners}
    cpu_rates = {name: [] for name in runners}
    for _ in range(args.rounds):
        for name, run in runners.items():
            start, cpu_start = time.perf_counter(), time.process_time()
            run(args.steps)
            rates[name].append(args.steps / (time.perf_counter() - start))
            cpu_rates[name].append(args.steps / (time.process_time() - cpu_start))
    summary = {
        name: (statistics.median(rates[name]), max(rates[name]), statistics.median(cpu_rates[name]))
        for name in runners
    }
    raw = summary["raw tf.function loop"]
    print(f"{'configuration':26s} {'median/s':>9s} {'best/s':>8s} {'per CPU-s':>10s}"
          f" {'vs raw (median, best, CPU)':>28s}")
    for name, (median, best, cpu) in summary.items():
        print(f"{name:26s} {median:9.1f} {best:8.1f} {cpu:10.1f}"
              f"      {median / raw[0]:.2f}, {best / raw[1]:.2f}, {cpu / raw[2]:.2f}")
    plain, host = summary["bridge, no host_call"], summary["bridge, scalar host_call"]
    print("host_call overhead (median, best, CPU): "
          + ", ".join(f"{100 * (a / b - 1):.1f}%" for a, b in zip(plain, host, strict=True)))

    predictors = predict_runners()
    times = {name: [] for name in predictors}
    for _ in range(args.rounds):
        for name, run in predictors.items():
            start = time.perf_counter()
            run(None)
            times[name].append(time.perf_counter() - start)
    raw_best, padded_best = min(times["raw predict loop"]), min(times["bridge predict (padded)"])
    raw_median = statistics.median(times["raw predict loop"])
    padded_median = statistics.median(times["bridge predict (padded)"])
    print(f"predict 1000 batches of {BATCH}: raw {raw_median:.2f}s (best {raw_best:.2f}s), "
          f"bridge padded {padded_median:.2f}s (best {padded_best:.2f}s); padded / raw: "
          f"{padded_median / raw_median:.2f} median, {padded_best / raw_best:.2f} best")
    return summary


if __name__ == "__main__":
    main()
