"""The host runner on its own (`host/runner.py`, `host/plan.py`): fed what the device loop hands it.

Per execution, each tensor stacked [steps, rows of all replicas, ...] and the padding mask last;
eval_metrics in one loop per execution, host_call step by step, sessions and the host thread.
"""

import collections
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_tpu_estimator.host import plan as kte_host_plan
from keras_tpu_estimator.host import runner as kte_host
from keras_tpu_estimator.host import transfer as kte_transfer

Spec = collections.namedtuple("Spec", ["host_call", "eval_metrics"], defaults=(None, None))
ROWS, REPLICAS = 8, 2  # per replica; a step gathers 16 rows
METRIC_SPECS = {  # per replica, as model_fn returns them
    "labels": tf.TensorSpec([ROWS], tf.int64),
    "predictions": tf.TensorSpec([ROWS], tf.int64),
    "weights": tf.TensorSpec([ROWS], tf.float32),
    "scores": tf.TensorSpec([ROWS, 2], tf.float32),
    "offset": tf.TensorSpec([1], tf.float32),  # one row per replica: never loses rows
}


def all_metrics(labels, predictions, weights, scores, offset):
    positive, score = tf.equal(labels, 1), scores[:, 0]
    return {
        "accuracy": tf.compat.v1.metrics.accuracy(labels, predictions, weights=weights),
        "mean": tf.compat.v1.metrics.mean(score, weights=weights),
        "auc": tf.compat.v1.metrics.auc(positive, tf.sigmoid(score)),
        "precision": tf.compat.v1.metrics.precision(positive, tf.equal(predictions, 1)),
        "recall": tf.compat.v1.metrics.recall(positive, tf.equal(predictions, 1)),
        "mse": tf.compat.v1.metrics.mean_squared_error(tf.cast(labels, tf.float32), score),
        "offset": tf.compat.v1.metrics.mean(offset),
    }


def executions(seed, steps=(4, 4, 3)):
    """Stacked metric arrays (METRIC_SPECS' order) and mask; padding in each replica's last rows."""
    rng = np.random.default_rng(seed)
    result = []
    for count in steps:
        rows = ROWS * REPLICAS
        mask = np.ones([count, rows], np.float32)
        mask[-1, ROWS - 3 : ROWS] = 0  # the execution's last step is partial in both replicas
        mask[-1, 2 * ROWS - 5 :] = 0
        result.append([
            rng.integers(0, 3, [count, rows]),
            rng.integers(0, 3, [count, rows]),
            rng.random([count, rows]).astype(np.float32),
            rng.normal(size=[count, rows, 2]).astype(np.float32),
            rng.normal(size=[count, REPLICAS]).astype(np.float32),
            mask,
        ])
    result[-1][-1][0] = 0  # and a step of padding only
    return result


def metric_runner(metric_fn=all_metrics, tensors=None, batched=True):
    runner = kte_host.HostRunner(batch_eval_metrics=batched)
    tensors = list(METRIC_SPECS.values()) if tensors is None else tensors
    plan = runner.record(kte_host_plan.HostPlan.from_spec("eval", Spec(eval_metrics=(metric_fn, tensors)), REPLICAS, padded=True))
    assert plan is runner.plan("eval") and plan.specs[-1] == tf.TensorSpec([ROWS], tf.float32)
    return runner


def evaluate(runner, arrays):
    with runner.running("eval"):
        for execution in arrays:
            runner.submit("eval", execution, first_step=0, steps=len(execution[0]))
        return runner.metric_results()


