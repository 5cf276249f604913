"""TF1 programs whose input_fns return tensors, and the `.meta` a TF1 program reads back; run on both estimators.

Like `original_programs.py`, the code is plain TF1-style TensorFlow and the
estimator classes come from an `est` namespace (`original_programs.
original_namespace()` under TF 2.15, `estimator_namespace(keras_tpu_estimator.
estimator)` here). `scripts/record_input_numbers.py` runs them on the
original and writes `tests/recorded_input_numbers.py`.

Each input kind returns tensors as a public program did: a one-shot
iterator's `get_next()` (TF2's `tf.compat.v1.data` function or a v1
dataset's method), an initializable iterator whose initializer is in
`TABLE_INITIALIZERS`, tensors post-processed after `get_next()`, a lookup
table, a queue-runner pipeline. Data is NumPy, initializers constants.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

WIDTH = 3
KINDS = ("one_shot", "v1_method", "initializable", "postprocessed", "lookup_table", "queue")
TRAIN_ROWS, EVAL_ROWS, PREDICT_ROWS = 48, 20, 10  # eval batches of 8: 8, 8 and 4 rows


def data(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(seed)
    x = rng.randn(rows, WIDTH).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3).astype(np.float32)
    return x, y


def _dataset(kind: str, arrays: Any) -> Any:
    if kind == "v1_method":
        return tf.compat.v1.data.Dataset.from_tensor_slices(arrays)
    return tf.data.Dataset.from_tensor_slices(arrays)


def _tensors(kind: str, dataset: Any) -> Any:
    """`get_next()` of `dataset` as the kind's programs wrote it."""
    if kind == "v1_method":
        return dataset.make_one_shot_iterator().get_next()
    if kind == "initializable":
        iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.TABLE_INITIALIZERS, iterator.initializer)
        return iterator.get_next()
    return tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()


def input_fn(kind: str, rows: int, seed: int, repeat: bool = False, labels: bool = True) -> Any:
    """An input_fn of `kind` over `data(rows, seed)`, batched by `params['batch_size']`."""

    def fn(params: dict) -> Any:
        batch_size = params["batch_size"]
        x, y = data(rows, seed)
        if kind == "queue":
            tensors = tf.compat.v1.train.slice_input_producer(
                [x, y], num_epochs=None if repeat else 1, shuffle=False)
            x_batch, y_batch = tf.compat.v1.train.batch(
                tensors, batch_size, allow_smaller_final_batch=not repeat)
            return ({"x": x_batch}, y_batch) if labels else {"x": x_batch}
        if kind == "lookup_table":  # string features mapped to ids by a table, as vocabularies were
            words = np.array([b"neg", b"pos"])[(x[:, 0] > 0).astype(int)]
            dataset = _dataset(kind, ({"x": x, "word": words}, y))
        else:
            dataset = _dataset(kind, ({"x": x}, y))
        if repeat:
            dataset = dataset.repeat()
        features, label = _tensors(kind, dataset.batch(batch_size, drop_remainder=repeat))
        if kind == "postprocessed":  # reshaped and rescaled after get_next(), as MobileNet's input did
            features = {"x": tf.reshape(features["x"] * 2.0, [-1, WIDTH]) / 2.0}
            label = tf.cast(tf.cast(label * 1000.0, tf.int32), tf.float32) / 1000.0
        if kind == "lookup_table":
            table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(tf.constant(["neg", "pos"]), tf.constant([-1.0, 1.0])), 0.0)
            features = {"x": features["x"] + 0.1 * tf.expand_dims(table.lookup(features["word"]), 1)}
        return (features, label) if labels else features

    return fn


def make_model_fn(est: Any) -> Any:
    """A linear regression trained by TF1 SGD; EVAL reports the mean label and the row count."""

    def model_fn(features, labels, mode, params):
        w = tf.compat.v1.get_variable("linear/w", initializer=np.full((WIDTH, 1), 0.1, np.float32))
        b = tf.compat.v1.get_variable("linear/b", [1], initializer=tf.compat.v1.zeros_initializer())
        predictions = tf.matmul(features["x"], w) + b
        if mode == est.ModeKeys.PREDICT:
            return est.TPUEstimatorSpec(mode, predictions={"y": predictions})
        loss = tf.reduce_mean(tf.square(predictions - labels))
        if mode == est.ModeKeys.EVAL:
            def metric_fn(labels):
                ones = tf.ones_like(labels[:, 0], tf.bool)
                return {"label_mean": tf.compat.v1.metrics.mean(labels),
                        "rows": tf.compat.v1.metrics.true_positives(ones, ones)}
            return est.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels]))
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        if params["use_tpu"]:
            optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
        step = tf.compat.v1.train.get_global_step()
        return est.TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, step))

    return model_fn


def build(est: Any, model_dir: str, model_fn: Any, use_tpu: bool = False, strategy: Any = None,
          **config: Any) -> Any:
    """`est.TPUEstimator` with batch 8 in every mode, 4 iterations per loop."""
    if strategy is not None:
        config["train_distribute"] = strategy
    run_config = est.RunConfig(model_dir=model_dir, tpu_config=est.TPUConfig(iterations_per_loop=4), **config)
    return est.TPUEstimator(model_fn, config=run_config, use_tpu=use_tpu, train_batch_size=8,
                            eval_batch_size=8, predict_batch_size=8)


