"""Programs run unchanged give the original TPUEstimator's numbers (TF1 execution semantics).

Each program of `tests/fixtures/original_programs.py` runs on this library's facade and
is compared with `tests/recorded/original_numbers_generated.py`, which `scripts/original_numbers.py`
wrote by running the same code on the original (TF 2.15, `use_tpu=False`).
`use_tpu=False` runs the original's CPU path; the strategy path (`use_tpu=True`)
runs under the `strategy` fixture, the default strategy and `MirroredStrategy`
over 4 logical CPUs, with the same global batches, so it gives the same numbers
wherever the original's do not depend on a partial batch.
"""

import dataclasses
import logging

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from tests.fixtures import models
from tests.fixtures import original_programs as programs
from tests.recorded import original_numbers_generated as original

# The programs see this library through the one-line swap `tf.compat.v1.estimator` ->
# `keras_tpu_estimator.estimator`, exactly as the original's run saw `tf.compat.v1.estimator`.
EST = programs.estimator_namespace(kte.estimator)
RTOL = 2e-6  # float32 results of two TensorFlow versions


def assert_close(actual, expected, rtol=RTOL, atol=1e-7):
    if isinstance(expected, dict):
        assert sorted(actual) == sorted(expected)
        for key, value in expected.items():
            assert_close(actual[key], value, rtol, atol)
    else:
        np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=rtol, atol=atol)


def estimator(program, model_dir, strategy=None):
    """The original's CPU path (`use_tpu=False`), or the strategy path under `strategy`."""
    if strategy is None:
        return programs.build_estimator(EST, program, str(model_dir))
    config = kte.RunConfig(
        model_dir=str(model_dir),
        tf_random_seed=programs.SEED,
        tpu_config=kte.TPUConfig(iterations_per_loop=program.iterations_per_loop),
        train_distribute=strategy,
    )
    return kte.TPUEstimator(
        program.model_fn, config=config, params=dict(program.params), use_tpu=True,
        train_batch_size=program.train_batch_size, eval_batch_size=program.eval_batch_size,
        predict_batch_size=program.predict_batch_size,
    )


def trained(program, model_dir, strategy=None):
    est = estimator(program, model_dir, strategy)
    est.train(program.train_input_fn, max_steps=program.max_steps)
    return est


def predictions(est, program):
    return list(est.predict(program.predict_input_fn))


@pytest.fixture(params=["cpu_path", "default", "mirrored4"])
def path(request):
    """None for the original's CPU path (`use_tpu=False`), else the strategy of the strategy path."""
    if request.param == "cpu_path":
        return None
    if request.param == "default":
        return tf.distribute.get_strategy()
    return request.getfixturevalue("mirrored")


# ------------------------------------------------------------------ initializers once
def test_init_from_checkpoint_in_model_fn_initialises_once(tmp_path):
    ckpt = programs.write_init_checkpoint(str(tmp_path / "init" / "model.ckpt"))
    program = programs.init_from_checkpoint_program(EST, ckpt)
    est = trained(program, tmp_path / "model")
    expected = original.INIT_FROM_CHECKPOINT
    assert_close(est.evaluate(program.eval_input_fn, steps=program.eval_steps), expected["evaluate"])
    assert_close(est.get_variable_value("w"), expected["w"])
    assert_close(predictions(est, program)[0]["y"], expected["first_prediction"])
    # A checkpoint in model_dir wins over init_from_checkpoint, as in the original.
    est.train(program.train_input_fn, max_steps=8)
    assert_close(est.get_variable_value("w"), expected["resumed"]["w"])
    assert est.get_variable_value("global_step") == 8


def test_init_from_checkpoint_once_on_the_strategy_path(strategy, tmp_path):
    """Every row is the same, so a batch of 4 trains exactly like the original's batch of 1."""
    ckpt = programs.write_init_checkpoint(str(tmp_path / "init" / "model.ckpt"))
    program = programs.init_from_checkpoint_program(EST, ckpt)
    program = type(program)(**{**vars(program), "train_batch_size": 4, "eval_batch_size": 4,
                               "predict_batch_size": 4})
    est = trained(program, tmp_path / "model", strategy)
    assert_close(est.get_variable_value("w"), original.INIT_FROM_CHECKPOINT["w"])
    model = kte.EstimatorModel(program.model_fn, params=dict(program.params), strategy=strategy,
                               train_batch_size=4)
    model.fit(program.train_input_fn, callbacks=[kte.StopAtStep(steps=5)], verbose=0)
    assert_close(model.variables_by_name["w"].numpy(), original.INIT_FROM_CHECKPOINT["w"])
    # A later build (another mode) does not initialise the trained variables again.
    model.evaluate(program.eval_input_fn, batch_size=4, verbose=0)
    assert_close(model.variables_by_name["w"].numpy(), original.INIT_FROM_CHECKPOINT["w"])