def test_metrics_in_one_loop_per_execution_equal_a_call_per_step_bit_for_bit():
    arrays = executions(seed=1, steps=(4, 1, 4, 3))
    batched, per_step = metric_runner(), metric_runner(batched=False)
    results = evaluate(batched, arrays)
    assert batched.metrics.batched and not per_step.metrics.batched
    assert results == evaluate(per_step, arrays)  # exact: same values in the same order
    assert set(results) == {"accuracy", "mean", "auc", "precision", "recall", "mse", "offset"}
    labels = np.concatenate([e[0][e[5] > 0.5] for e in arrays])  # padded rows are out
    predictions = np.concatenate([e[1][e[5] > 0.5] for e in arrays])
    assert results["precision"] == pytest.approx(np.mean(labels[predictions == 1] == 1), rel=1e-6)
    offsets = np.concatenate([e[4].ravel() for e in arrays])  # [1] per replica: every step's
    assert results["offset"] == pytest.approx(offsets.mean(), rel=1e-6)


def test_keyword_tensors_in_one_loop_per_execution():
    def metric_fn(**tensors):
        return all_metrics(**tensors)

    arrays = executions(seed=2)
    order = sorted(METRIC_SPECS)  # dict tensors travel in sorted key order
    keyed = [[e[list(METRIC_SPECS).index(k)] for k in order] + [e[-1]] for e in arrays]
    runner = metric_runner(metric_fn, dict(METRIC_SPECS))
    results = evaluate(runner, keyed)
    assert runner.metrics.batched
    assert results == evaluate(metric_runner(batched=False), arrays)


@pytest.fixture
def session_calls(monkeypatch):
    """Every Session call: `run`, or a callable from `make_callable` (not counting its own `run`)."""
    calls, inside = [], []
    make_callable, run = tf.compat.v1.Session.make_callable, tf.compat.v1.Session.run

    def counted_make_callable(session, *args, **kwargs):
        prepared = make_callable(session, *args, **kwargs)

        def call(*a, **k):
            calls.append("run")
            inside.append(True)
            try:
                return prepared(*a, **k)
            finally:
                inside.pop()

        return call

    def counted_run(session, *args, **kwargs):
        if not inside:
            calls.append("run")
        return run(session, *args, **kwargs)

    monkeypatch.setattr(tf.compat.v1.Session, "make_callable", counted_make_callable)
    monkeypatch.setattr(tf.compat.v1.Session, "run", counted_run)
    return calls


@pytest.mark.parametrize("batched", [True, False])
def test_one_session_call_per_execution_with_eval_metrics(session_calls, batched):
    first, *rest = executions(seed=3, steps=(2, 5, 3, 4))
    runner = metric_runner(batched=batched)
    with runner.running("eval"):
        runner.submit("eval", first, first_step=0, steps=2)
        runner.drain()  # opens the Session, initializes the variables
        session_calls.clear()
        for execution in rest:
            runner.submit("eval", execution, first_step=0, steps=len(execution[0]))
        runner.drain()
        assert session_calls == ["run"] * (3 if batched else 12)


def test_executions_whose_rows_are_all_real_run_without_the_mask_with_the_same_results(session_calls):
    padded = executions(seed=5, steps=(3, 4, 2))
    real = [[*e[:-1], np.ones_like(e[-1])] for e in executions(seed=6, steps=(4, 1, 5))]
    arrays = [real[0], padded[0], real[1], real[2], padded[1], padded[2]]
    batched, per_step = metric_runner(), metric_runner(batched=False)
    session_calls.clear()
    results = evaluate(batched, arrays)
    metrics = batched.metrics
    assert metrics._unmasked_loop is not None and metrics._graph_metrics.ran(metrics._unmasked_loop)
    assert metrics._graph_metrics.ran(metrics._loop)
    assert results == evaluate(per_step, arrays)  # exact: same values in the same order
    labels = np.concatenate([e[0][e[5] > 0.5] for e in arrays])
    predictions = np.concatenate([e[1][e[5] > 0.5] for e in arrays])
    weights = np.concatenate([e[2][e[5] > 0.5] for e in arrays])
    assert results["accuracy"] == pytest.approx(np.average(labels == predictions, weights=weights), rel=1e-6)


