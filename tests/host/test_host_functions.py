"""host_call and eval_metrics through the model: gathered across replicas, run on the host.

host_call per step, eval_metrics per execution. The host runner fed directly is `test_runner.py`;
the global step host functions read, `test_global_step.py`.
"""

import threading

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from tests.fixtures import models


def recording_host_call(calls):
    """A host_call fn that records what it is given (through numpy_function)."""

    def record(ids, step):
        calls.append((ids.copy(), int(step[0])))
        return np.int64(0)

    def host_fn(ids, global_step):
        return tf.numpy_function(record, [ids, global_step], tf.int64)

    return host_fn


def model_fn_with_host_call(calls, read_step_first=True):
    def model_fn(features, labels, mode, params):
        if read_step_first:  # before the train_op: the step's 0-based index
            step = tf.reshape(tf.compat.v1.train.get_global_step(), [1])
        spec = models.get_variable_mlp(features, labels, mode, params)
        if not read_step_first:  # after minimize(global_step=...): steps done so far
            step = tf.reshape(tf.compat.v1.train.get_global_step(), [1])
        host_call = (recording_host_call(calls), [features["id"], step])
        return spec._replace(host_call=host_call)

    return model_fn


def make(model_fn, strategy, k, **config):
    return kte.EstimatorModel(
        model_fn, strategy=strategy, train_batch_size=32, eval_batch_size=32, predict_batch_size=32,
        config=kte.RunConfig(tpu_config=kte.TPUConfig(iterations_per_loop=k, **config)),
    )


def test_host_call_runs_once_per_step_with_rows_in_global_order(strategy):
    calls = []
    model = make(model_fn_with_host_call(calls), strategy, k=8)
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=24)], verbose=0)
    assert len(calls) == 24
    # Step s saw rows 32s..32s+31 of the input, replica 0's first; steps are 0-based.
    for step, (ids, global_step) in enumerate(calls):
        assert global_step == step
        np.testing.assert_array_equal(ids, np.arange(32 * step, 32 * step + 32) % models.NUM_ROWS)


def test_a_step_read_after_the_train_op_is_the_step_s_index_on_the_strategy_path(strategy):
    # As on a TPU: the host call's read of the global step is the step's 0-based index.
    calls = []
    model = make(model_fn_with_host_call(calls, read_step_first=False), strategy, k=8)
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=10)], verbose=0)
    assert [step for _, step in calls] == list(range(10))


def test_a_step_read_after_the_train_op_counts_from_one_on_the_cpu_path():
    calls = []
    model = kte.EstimatorModel(
        model_fn_with_host_call(calls, read_step_first=False), use_tpu=False, train_batch_size=32,
        config=kte.RunConfig(tpu_config=kte.TPUConfig(iterations_per_loop=4)),
    )
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=10)], verbose=0)
    assert [step for _, step in calls] == list(range(1, 11))


def test_every_n_steps_counts_within_each_execution(strategy):
    # TPUEstimator's outfeed: a loop's steps whose 0-based index in the loop is a multiple of n.
    calls = []
    model = make(model_fn_with_host_call(calls), strategy, k=4, experimental_host_call_every_n_steps=3)
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=10)], verbose=0)  # executions of 4, 4, 2
    assert [step for _, step in calls] == [0, 3, 4, 7, 8]
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=5)], verbose=0)  # 4 and 1
    assert [step for _, step in calls][5:] == [10, 13, 14]


def test_every_n_steps_is_for_the_tpu_path_only():
    # The original's CPU path (use_tpu=False) ran host_call as a hook at every step.
    calls = []
    model = kte.EstimatorModel(
        model_fn_with_host_call(calls), use_tpu=False, train_batch_size=32,
        config=kte.RunConfig(tpu_config=kte.TPUConfig(iterations_per_loop=4, experimental_host_call_every_n_steps=3)),
    )
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=10)], verbose=0)
    assert [step for _, step in calls] == list(range(10))