# ------------------------------------------------------------------ only what is fetched runs
def test_a_train_op_built_in_every_mode_runs_only_in_training(strategy, tmp_path):
    program = programs.unfetched_train_op_program(EST)
    expected = original.UNFETCHED_TRAIN_OP
    est = trained(program, tmp_path, strategy)
    results = [est.evaluate(program.eval_input_fn, steps=program.eval_steps) for _ in range(3)]
    for result, want in zip(results, expected["evaluate"], strict=True):
        assert_close(result, want)
    rows = predictions(est, program)
    assert_close([row["y"] for row in rows[: len(expected["predictions"]["y"])]], expected["predictions"]["y"])
    for name, value in expected["variables"].items():
        assert_close(est.get_variable_value(name), value)


def test_a_stateful_op_runs_only_when_fetched(strategy, tmp_path):
    program = programs.counter_program(EST)
    expected = original.COUNTER
    est = trained(program, tmp_path, strategy)

    def counters():
        return {n: int(est.get_variable_value(n)) for n in ("c", "d", "global_step")}

    assert counters() == expected["after_train"]
    assert_close(est.evaluate(program.eval_input_fn, steps=program.eval_steps), expected["evaluate"])
    assert counters() == expected["after_evaluate"]
    rows = predictions(est, program)
    assert_close([row["y"] for row in rows], expected["predictions"]["y"])
    assert counters() == expected["after_predict"]
    assert est.get_variable_names() == expected["variable_names"]


def test_keras_counter_model_sees_the_same(strategy):
    """The Keras face: fit, evaluate and predict never run the unfetched `assign_add`."""
    program = programs.counter_program(EST)
    model = kte.EstimatorModel(
        program.model_fn, strategy=strategy, train_batch_size=4, eval_batch_size=4,
        predict_batch_size=4, steps_per_execution=3,
    )
    model.fit(program.train_input_fn, callbacks=[kte.StopAtStep(steps=7)], verbose=0)
    model.evaluate(program.eval_input_fn, steps=2, verbose=0)
    model.predict(program.predict_input_fn, verbose=0)
    values = {name: int(model.variables_by_name[name].numpy()) for name in ("c", "d")}
    assert values == {"c": 0, "d": 7}
    assert model.global_step == 7


# ------------------------------------------------------------------ evaluate's result
def _scalar_events(logdir):
    """{tag: (step, value)} of the last value of each tag."""
    return {value.tag: (step, float(tf.make_ndarray(value.tensor)))
            for step, value in models.summary_values(logdir) if value.tag != "checkpoint_path"}


def test_evaluate_returns_and_writes_every_eval_metric(path, tmp_path):
    program = programs.eval_metrics_program(EST)
    expected = original.EVAL_METRICS
    est = trained(program, tmp_path, path)
    result = est.evaluate(program.eval_input_fn, steps=program.eval_steps)
    assert_close(result, expected["evaluate"])
    assert isinstance(result["global_step"], np.int64)
    written = _scalar_events(tmp_path / "eval")
    for event in expected["eval_events"]:
        if event["kind"] == "simple_value":
            step, value = written[event["tag"]]
            assert step == event["step"]
            assert value == pytest.approx(event["value"], rel=RTOL)


def test_evaluate_and_predict_without_a_checkpoint_run_initialised_variables(path, tmp_path, caplog):
    program = programs.eval_metrics_program(EST)
    expected = original.NO_CHECKPOINT
    est = estimator(program, tmp_path, path)
    with caplog.at_level(logging.INFO):
        assert_close(est.evaluate(program.eval_input_fn, steps=program.eval_steps), expected["evaluate"])
        rows = predictions(est, program)
    assert_close([row["probabilities"] for row in rows], expected["predictions"]["probabilities"])
    for message in expected["log_messages"]:
        assert message["message"].format(model_dir=tmp_path) in caplog.text
    assert est.latest_checkpoint() is None
    assert sorted(p.name for p in tmp_path.iterdir()) == expected["model_dir_files"]