def test_an_evaluation_of_real_rows_only_runs_one_session_call_per_execution(session_calls):
    first, *rest = [[*e[:-1], np.ones_like(e[-1])] for e in executions(seed=7, steps=(2, 5, 3, 4))]
    runner = metric_runner()
    with runner.running("eval"):
        runner.submit("eval", first, first_step=0, steps=2)
        runner.drain()
        session_calls.clear()
        for execution in rest:
            runner.submit("eval", execution, first_step=0, steps=len(execution[0]))
        runner.drain()
        assert session_calls == ["run"] * 3
        assert not runner.metrics._graph_metrics.ran(runner.metrics._loop)  # the masked loop never ran


def host_threads():
    return [t for t in threading.enumerate() if t.name.startswith("keras_tpu_estimator_host")]


@pytest.fixture
def opened_sessions(monkeypatch):
    opened = []
    original = tf.compat.v1.Session.__init__

    def recording_init(session, *args, **kwargs):
        original(session, *args, **kwargs)
        opened.append(session)

    monkeypatch.setattr(tf.compat.v1.Session, "__init__", recording_init)
    return opened


def is_closed(session):
    try:
        session.run([])
    except RuntimeError as error:
        assert "closed Session" in str(error)
        return True
    return False


def host_call_runner(calls, fail_at=None):
    def record(ids):
        if fail_at is not None and len(calls) == fail_at:
            raise ZeroDivisionError("host side failure")
        calls.append(ids.copy())
        return np.int64(0)

    def host_fn(ids):
        return tf.numpy_function(record, [ids], tf.int64)

    runner = metric_runner()
    runner.record(kte_host_plan.HostPlan.from_spec(
        "train", Spec(host_call=(host_fn, [tf.TensorSpec([ROWS], tf.int64)])), REPLICAS, padded=False))
    return runner


def test_an_evaluation_keeps_its_metric_session_for_the_next_which_starts_at_zero(opened_sessions):
    arrays = executions(seed=4)
    runner = metric_runner()
    first = evaluate(runner, arrays)
    # The thread ends with the call; the metric Session stays (its loop's executor is made once).
    assert len(opened_sessions) == 1 and not is_closed(opened_sessions[0]) and host_threads() == []
    assert runner.metric_results() == first
    with runner.running("eval"):  # before any step: initial values, not the last call's
        assert set(runner.metric_results().values()) == {0.0}
    # A new call: the same Session and graph, accumulators at zero.
    assert evaluate(runner, arrays[:1]) == evaluate(metric_runner(), arrays[:1])
    assert evaluate(runner, arrays) == first
    assert len(opened_sessions) == 2 and host_threads() == []  # one more: the fresh runner's
    runner.close()  # `EstimatorModel.release_host`, as every TPUEstimator call ends
    assert all(is_closed(s) for s in opened_sessions[:1]) and runner.metric_results() == first


def test_a_failed_evaluation_closes_its_metric_session(opened_sessions):
    runner = metric_runner()
    evaluate(runner, executions(seed=4))
    with pytest.raises(KeyError):
        with runner.running("eval"):
            runner.submit("eval", executions(seed=5)[0], first_step=0, steps=4)
            raise KeyError("the body's error")
    assert len(opened_sessions) == 1 and is_closed(opened_sessions[0]) and host_threads() == []
    with runner.running("eval"):  # the next call opens a new one, at zero
        assert set(runner.metric_results().values()) == {0.0}


def test_sessions_and_the_thread_close_when_the_call_raises(opened_sessions):
    calls = []
    runner = host_call_runner(calls)
    with pytest.raises(KeyError):
        with runner.running("eval"):
            runner.submit("eval", executions(seed=5)[0], first_step=0, steps=4)
            with runner.running("train"):  # nested, as validation inside fit
                runner.submit("train", [np.arange(16 * 3).reshape(3, 16)], first_step=0, steps=3)
                raise KeyError("the body's error")
    assert len(calls) == 3 and len(opened_sessions) == 2
    assert all(is_closed(s) for s in opened_sessions) and host_threads() == []