def test_host_call_runs_in_eval_and_predict_every_step(strategy):
    calls = []
    model = make(model_fn_with_host_call(calls), strategy, k=8)
    model.evaluate(models.input_fn, steps=3, verbose=0)
    assert len(calls) == 3
    model.predict(models.predict_input_fn, verbose=0)  # 64 rows: 2 steps
    assert len(calls) == 5
    np.testing.assert_array_equal(calls[-1][0], np.arange(32, 64))


@pytest.mark.parametrize("use_tpu", [True, False])
def test_a_host_call_without_tensors_runs_once_per_step(use_tpu, strategy):
    calls = []

    def fn():  # nothing travels from the device; the original still ran it every step
        return tf.numpy_function(lambda: calls.append(1) or np.int64(0), [], tf.int64)

    def model_fn(features, labels, mode, params):
        return models.get_variable_mlp(features, labels, mode, params)._replace(host_call=(fn, []))

    model = models.make_model(model_fn, strategy if use_tpu else None, k=4, use_tpu=use_tpu)
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=6)], verbose=0)
    assert len(calls) == 6
    model.evaluate(models.input_fn, steps=3, verbose=0)
    assert len(calls) == 9
    model.predict(models.predict_input_fn, verbose=0)  # 64 rows in batches of 16
    assert len(calls) == 13


@pytest.mark.parametrize("use_tpu", [True, False])
def test_eval_metrics_without_tensors_are_reported(use_tpu, strategy):
    def metric_fn():  # was silently left out on the strategy path
        return {"constant": tf.compat.v1.metrics.mean(tf.constant(2.0))}

    def model_fn(features, labels, mode, params):
        return models.get_variable_mlp(features, labels, mode, params)._replace(eval_metrics=(metric_fn, []))

    model = models.make_model(model_fn, strategy if use_tpu else None, k=2, use_tpu=use_tpu)
    assert model.evaluate(models.input_fn, steps=3, verbose=0, return_dict=True)["constant"] == 2.0


def summary_model_fn(features, labels, mode, params):
    step = tf.reshape(tf.compat.v1.train.get_or_create_global_step(), [1])
    spec = models.get_variable_mlp(features, labels, mode, params)
    loss = tf.reshape(spec.loss, [1])
    logdir = params["logdir"]

    def host_fn(global_step, loss):
        # TPUEstimator-era host_call code, unchanged.
        with tf.summary.create_file_writer(logdir).as_default():
            with tf.summary.record_if(tf.equal(global_step[0] % 5, 0)):
                tf.summary.scalar("host_loss", loss[0], step=global_step[0])
        return tf.compat.v1.summary.all_v2_summary_ops()

    return spec._replace(host_call=(host_fn, [step, loss]))


def event_steps(logdir, tag):
    steps = []
    for path in tf.io.gfile.glob(f"{logdir}/events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(path):
            steps += [event.step for value in event.summary.value if value.tag == tag]
    return sorted(steps)


def test_tf1_style_summary_host_call(tmp_path, strategy):
    model = kte.EstimatorModel(
        summary_model_fn, params={"logdir": str(tmp_path), "optimizer": "sgd"}, strategy=strategy,
        train_batch_size=16, config=kte.RunConfig(tpu_config=kte.TPUConfig(iterations_per_loop=21)),
    )
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=42)], verbose=0)
    # In the event file as soon as fit returns.
    assert event_steps(tmp_path, "host_loss") == [0, 5, 10, 15, 20, 25, 30, 35, 40]
    # One writer: fn called inside the host loop makes no second (empty) event file.
    assert len(tf.io.gfile.glob(f"{tmp_path}/events.out.tfevents.*")) == 1


def test_eval_host_call_writes_one_event_per_step(tmp_path, strategy):
    def model_fn(features, labels, mode, params):
        spec = models.get_variable_mlp(features, labels, mode, params)

        def host_fn(loss):
            with tf.summary.create_file_writer(str(tmp_path)).as_default():
                tf.summary.scalar("eval_loss", loss[0], step=tf.compat.v1.train.get_or_create_global_step())
            return tf.compat.v1.summary.all_v2_summary_ops()

        return spec._replace(host_call=(host_fn, [tf.reshape(spec.loss, [1])]))

    model = make(model_fn, strategy, k=3)
    model.evaluate(models.input_fn, steps=7, verbose=0)
    assert len(event_steps(tmp_path, "eval_loss")) == 7