def test_eval_metric_ops_run_on_the_cpu_path(tmp_path):
    program = programs.eval_metric_ops_program(EST)
    est = trained(program, tmp_path / "cpu")
    assert_close(est.evaluate(program.eval_input_fn, steps=program.eval_steps),
                 original.EVAL_METRIC_OPS_CPU["evaluate"])
    # Twice: each evaluation starts its metrics from zero, as each TF1 session did.
    assert_close(est.evaluate(program.eval_input_fn, steps=program.eval_steps),
                 original.EVAL_METRIC_OPS_CPU["evaluate"])
    tpu = trained(program, tmp_path / "tpu", tf.distribute.get_strategy())
    with pytest.raises(RuntimeError, match="eval_metric_ops cannot run on the TPU path"):
        tpu.evaluate(program.eval_input_fn, steps=program.eval_steps)


def test_evaluate_loss_is_the_mean_of_the_steps_losses(tmp_path):
    program = programs.partial_eval_loss_program(EST)
    expected = original.PARTIAL_EVAL_LOSS
    est = trained(program, tmp_path)
    assert_close(est.evaluate(program.eval_input_fn), expected["evaluate"])


# ------------------------------------------------------------------ a repeated input
def finite_copy(input_fn, global_batch_size, steps):
    """`input_fn`'s dataset cut (`take`) to `steps` global batches: the same batches, an input that can end.

    `params["batch_size"]` may be a replica's share of `global_batch_size` (a strategy's input
    pipeline); the cut is then that many more batches, the same rows.
    """

    def finite_input_fn(params):
        batches, rest = divmod(steps * global_batch_size, params["batch_size"])
        assert rest == 0, params
        return input_fn(params).take(batches)

    return finite_input_fn


@pytest.mark.parametrize("train_input", ["repeated", "finite"])
def test_a_repeated_input_trains_as_the_original_and_as_an_input_that_can_end(train_input, path, tmp_path):
    """`dataset.repeat()` (read without a per-step end-of-input check) crossing epoch boundaries.

    The run `scripts/original_numbers.py` recorded: batches of 12 over 16 repeated rows (all but
    the first straddle an epoch boundary), 3 steps per execution, `train(max_steps=7)`, then
    `train(steps=5)` (the input restarts), then `evaluate()`. The same batches from an input that
    can end (`finite`) give the same numbers.
    """
    expected = original.REPEATED_INPUT
    run = expected["run"]
    program = dataclasses.replace(
        getattr(programs, run["program"])(EST),
        **{key: run[key] for key in ("train_batch_size", "iterations_per_loop", "max_steps")},
    )
    repeated = program.train_input_fn({"batch_size": program.train_batch_size})
    assert repeated.cardinality() == tf.data.INFINITE_CARDINALITY
    if train_input == "finite":
        finite_input_fn = finite_copy(program.train_input_fn, program.train_batch_size, program.max_steps)
        assert finite_input_fn({"batch_size": program.train_batch_size}).cardinality() == program.max_steps
        program = dataclasses.replace(program, train_input_fn=finite_input_fn)
    est = estimator(program, tmp_path, path)
    est.train(program.train_input_fn, max_steps=program.max_steps)
    assert est.get_variable_names() == sorted(expected["after_max_steps"])
    for name, value in expected["after_max_steps"].items():
        assert_close(est.get_variable_value(name), value, rtol=1e-5)
    est.train(program.train_input_fn, steps=run["then_steps"])
    for name, value in expected["after_steps"].items():
        assert_close(est.get_variable_value(name), value, rtol=1e-5)
    assert_close(est.evaluate(program.eval_input_fn), expected["evaluate"], rtol=1e-5)


# ------------------------------------------------------------------ metrics, Keras, BERT
@pytest.mark.parametrize("fetch_metric", [False, True])
def test_tf1_metrics_in_a_training_model_fn(fetch_metric, strategy, tmp_path):
    program = programs.metrics_in_train_program(EST, fetch_metric=fetch_metric)
    expected = original.METRICS_IN_TRAIN["fetched" if fetch_metric else "created_only"]
    est = trained(program, tmp_path, strategy)
    for name, value in expected.items():
        assert_close(est.get_variable_value(name), value)


def trained_like_the_original(est, program, expected):
    """Every variable of `expected["variables"]` and `evaluate()` equal the original's."""
    for name, value in expected["variables"].items():
        assert_close(est.get_variable_value(name), value, rtol=1e-5)
    assert_close(est.evaluate(program.eval_input_fn), expected["evaluate"], rtol=1e-5)


def test_a_keras_model_built_in_model_fn_keeps_its_names(strategy, tmp_path):
    program = programs.keras_in_model_fn_program(EST)
    expected = original.KERAS_IN_MODEL_FN
    est = trained(program, tmp_path, strategy)
    assert est.get_variable_names() == sorted(expected["variables"])
    trained_like_the_original(est, program, expected)