def test_a_host_error_while_the_body_raises_does_not_mask_it(opened_sessions):
    calls = []
    runner = host_call_runner(calls, fail_at=1)
    with pytest.raises(KeyError, match="the body's error"):
        with runner.running("train"):
            runner.submit("train", [np.arange(16 * 3).reshape(3, 16)], first_step=0, steps=3)
            raise KeyError("the body's error")
    assert all(is_closed(s) for s in opened_sessions) and host_threads() == []
    # Without a body error, the host error is raised at the end of the call.
    with pytest.raises(tf.errors.UnknownError, match="host side failure"):
        with runner.running("train"):
            runner.submit("train", [np.arange(16 * 3).reshape(3, 16)], first_step=0, steps=3)
    assert all(is_closed(s) for s in opened_sessions) and host_threads() == []


def test_a_nested_call_closes_only_its_own_sessions(opened_sessions):
    calls = []
    runner = host_call_runner(calls)
    with runner.running("train"):
        runner.submit("train", [np.arange(16).reshape(1, 16)], first_step=0, steps=1)
        with runner.running("eval"):
            runner.submit("eval", executions(seed=6)[0], first_step=0, steps=4)
        train_session, eval_session = opened_sessions
        # The evaluation's metric Session stays for the next evaluation; the thread goes on.
        assert not is_closed(eval_session) and not is_closed(train_session) and host_threads()
        runner.submit("train", [np.arange(16, 32).reshape(1, 16)], first_step=1, steps=1)
    assert is_closed(train_session) and host_threads() == [] and len(calls) == 2


def runner_with_host_call(fn, every_n_steps=1):
    runner = kte_host.HostRunner(every_n_steps=every_n_steps)
    runner.record(kte_host_plan.HostPlan.from_spec("train", Spec(host_call=(fn, list(METRIC_SPECS.values()))), REPLICAS, padded=True))
    return runner


def recording_fn(seen):
    def record(*values):
        seen.append([v.copy() for v in values])
        return np.int64(0)

    return lambda *tensors: tf.numpy_function(record, list(tensors), tf.int64)


@pytest.mark.parametrize("every_n_steps", [1, 3])
def test_host_call_runs_in_one_session_call_per_execution_step_by_step(session_calls, every_n_steps):
    seen = []
    arrays = executions(seed=4, steps=(2, 5, 3, 4))
    runner = runner_with_host_call(recording_fn(seen), every_n_steps)
    assert runner._host_calls["train"].over_steps
    with runner.running("train"):
        runner.submit("train", arrays[0], first_step=0, steps=2)
        runner.drain()  # opens the Session
        session_calls.clear()
        first = 2
        for execution in arrays[1:]:
            runner.submit("train", execution, first_step=first, steps=len(execution[0]))
            first += len(execution[0])
        runner.drain()
        assert session_calls == ["run"] * 3
    # Each chosen step, in order, as a call per step sees it: padded rows dropped, [1]-per-replica kept.
    steps = [(e, i) for e in arrays for i in range(len(e[0]))]
    # Chosen by the step's index within its execution (2, 5, 3, 4 steps; n=3: 1 + 2 + 1 + 2).
    expected = [kte_transfer.drop_padding([v[i] for v in e[:5]], e[5][i]) for e, i in steps if i % every_n_steps == 0]
    assert len(seen) == len(expected) == (14 if every_n_steps == 1 else 6)
    for got, want in zip(seen, expected, strict=True):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)


def test_a_host_call_that_creates_variables_runs_once_per_step(session_calls):
    def fn(labels, predictions, weights, scores, offset):  # a counter: no loop can create it
        count = tf.compat.v1.get_variable("count", initializer=tf.constant(0, tf.int64), use_resource=True)
        return count.assign_add(tf.reduce_sum(labels))

    arrays = executions(seed=5, steps=(3, 4))
    runner = runner_with_host_call(fn)
    host_call = runner._host_calls["train"]
    assert not host_call.over_steps
    with runner.running("train"):
        runner.submit("train", arrays[0], first_step=0, steps=3)
        runner.drain()
        session_calls.clear()
        runner.submit("train", arrays[1], first_step=3, steps=4)
        runner.drain()
        assert session_calls == ["run"] * 4
        count = host_call.evaluate(host_call.variables[0][0])
    kept = [kte_transfer.drop_padding([e[0][i]], e[5][i])[0] for e in arrays for i in range(len(e[0]))]
    assert count == sum(int(k.sum()) for k in kept)