LABELS = np.arange(640) % 3


def metric_input_fn(params):
    features, _ = models.data()
    return tf.data.Dataset.from_tensor_slices((features, LABELS.astype(np.int64))).batch(
        params["batch_size"], drop_remainder=True)


def metric_model_fn(form):
    def model_fn(features, labels, mode, params):
        w = tf.compat.v1.get_variable("w", [4, 3], initializer=tf.compat.v1.constant_initializer(
            np.arange(12).reshape(4, 3) % 5 - 2.0))
        logits = tf.matmul(features["x"], w)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        predicted = tf.argmax(logits, axis=1)
        weights = tf.cast(features["id"] % 2, tf.float32)

        def metric_fn(labels, predicted, x0, weights):
            return {
                "accuracy": tf.compat.v1.metrics.accuracy(labels, predicted),
                "weighted_mean": tf.compat.v1.metrics.mean(x0, weights=weights),
            }

        tensors = [labels, predicted, features["x"][:, 0], weights]
        if form == "dict":
            tensors = dict(zip(["labels", "predicted", "x0", "weights"], tensors, strict=True))
        return kte.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, tensors))

    return model_fn


def expected_metrics(rows):
    features, _ = models.data()
    w = np.arange(12).reshape(4, 3) % 5 - 2.0
    x = features["x"][:rows]
    predicted = np.argmax(x @ w, axis=1)
    weights = (np.arange(rows) % 2).astype(np.float64)
    return {
        "accuracy": np.mean(predicted == LABELS[:rows]),
        "weighted_mean": np.sum(x[:, 0] * weights) / np.sum(weights),
    }


@pytest.mark.parametrize("form", ["list", "dict"])
def test_tf1_metrics_are_exact_over_all_rows_and_replicas(form, strategy):
    model = make(metric_model_fn(form), strategy, k=2)
    results = model.evaluate(metric_input_fn, steps=5, verbose=0, return_dict=True)
    expected = expected_metrics(160)
    assert results["accuracy"] == pytest.approx(expected["accuracy"], abs=1e-6)
    assert results["weighted_mean"] == pytest.approx(expected["weighted_mean"], rel=1e-5)
    # A second evaluation starts from zero.
    again = model.evaluate(metric_input_fn, steps=5, verbose=0, return_dict=True)
    assert again["accuracy"] == pytest.approx(results["accuracy"])


def test_metrics_match_with_use_tpu_false():
    on_cpu = kte.EstimatorModel(metric_model_fn("list"), use_tpu=False, eval_batch_size=32)
    results = on_cpu.evaluate(metric_input_fn, steps=5, verbose=0, return_dict=True)
    assert results["accuracy"] == pytest.approx(expected_metrics(160)["accuracy"], abs=1e-6)


def test_keras_metrics_in_metric_fn(strategy):
    accuracy = keras.metrics.SparseCategoricalAccuracy(name="acc")

    def model_fn(features, labels, mode, params):
        spec = metric_model_fn("list")(features, labels, mode, params)
        logits = tf.matmul(features["x"], tf.compat.v1.get_variable("w", [4, 3]))

        def metric_fn(labels, logits):
            accuracy.update_state(labels, logits)
            return {"keras_accuracy": accuracy}

        return spec._replace(eval_metrics=(metric_fn, [labels, logits]))

    model = make(model_fn, strategy, k=2)
    first = model.evaluate(metric_input_fn, steps=5, verbose=0, return_dict=True)
    expected = expected_metrics(160)["accuracy"]
    assert first["keras_accuracy"] == pytest.approx(expected, abs=1e-6)
    again = model.evaluate(metric_input_fn, steps=5, verbose=0, return_dict=True)
    assert again["keras_accuracy"] == pytest.approx(expected, abs=1e-6)


