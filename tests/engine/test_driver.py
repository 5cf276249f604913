"""The execution driver: bounds declared by callbacks, paired batch callbacks, why a run ended."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator import _compat as kte_compat
from keras_tpu_estimator.inputs import preparation as kte_preparation
from tests.fixtures import models


class Bound(keras.callbacks.Callback):
    """Any callback can bound training: a `stop_step`, a `max_steps_per_execution`."""

    def __init__(self, stop_step=None, max_steps_per_execution=None):
        super().__init__()
        self.stop_step = stop_step
        self.max_steps_per_execution = max_steps_per_execution


class BatchCalls(keras.callbacks.Callback):
    """Records every batch begin and end, in order, for each mode."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def on_train_batch_begin(self, batch, logs=None):
        self.calls.append(("begin", batch))

    def on_train_batch_end(self, batch, logs=None):
        self.calls.append(("end", batch))

    on_test_batch_begin = on_predict_batch_begin = on_train_batch_begin
    on_test_batch_end = on_predict_batch_end = on_train_batch_end


def finite_input(batches, batch_size=16, known=True):
    """`batches` batches; `known=False` hides their number from tf.data (each step checks for the end)."""
    features, labels = models.data(batches * batch_size)

    def input_fn(params):
        dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(params["batch_size"])
        return dataset if known else dataset.filter(lambda features, labels: True)

    return input_fn


def test_a_callback_stop_step_bounds_training_exactly():
    model = models.make_model(k=4)
    recorder = models.ExecutionRecorder()
    model.fit(models.input_fn, callbacks=[Bound(stop_step=6), recorder], verbose=0)
    assert recorder.sizes == [4, 2]
    assert model.global_step == 6
    assert model._driver.ended_by == "stopped"


def test_the_lowest_bound_wins_and_a_cap_sizes_every_execution():
    model = models.make_model(k=4)
    recorder = models.ExecutionRecorder()
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=10), Bound(stop_step=7, max_steps_per_execution=3),
                                          recorder], verbose=0)
    assert recorder.sizes == [3, 3, 1]
    assert model.global_step == 7


def test_a_duration_iterations_per_loop_is_sized_by_the_driver():
    model = models.make_model(k="1s")
    recorder = models.ExecutionRecorder()
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=50), recorder], verbose=0)
    assert recorder.sizes[0] == 1  # no time per step known yet
    assert sum(recorder.sizes) == 50 and len(recorder.sizes) < 50  # later executions grow to fill 1 s


@pytest.mark.parametrize("known", [True, False], ids=["known_size", "unknown_size"])
def test_evaluate_pairs_batch_callbacks_and_ends_with_the_input(known):
    model = models.make_model(k=2)
    calls = BatchCalls()
    model.evaluate(finite_input(5, known=known), callbacks=[calls], verbose=0)
    assert model._runner.modes[kte.ModeKeys.EVAL].input_steps == (5 if known else None)
    # Executions of 2, 2 and 1 steps: the input ends inside the third.
    assert calls.calls == [("begin", 0), ("end", 1), ("begin", 2), ("end", 3), ("begin", 4), ("end", 4)]
    assert model._driver.ended_by == "input"


@pytest.mark.parametrize("known", [True, False], ids=["known_size", "unknown_size"])
def test_an_execution_that_finds_the_input_ended_gets_no_end(known):
    # As Keras and TF1: the last begin, for an execution that ran no step, has no end. With an
    # input of known size the driver knows the input ended and runs nothing, with the same calls.
    model = models.make_model(k=2)
    calls = BatchCalls()
    predictions = model.predict(lambda params: finite_input(4, known=known)(params).map(lambda f, _: f),
                                callbacks=[calls], verbose=0)
    assert len(predictions["y"]) == 64
    assert calls.calls == [("begin", 0), ("end", 1), ("begin", 2), ("end", 3), ("begin", 4)]


def test_steps_end_a_run_before_the_input():
    model = models.make_model(k=4)
    calls = BatchCalls()
    loss = model.evaluate(finite_input(20), steps=6, callbacks=[calls], verbose=0)
    assert calls.calls == [("begin", 0), ("end", 3), ("begin", 4), ("end", 5)]
    assert model._driver.ended_by == "steps"
    assert np.isfinite(loss)


def test_one_fetch_carries_the_global_step_and_the_finite_check():
    model = models.make_model(k=4)
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=4)], verbose=0)
    result = model.train_function(iter(model._runner.distribute_input(models.input_fn, kte.ModeKeys.TRAIN)),
                                  tf.constant(3))
    steps, _, _, _, empty, step, all_finite = result.scalars.numpy()
    assert (steps, empty, step, all_finite) == (3, 0, 7, 1)
    assert model.global_step == 7