@pytest.mark.parametrize("second_call", ["raises", "more_variables", "fewer_variables"])
def test_metric_fns_that_cannot_run_in_a_loop_run_per_step_with_the_same_results(second_call, session_calls):
    graph_calls = []

    def metric_fn(labels, predictions, weights, scores, offset):
        graph_calls.append(tf.executing_eagerly())
        again = graph_calls.count(False) > 1  # the call inside the loop
        if again and second_call == "raises":
            raise ValueError("only once")
        if again and second_call == "fewer_variables":
            return {"accuracy": tf.compat.v1.metrics.accuracy(labels, predictions)}
        result = all_metrics(labels, predictions, weights, scores, offset)
        if again and second_call == "more_variables":
            tf.compat.v1.metrics.mean(offset)
        return result

    arrays = executions(seed=7)
    runner = metric_runner(metric_fn)
    with runner.running("eval"):
        runner.submit("eval", arrays[0], first_step=0, steps=4)
        runner.drain()
        session_calls.clear()
        runner.submit("eval", arrays[1], first_step=0, steps=4)
        runner.drain()
        assert session_calls == ["run"] * 4 and not runner.metrics.batched
        runner.submit("eval", arrays[2], first_step=0, steps=3)
        results = runner.metric_results()
    assert results == evaluate(metric_runner(batched=False), arrays)


def test_keras_metric_dicts_run_eagerly_per_step():
    mean = keras.metrics.Mean(name="m")

    def metric_fn(labels, predictions, weights, scores, offset):
        mean.update_state(scores[:, 0])
        return {"mean": mean}

    arrays = executions(seed=8)
    runner = metric_runner(metric_fn)
    results = evaluate(runner, arrays)
    kept = np.concatenate([e[3][..., 0][e[5] > 0.5] for e in arrays])
    assert not runner.metrics.batched
    assert results["mean"] == pytest.approx(kept.mean(), rel=1e-5)
    assert evaluate(runner, arrays) == results  # reset at the start of each call


def test_a_host_plan_writes_the_transfer_order_for_both_sides():
    """The strategy path: every step's tensors at the padded batch size, the mask last."""
    ids, loss = tf.constant([7, 8, 9, 0, 0], tf.int64), tf.constant([0.5])
    spec = Spec(host_call=(lambda ids, loss: None, {"loss": loss, "ids": tf.TensorSpec([5], tf.int64)}),
                eval_metrics=(lambda labels: {}, [tf.TensorSpec([5], tf.int64)]))
    plan = kte_host_plan.HostPlan.from_spec("eval", spec, replicas=1, padded=True)
    assert [s.shape.as_list() for s in plan.specs] == [[5], [1], [5], [5]]  # ids, loss, labels, mask
    assert plan.concat == (False,) * 4
    assert plan.host_call.keys == ("ids", "loss") and plan.host_call.per_row == (True, False)

    step = Spec(host_call=(None, {"loss": loss, "ids": ids}), eval_metrics=(None, [ids + 1]))
    mask = tf.constant([1.0, 1.0, 1.0, 0.0, 0.0])
    values = plan.device_values(step, mask)
    np.testing.assert_array_equal(values[2], [8, 9, 10, 1, 1])
    np.testing.assert_array_equal(values[3], mask)
    host_call, metrics, got_mask = plan.split([v.numpy() for v in values])
    assert [len(host_call), len(metrics), got_mask.shape] == [2, 1, (5,)]
    kept = kte_transfer.drop_padding(host_call + metrics, got_mask)
    np.testing.assert_array_equal(kept[0], [7, 8, 9])
    np.testing.assert_array_equal(kept[1], [0.5])  # not one value per row: kept whole
    with pytest.raises(ValueError, match="eval_metrics when the model was built but None now"):
        plan.device_values(step._replace(eval_metrics=None), mask)
    assert kte_host_plan.HostPlan.from_spec("train", Spec(eval_metrics=spec.eval_metrics), 1, False) is None