def test_keras_batch_norm_updates_run_only_if_fetched_as_in_the_original(strategy, tmp_path):
    """The original's Keras layers kept their updates out of UPDATE_OPS: the statistics stay put."""
    program = programs.keras_batch_norm_program(EST)
    expected = original.KERAS_BATCH_NORM
    est = trained(program, tmp_path, strategy)
    for name in ("batch_normalization/moving_mean", "batch_normalization/moving_variance"):
        assert_close(est.get_variable_value(name), expected["variables"][name])
    if strategy.num_replicas_in_sync > 1:
        return  # batch statistics per replica (1 row each here), as per TPU core: other numbers
    trained_like_the_original(est, program, expected)


def test_exponential_moving_average_equals_the_original(path, tmp_path):
    """ResNet/EfficientNet-style EMA in train_op: the shadow variables train as the original's."""
    program = programs.moving_average_program(EST)
    expected = original.MOVING_AVERAGE
    est = trained(program, tmp_path, path)
    assert est.get_variable_names() == sorted(expected["variables"])
    trained_like_the_original(est, program, expected)


def test_bert_like_program_equals_the_original_and_a_session_loop(tmp_path):
    ckpt = programs.write_bert_checkpoint(str(tmp_path / "init" / "bert.ckpt"))
    program = programs.bert_like_program(EST, ckpt)
    expected = original.BERT_LIKE
    est = trained(program, tmp_path / "model")
    session = programs.bert_session_loop(ckpt)
    for name, value in expected["variables"].items():
        assert_close(est.get_variable_value(name), value, atol=1e-5, rtol=1e-5)
        assert_close(est.get_variable_value(name), session["variables"][name], atol=1e-5, rtol=1e-5)
    result = est.evaluate(program.eval_input_fn)
    assert_close(result, expected["evaluate"], rtol=1e-5)
    for key in ("eval_accuracy", "eval_loss", "loss"):
        assert result[key] == pytest.approx(session["evaluate"][key], rel=1e-5)
    rows = predictions(est, program)
    assert_close([row["probabilities"] for row in rows], expected["predictions"], atol=1e-5, rtol=1e-5)


def test_bert_like_program_on_replicas_trains_the_same_weights(mirrored, tmp_path):
    """4 replicas: same weights; the weighted metrics see exactly the real rows."""
    ckpt = programs.write_bert_checkpoint(str(tmp_path / "init" / "bert.ckpt"))
    program = programs.bert_like_program(EST, ckpt)
    expected = original.BERT_LIKE
    est = trained(program, tmp_path / "model", mirrored)
    for name, value in expected["variables"].items():
        assert_close(est.get_variable_value(name), value, atol=1e-5, rtol=1e-5)
    result = est.evaluate(program.eval_input_fn)
    for key in ("eval_accuracy", "eval_loss"):
        assert result[key] == pytest.approx(expected["evaluate"][key], rel=1e-5)


@pytest.mark.parametrize("per_step", [1, 2], ids=["one_per_step", "two_per_step"])
def test_host_functions_read_the_global_step_the_original_showed_them(tmp_path, per_step):
    """CPU path: `get_global_step()` in host_call's fn (train, evaluate) and in a metric_fn."""
    seen = programs.host_global_step_run(EST, str(tmp_path), per_step)
    expected = original.HOST_GLOBAL_STEP[f"{'one' if per_step == 1 else 'two'}_per_step"]
    for key in ("train", "eval"):
        assert [step for step, _ in seen[key]] == [step for step, _ in expected[key]], key
        assert_close([loss for _, loss in seen[key]], [loss for _, loss in expected[key]])
    assert seen["evaluate"] == pytest.approx(expected["evaluate"], rel=1e-5)


def test_session_hooks_see_what_the_original_showed_them(tmp_path):
    """CPU path: a hook run per step, TF1 fetch timing, StopAtStepHook, LoggingTensorHook, listeners."""
    seen = programs.session_hooks_run(EST, str(tmp_path))
    expected = original.SESSION_HOOKS
    for key in ("train_calls", "train_after", "eval_calls"):
        assert seen[key] == expected[key], key
    for key in ("train_fetched", "eval_fetched"):
        assert [step for step, _ in seen[key]] == [step for step, _ in expected[key]], key
        assert_close([loss for _, loss in seen[key]], [loss for _, loss in expected[key]])
    assert_close(seen["logged_losses"], expected["logged_losses"])
    # The original also saved a checkpoint at step 0 when training began; this library saves
    # after steps only (README, "Checkpoint timing"), so its listeners see the rest.
    assert seen["listener"] == [call for call in expected["listener"] if call[1] != 0]