def plain(value: Any) -> Any:
    """NumPy values as plain Python ones (floats, ints, lists)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    return value


def assert_close(ours: Any, original: Any, where: str = "") -> None:
    """Equal structure and values; floats within float32 round-off (rtol 2e-5, atol 1e-6)."""
    if isinstance(original, dict):
        assert sorted(ours) == sorted(original), f"{where}: {sorted(ours)} != {sorted(original)}"
        for key in original:
            assert_close(ours[key], original[key], f"{where}.{key}")
    elif isinstance(original, list):
        assert len(ours) == len(original), f"{where}: {ours} != {original}"
        for i, (a, b) in enumerate(zip(ours, original, strict=True)):
            assert_close(a, b, f"{where}[{i}]")
    elif isinstance(original, float):
        assert np.isclose(ours, original, rtol=2e-5, atol=1e-6), f"{where}: {ours} != {original}"
    else:
        assert ours == original, f"{where}: {ours!r} != {original!r}"


def tensor_input_run(est: Any, model_dir: str, kind: str, use_tpu: bool = False, strategy: Any = None) -> dict:
    """Trains 6 steps, evaluates 2 steps and to the end, predicts, all from `kind` tensors."""
    estimator = build(est, model_dir, make_model_fn(est), use_tpu, strategy)
    estimator.train(input_fn(kind, TRAIN_ROWS, 0, repeat=True), max_steps=6)
    eval_fn = input_fn(kind, EVAL_ROWS, 1)
    results = {
        "w": estimator.get_variable_value("linear/w"),
        "evaluate_2_steps": estimator.evaluate(eval_fn, steps=2),
        "evaluate_to_the_end": estimator.evaluate(eval_fn),
    }
    if not use_tpu:  # the original's TPU path refused tensors in PREDICT
        rows = estimator.predict(input_fn(kind, PREDICT_ROWS, 2, labels=False))
        results["predictions"] = [float(row["y"][0]) for row in rows]
    return plain(results)


def adam_model_fn(est: Any) -> Any:
    """An ALBERT-like head (variables under scopes, Adam slots, a decayed learning rate)."""

    def model_fn(features, labels, mode, params):
        with tf.compat.v1.variable_scope("bert/pooler"):
            kernel = tf.compat.v1.get_variable(
                "dense/kernel", initializer=np.linspace(-0.5, 0.5, WIDTH * 4, dtype=np.float32).reshape(WIDTH, 4))
            hidden = tf.nn.tanh(tf.matmul(features["x"], kernel))
        out = tf.compat.v1.get_variable("output_weights", initializer=np.full((4, 1), 0.2, np.float32))
        predictions = tf.matmul(hidden, out)
        loss = tf.reduce_mean(tf.square(predictions - labels))
        if mode == est.ModeKeys.EVAL:
            return est.TPUEstimatorSpec(mode, loss=loss)
        step = tf.compat.v1.train.get_global_step()
        optimizer = tf.compat.v1.train.AdamOptimizer(tf.compat.v1.train.polynomial_decay(0.05, step, 20))
        if params["use_tpu"]:
            optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
        return est.TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, step))

    return model_fn


def dataset_input_fn(rows: int, seed: int) -> Any:
    def fn(params: dict) -> tf.data.Dataset:
        x, y = data(rows, seed)
        dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat()
        return dataset.batch(params["batch_size"], drop_remainder=True)

    return fn


def meta_facts(checkpoint: str) -> dict:
    """What a TF1 program sees after `import_meta_graph(checkpoint + '.meta')` and `saver.restore`.

    Works on TF 2.15 and 2.21, in eager programs (it builds its own graph).
    """
    with tf.Graph().as_default() as graph:
        saver = tf.compat.v1.train.import_meta_graph(checkpoint + ".meta")
        with tf.compat.v1.Session(graph=graph) as session:
            saver.restore(session, checkpoint)
            variables = tf.compat.v1.global_variables()
            saver_def = saver.saver_def
            return plain({
                "global_variables": [
                    [v.op.name, v.shape.as_list(), v.dtype.base_dtype.name, v.op.type] for v in variables],
                "trainable_variables": [v.op.name for v in tf.compat.v1.trainable_variables()],
                "global_step": [
                    v.op.name for v in tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.GLOBAL_STEP)],
                "savers": len(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVERS)),
                "saver_def": [saver_def.filename_tensor_name, saver_def.restore_op_name, saver_def.max_to_keep,
                              saver_def.sharded, saver_def.keep_checkpoint_every_n_hours, int(saver_def.version)],
                "values": {v.op.name: np.ravel(session.run(v)) for v in variables},
                # read as TF1 programs did, by tensor name
                "by_name": {v.op.name: np.ravel(session.run(graph.get_tensor_by_name(
                    v.op.name + ("/Read/ReadVariableOp:0" if v.op.type == "VarHandleOp" else ":0"))))
                    for v in tf.compat.v1.trainable_variables()},
            })


def meta_run(est: Any, model_dir: str, use_tpu: bool = False, strategy: Any = None) -> dict:
    """Trains 10 steps saving every 4 (keep 2); the `.meta` files left and the newest one's facts."""
    estimator = build(est, model_dir, adam_model_fn(est), use_tpu, strategy,
                      save_checkpoints_steps=4, keep_checkpoint_max=2)
    estimator.train(dataset_input_fn(40, 0), max_steps=10)
    latest = tf.train.latest_checkpoint(model_dir)
    return {
        "meta_files": sorted(n for n in tf.io.gfile.listdir(model_dir) if n.endswith(".meta")),
        "latest": latest[len(model_dir) + 1:],
        "facts": meta_facts(latest),
    }