def test_scalar_host_tensors_are_rejected_naming_the_field(strategy):
    def model_fn(features, labels, mode, params):
        spec = models.get_variable_mlp(features, labels, mode, params)
        return spec._replace(host_call=(lambda loss: None, {"loss": spec.loss}))

    model = make(model_fn, strategy, k=2)
    with pytest.raises(RuntimeError, match=r"^All tensors outfed from TPU should preserve batch size dimension, but got scalar .*host_call\[1\]\['loss'\] must keep.*tf.reshape\(t, \[1\]\)"):
        model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=1)], verbose=0)


def test_errors_in_host_functions_surface_in_the_caller(strategy):
    def explode(ids):
        raise ZeroDivisionError("host side failure")

    def model_fn(features, labels, mode, params):
        spec = models.get_variable_mlp(features, labels, mode, params)
        host_fn = lambda ids: tf.numpy_function(explode, [ids], tf.int64)  # noqa: E731
        return spec._replace(host_call=(host_fn, [features["id"]]))

    model = make(model_fn, strategy, k=2)
    with pytest.raises(tf.errors.UnknownError, match="host side failure"):
        model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=2)], verbose=0)


def test_dict_tensors_that_do_not_match_the_function_raise_type_error(strategy):
    def model_fn(features, labels, mode, params):
        spec = models.get_variable_mlp(features, labels, mode, params)
        return spec._replace(host_call=(lambda ids: None, {"wrong": features["id"]}))

    model = make(model_fn, strategy, k=2)
    with pytest.raises(TypeError, match="wrong"):
        model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=1)], verbose=0)


def test_a_host_call_that_returns_nothing_still_writes_its_summaries(tmp_path, strategy):
    def model_fn(features, labels, mode, params):
        step = tf.reshape(tf.compat.v1.train.get_or_create_global_step(), [1])
        spec = models.get_variable_mlp(features, labels, mode, params)

        def host_fn(step, loss):  # no return value
            with tf.summary.create_file_writer(str(tmp_path)).as_default():
                tf.summary.scalar("silent", loss[0], step=step[0])

        return spec._replace(host_call=(host_fn, [step, tf.reshape(spec.loss, [1])]))

    make(model_fn, strategy, k=3).fit(models.input_fn, callbacks=[kte.StopAtStep(steps=5)], verbose=0)
    assert event_steps(tmp_path, "silent") == [0, 1, 2, 3, 4]


def test_the_host_thread_ends_with_each_call_and_facade_calls_close_their_sessions(tmp_path):
    def host_threads():
        return [t for t in threading.enumerate() if t.name.startswith("keras_tpu_estimator_host")]

    calls = []
    model = make(model_fn_with_host_call(calls), None, k=2)
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=4)], verbose=0)
    assert len(calls) == 4 and host_threads() == []  # the next fit starts it again
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=2)], verbose=0)
    assert len(calls) == 6 and host_threads() == []

    def metric_and_host_call_model_fn(features, labels, mode, params):
        # With use_tpu=False TF1 metric pairs may run inside the step: the host_call keeps a host Session.
        spec = metric_model_fn("list")(features, labels, mode, params)
        return spec._replace(host_call=(lambda ids: tf.identity(ids), [features["id"]]))

    estimator = kte.TPUEstimator(metric_and_host_call_model_fn, config=kte.RunConfig(model_dir=str(tmp_path)),
                                 train_batch_size=32, eval_batch_size=32, use_tpu=False)
    opened = []
    original = tf.compat.v1.Session.__init__

    def recording_init(session, *args, **kwargs):
        original(session, *args, **kwargs)
        opened.append(session)

    tf.compat.v1.Session.__init__ = recording_init
    try:
        estimator.evaluate(metric_input_fn, steps=2)
    finally:
        tf.compat.v1.Session.__init__ = original
    assert opened
    for session in opened:  # the host_call / metric sessions of the evaluation are closed
        with pytest.raises(RuntimeError, match="closed Session"):
            session.run([])
    assert host_threads() == []