def test_cpu_path_predictions_that_depend_on_the_batch_are_the_originals(tmp_path):
    """use_tpu=False: model_fn sees each batch's real rows (the last has 2 of 4), not a padded batch.

    Padding the last batch to 4 rows gave [3.75, 4.75] for the centred rows and 4 for the row
    count, with no error.
    """
    seen = programs.batch_dependent_predict_run(EST, str(tmp_path))
    expected = original.BATCH_DEPENDENT_PREDICT
    assert seen == expected


def test_host_call_in_training_on_a_partial_last_batch_is_the_originals(tmp_path):
    """use_tpu=False, 3 steps per execution, batches of 4, 4, 2: the last execution's steps differ in
    rows. The host tensors could not be stacked (an InvalidArgumentError); they now travel ragged
    (flat, with each step's shape), and fn sees each step's real rows, as in the original.
    """
    seen = programs.partial_train_batch_host_call_run(EST, str(tmp_path))
    expected = original.PARTIAL_TRAIN_BATCH_HOST_CALL
    assert seen["host_rows"] == expected["host_rows"] and seen["global_step"] == expected["global_step"]
    assert seen["w"] == pytest.approx(expected["w"], rel=1e-6)


def _assert_nested_close(got, expected, rel=1e-5):
    if isinstance(expected, dict):
        assert sorted(got) == sorted(expected)
        for key in expected:
            _assert_nested_close(got[key], expected[key], rel)
    elif isinstance(expected, list):
        assert len(got) == len(expected), (got, expected)
        for a, b in zip(got, expected, strict=True):
            _assert_nested_close(a, b, rel)
    elif isinstance(expected, float):
        assert got == pytest.approx(expected, rel=rel, abs=1e-6)
    else:
        assert got == expected


def test_host_call_tensors_of_any_shape_on_the_cpu_path_are_the_originals(tmp_path):
    """use_tpu=False, K=3, batches of 4, 4, 2: a scalar, the rows, a `[2B]`, a transposed tensor and one
    of unknown rank reach host_call as model_fn made them, in every mode (the original's CPU path
    called fn in the step's graph), with a per-batch scalar first among the features. They were
    refused (the scalar), failed to stack (the others, on the partial batch) or to build (the
    unknown rank; the scalar feature, taken for the batch's rows).
    """
    seen = programs.cpu_host_tensors_run(EST, str(tmp_path))
    expected = original.CPU_HOST_TENSORS
    _assert_nested_close(seen, expected)


def test_cpu_path_prediction_details_are_the_originals(tmp_path):
    """use_tpu=False predicts as an Estimator: model_fn gets no labels (it got the dataset's), only the
    `predict_keys` predictions run (another one that fails when run failed the call), and a per-batch
    scalar comes back as a NumPy scalar or `bytes` (it came back as a 0-d array).
    """
    seen = programs.cpu_predict_details_run(EST, str(tmp_path))
    assert seen == original.CPU_PREDICT_DETAILS


def test_every_cpu_path_step_counts_once_in_the_loss_as_in_the_original(tmp_path):
    """use_tpu=False weighted each step's loss by the rows of the first batched feature, so a batch whose
    first feature was empty (a boolean_mask) dropped out of the mean: 52.0 where the original gave the
    mean of the three batches' losses.
    """
    seen = programs.empty_first_feature_eval_run(EST, str(tmp_path))
    assert seen["global_step"] == original.EMPTY_FIRST_FEATURE_EVAL["global_step"]
    assert seen["loss"] == pytest.approx(original.EMPTY_FIRST_FEATURE_EVAL["loss"], rel=1e-6)


@pytest.mark.parametrize("batch_size", [None, 4], ids=["no_batch_size", "batch_size_4"])
def test_the_batch_size_is_advice_on_the_cpu_path_as_in_the_original(batch_size, tmp_path):
    """use_tpu=False: without batch sizes params has no 'batch_size' (the bridge refused to call
    input_fn); with 4, an input_fn that batches by 8 trains, evaluates and predicts on its 8-row
    batches (the bridge refused them). Weights, metrics and predictions are the original's.
    """
    seen = programs.advisory_batch_size_run(EST, str(tmp_path), batch_size)
    expected = original.ADVISORY_BATCH_SIZE["none" if batch_size is None else "four"]
    _assert_nested_close(seen, expected)