def test_a_ragged_host_plan_sends_each_steps_own_shapes():
    """The CPU path: a tensor of unknown static shape travels ragged (values, dims, rank); scalars are allowed."""
    spec = Spec(host_call=(lambda ids, total, pairs: None,
                           [tf.TensorSpec([None], tf.int64), tf.TensorSpec([], tf.float32),
                            tf.TensorSpec([2, None], tf.float32)]))
    plan = kte_host_plan.HostPlan.from_spec("train", spec, replicas=1, padded=False, ragged=True)
    # The one transfer format (host/transfer.py): values, dims and rank, each concatenated over steps.
    assert [s.shape.as_list() for s in plan.specs] == [[None], [None], [1], [], [None], [None], [1]]
    assert plan.concat == (True, True, True, False, True, True, True)
    assert plan.host_call.ragged == (True, False, True) and not plan.padded

    steps = [  # two steps of different batch sizes, as a partial last batch makes
        (np.array([7, 8, 9]), np.float32(1.5), np.arange(6, dtype=np.float32).reshape(2, 3)),
        (np.array([4]), np.float32(2.5), np.array([[10.0], [11.0]], np.float32)),
    ]
    sent = [[v.numpy() for v in plan.device_values(Spec(host_call=(None, list(map(tf.constant, s)))), None)]
            for s in steps]
    # What the device loop hands over: the ragged parts concatenated, everything else stacked.
    arrays = [np.concatenate(parts) if joined else np.stack(parts)
              for parts, joined in zip(zip(*sent, strict=True), plan.concat, strict=True)]
    host_call, metrics, mask = plan.split(arrays)
    assert metrics == [] and mask is None and len(host_call) == 3
    for index, step in enumerate(steps):
        for got, expected in zip((v[index] for v in host_call), step, strict=True):
            np.testing.assert_array_equal(got, expected)
    with pytest.raises(RuntimeError, match="should preserve batch size dimension"):  # the strategy path refuses scalars
        kte_host_plan.HostPlan.from_spec("train", spec, replicas=1, padded=False)


def test_a_keras_metric_fn_that_fails_eagerly_raises_its_own_error():
    mean = keras.metrics.Mean(name="m")

    def metric_fn(labels, predictions, weights, scores, offset):
        mean.update_state(tf.debugging.check_numerics(scores[:, 0] * np.inf, "scores are Inf"))
        return {"mean": mean}

    with pytest.raises(tf.errors.InvalidArgumentError, match="scores are Inf"):
        evaluate(metric_runner(metric_fn), executions(seed=11))


def test_keras_metrics_created_inside_metric_fn_accumulate_every_step():
    """TF1 code creates its metrics inside metric_fn (called once there); here each call makes new ones."""

    def metric_fn(labels, predictions, weights, scores, offset):
        mean, accuracy = keras.metrics.Mean(), keras.metrics.Accuracy()
        mean.update_state(scores[:, 0])
        accuracy.update_state(labels, predictions)
        return {"mean": mean, "accuracy": accuracy}

    arrays = executions(seed=9)
    runner = metric_runner(metric_fn)
    results = evaluate(runner, arrays)
    kept = [e[5] > 0.5 for e in arrays]
    scores = np.concatenate([e[3][..., 0][k] for e, k in zip(arrays, kept, strict=True)])
    labels = np.concatenate([e[0][k] for e, k in zip(arrays, kept, strict=True)])
    predictions = np.concatenate([e[1][k] for e, k in zip(arrays, kept, strict=True)])
    assert results["mean"] == pytest.approx(scores.mean(), rel=1e-5)  # was 0.0: the first call's, reset
    assert results["accuracy"] == pytest.approx((labels == predictions).mean(), rel=1e-6)
    assert evaluate(runner, arrays) == results  # reset at the start of each call