def test_an_input_of_known_size_skips_the_end_check_with_the_same_numbers():
    def repeated(params):
        return models.input_fn(params)

    def finite(params):  # the same batches, but the dataset ends: tf.data knows after how many
        return models.input_fn(params).take(1000)

    def unknown(params):  # the same batches; tf.data cannot know how many: each step checks
        return models.input_fn(params).filter(lambda features, labels: True)

    runs = {name: models.make_model(k=4, seed=5) for name in ("repeated", "finite", "unknown")}
    for name, input_fn in (("repeated", repeated), ("finite", finite), ("unknown", unknown)):
        runs[name].fit(input_fn, callbacks=[kte.StopAtStep(steps=10)], verbose=0)
    assert [runs[name]._runner.modes[kte.ModeKeys.TRAIN].input_steps for name in runs] == [math.inf, 1000, None]
    for model in (runs["finite"], runs["unknown"]):
        for name, variable in runs["repeated"].variables_by_name.items():
            np.testing.assert_array_equal(variable.numpy(), model.variables_by_name[name].numpy())


def test_a_repeated_input_that_yields_nothing_is_an_empty_input(caplog):
    def empty_forever(params):  # cardinality says infinite; every epoch is empty
        features, labels = models.data()
        dataset = tf.data.Dataset.from_tensor_slices((features, labels)).filter(lambda f, y: f["id"] < 0)
        return dataset.batch(params["batch_size"], drop_remainder=True).repeat()

    model = models.make_model(k=4)
    model.fit(empty_forever, callbacks=[kte.StopAtStep(steps=10)], verbose=0)
    assert model._runner.modes[kte.ModeKeys.TRAIN].input_steps == math.inf  # what tf.data's cardinality claims
    assert model.global_step == 0
    assert model._driver.ended_by == "input"
    assert "The training input is empty" in caplog.text


def loop_op_types(concrete):
    graph = concrete.graph.as_graph_def()
    return {node.op for node in graph.node} | {n.op for f in graph.library.function for n in f.node_def}


def test_one_step_executions_run_without_a_loop_and_give_the_same_numbers(monkeypatch):
    concretes = []
    bound_call = kte_compat.bound_call
    monkeypatch.setattr(kte_compat, "bound_call", lambda c, *a: concretes.append(c) or bound_call(c, *a))
    one, four = models.make_model(k=1, seed=5), models.make_model(k=4, seed=5)
    for model in (one, four):
        model.fit(finite_input(6), callbacks=[kte.StopAtStep(steps=5)], verbose=0)
    assert ["While" in loop_op_types(c) for c in concretes] == [False, True]
    for name, variable in one.variables_by_name.items():
        np.testing.assert_array_equal(variable.numpy(), four.variables_by_name[name].numpy())
    # Evaluation to the end of a finite input: the one-step form also finds the end.
    assert one.evaluate(finite_input(3), verbose=0, return_dict=True) == pytest.approx(
        four.evaluate(finite_input(3), verbose=0, return_dict=True))
    assert one._driver.ended_by == "input" and "While" not in loop_op_types(concretes[2])


def test_batch_hooks_run_for_callbacks_that_override_them_and_only_then(monkeypatch):
    logged = []
    original = keras.callbacks.CallbackList.on_test_batch_end
    monkeypatch.setattr(keras.callbacks.CallbackList, "on_test_batch_end",
                        lambda self, batch, logs=None: logged.append(batch) or original(self, batch, logs))
    model = models.make_model(k=2)
    model.evaluate(finite_input(4), callbacks=[keras.callbacks.Callback()], verbose=0)
    assert logged == []  # nobody listens: no call, no conversion of the logs
    ends = []
    lambda_callback = keras.callbacks.LambdaCallback(on_test_batch_end=lambda batch, logs: ends.append(batch))
    model.evaluate(finite_input(4), callbacks=[lambda_callback], verbose=0)
    assert logged == ends == [1, 3]

    class OnBatchEnd(keras.callbacks.Callback):  # Keras' on_train_batch_end calls on_batch_end
        def __init__(self):
            super().__init__()
            self.batches = []

        def on_batch_end(self, batch, logs=None):
            self.batches.append(batch)

    on_batch_end = OnBatchEnd()
    model.fit(finite_input(4), callbacks=[on_batch_end], verbose=0)
    assert on_batch_end.batches == [1, 3]


def test_an_input_of_known_size_runs_no_end_check_and_one_batch_no_loop(monkeypatch):
    concretes = []
    bound_call = kte_compat.bound_call
    monkeypatch.setattr(kte_compat, "bound_call", lambda c, *a: concretes.append(c) or bound_call(c, *a))
    model = models.make_model(k=4, seed=5)
    results = {}
    for known in (True, False):
        for batches in (1, 6):
            input_fn = finite_input(batches, known=known)
            results[known, batches] = model.predict(lambda params, f=input_fn: f(params).map(lambda x, _: x),
                                                    verbose=0)["y"]
    ops = [loop_op_types(c) for c in concretes]
    # Known: one batch runs the step alone; six run a loop that never asks whether input is left.
    assert ["While" in o for o in ops] == [False, True, True, True]
    assert ["OptionalHasValue" in o for o in ops] == [False, False, True, True]
    for batches in (1, 6):
        assert len(results[True, batches]) == 16 * batches
        np.testing.assert_array_equal(results[True, batches], results[False, batches])


def test_an_iterator_of_known_size_is_followed_across_epochs(caplog):
    """`steps_per_epoch` keeps one iterator over epochs: its steps left carry over, and its end is found."""
    runs = {}
    for known in (True, False):
        model = runs[known] = models.make_model(k=4, seed=5)
        recorder = models.ExecutionRecorder()
        model.fit(finite_input(10, known=known), steps_per_epoch=4, epochs=5, callbacks=[recorder], verbose=0)
        assert model.global_step == 10 and recorder.sizes == [4, 4, 2]
        assert model._driver.ended_by == "input"
    for name, variable in runs[True].variables_by_name.items():
        np.testing.assert_array_equal(variable.numpy(), runs[False].variables_by_name[name].numpy())


def test_the_input_size_is_used_only_where_a_step_takes_one_element(mirrored):
    """Four replicas take four elements a step (a partial group at the end): the driver checks for the end."""
    cpu, one, four = (models.make_model(seed=5, **kwargs) for kwargs in ({"use_tpu": False}, {}, {"strategy": mirrored}))
    results = [model.evaluate(finite_input(9), verbose=0, return_dict=True) for model in (cpu, one, four)]
    assert [model._runner.modes[kte.ModeKeys.EVAL].input_steps for model in (cpu, one, four)] == [9, 9, None]
    assert results[1] == pytest.approx(results[2], rel=1e-5)
    unknown = models.make_model(seed=5, use_tpu=False).evaluate(finite_input(9, known=False), verbose=0, return_dict=True)
    assert results[0] == pytest.approx(unknown, rel=1e-6)  # the CPU path's mean over its batches


def test_validation_between_epochs_keeps_the_training_iterator_s_count():
    """`steps_per_epoch` with validation: the evaluation's own count does not reset training's."""
    runs = {}
    for known in (True, False):
        model = runs[known] = models.make_model(k=4, seed=5)
        recorder = models.ExecutionRecorder()
        model.fit(finite_input(10, known=known), steps_per_epoch=4, epochs=5, callbacks=[recorder], verbose=0,
                  validation_data=finite_input(3, known=known))
        assert model.global_step == 10 and recorder.sizes == [4, 4, 2]
    for name, variable in runs[True].variables_by_name.items():
        np.testing.assert_array_equal(variable.numpy(), runs[False].variables_by_name[name].numpy())


def test_an_input_shorter_than_its_cardinality_raises_instead_of_losing_steps(monkeypatch):
    monkeypatch.setattr(kte_preparation, "elements", lambda dataset: 20)  # a size tf.data got wrong
    model = models.make_model(k=4)
    with pytest.raises(RuntimeError, match="The input ended before the 12 more steps"):
        model.fit(finite_input(10), callbacks=[kte.StopAtStep(steps=20)], verbose=0)


def test_train_on_batch_inside_fit_leaves_fit_s_input_size_alone():
    """A callback's train_on_batch rebuilds TRAIN with a one-batch input: fit keeps its own size."""
    model = models.make_model(k=1, seed=5)
    features, labels = models.data(64)  # 4 batches of 16 per epoch
    per_epoch = []

    class ExtraStep(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = self.model.global_step

        def on_epoch_end(self, epoch, logs=None):
            per_epoch.append(self.model.global_step - self.start)
            self.model.train_on_batch({k: v[:16] for k, v in features.items()}, labels[:16])

    model.fit(features, labels, epochs=3, batch_size=16, shuffle=False, callbacks=[ExtraStep()], verbose=0)
    assert per_epoch == [4, 4, 4] and model.global_step == 15


def test_a_repeated_input_that_cannot_start_again_raises_instead_of_losing_steps():
    features, labels = models.data(96)

    def input_fn(params):
        rows = iter(range(96))  # one pass, shared by every repeat: tf.data still says infinite
        signature = ({"x": tf.TensorSpec([4], tf.float32), "id": tf.TensorSpec([], tf.int64)},
                     tf.TensorSpec([1], tf.float32))
        generator = lambda: (({"x": features["x"][i], "id": features["id"][i]}, labels[i]) for i in rows)  # noqa: E731
        dataset = tf.data.Dataset.from_generator(generator, output_signature=signature)
        return dataset.repeat().batch(params["batch_size"], drop_remainder=True)

    model = models.make_model(k=4, seed=5)
    with pytest.raises(RuntimeError, match="The input ended although tf.data says it repeats forever"):
        model.fit(input_fn, verbose=0)


class FailAtBatch(keras.callbacks.Callback):
    def on_test_batch_end(self, batch, logs=None):
        raise RuntimeError("stop here")


def test_evaluate_and_predict_release_the_iterator_when_they_end_early():
    """The driver's cached call holds the iterator: an error or a closed prediction generator releases it."""
    model = models.make_model(k=2)
    with pytest.raises(RuntimeError, match="stop here"):
        model.evaluate(finite_input(5, known=True), callbacks=[FailAtBatch()], verbose=0)
    assert model._driver._concrete is None and model._driver._input_left == {}
    batches = model.predict_batches(lambda params: finite_input(4, known=True)(params).map(lambda f, _: f), verbose=0)
    next(batches)
    assert model._driver._concrete is not None
    batches.close()
    assert model._driver._concrete is None and model._driver._input_left == {}
