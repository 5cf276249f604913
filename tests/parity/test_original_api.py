"""The public API checks and defaults are the original TPUEstimator's.

Each case of `tests/fixtures/original_api_cases.py` runs on this library's
`keras_tpu_estimator.estimator` namespace and is compared with
`tests/recorded/original_api_generated.py`, which `scripts/original_api.py` wrote by running the
same case on the original (TF 2.15 + tensorflow-estimator 2.15, on CPU):

- an error case must raise the original's exception type (a builtin exception
  or a `tf.errors` class: `isinstance`; another class: the same name) with a
  message that, normalised, starts with the original's (this library may add
  help after it). Where the original did not raise, this library must not;
- a default case must return the original's value.

`SOURCE_ONLY` lists checks the original makes only on a TPU (or with several
TPU cores), read from its source; the tests at the end hold this library to
those it can reach on CPUs.
"""

import builtins
import types

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from tests.fixtures import original_api_cases as cases
from tests.recorded import original_api_generated as original


def api_for(model_dir) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        estimator=kte.estimator,
        parse_iterations_per_loop=kte.parse_iterations_per_loop,
        build_raw_supervised_input_receiver_fn=kte.estimator.experimental.build_raw_supervised_input_receiver_fn,
        model_dir=str(model_dir),
    )


def is_of_type(error: BaseException, name: str) -> bool:
    """`error` is of the type the original raised (recorded by `scripts/original_api.py`)."""
    if name.startswith("tf.errors."):
        return isinstance(error, getattr(tf.errors, name.removeprefix("tf.errors.")))
    builtin = getattr(builtins, name, None)
    if isinstance(builtin, type) and issubclass(builtin, BaseException):
        return isinstance(error, builtin)
    return any(kind.__name__ == name for kind in type(error).__mro__)


def assert_raises_like(run, expected: list[str], model_dir: str, compare: str = "message") -> None:
    """`run()` raises `expected = [type, message]`: the same type, and a message starting with it."""
    with pytest.raises(Exception) as info:
        run()
    error = info.value
    got = f"{type(error).__name__}: {cases.normalise(str(error), model_dir)}"
    if compare == "any":
        return
    assert is_of_type(error, expected[0]), f"expected {expected[0]}, got {got}"
    if compare == "message":
        message = cases.normalise(str(error), model_dir)
        assert message.startswith(expected[1]), f"expected {expected[0]}: {expected[1]!r}, got {got!r}"


def test_the_recorded_results_are_current():
    """`tests/recorded/original_api_generated.py` is current: rerun `scripts/original_api.py` after editing cases."""
    assert list(original.ERRORS) == list(cases.ERRORS)
    assert list(original.DEFAULTS) == list(cases.DEFAULTS)
    assert cases.TYPE_ONLY | cases.ANY_ERROR <= {n for n, e in original.ERRORS.items() if e}


# Where this library deliberately differs (README: "Where the API deliberately differs"):
# case -> (why, what this library does instead: None accepts, else (type, message start)).
DELIBERATE = {
    "constructor.config=estimator.RunConfig()": (
        "one RunConfig class serves both namespaces (it carries a TPUConfig)", None),
    "tpu.RunConfig.tpu_config=1 (not checked)": (
        "refused at once instead of failing later", ("TypeError", "`tpu_config` must be a keras_tpu_estimator.TPUConfig")),
    "train.use_tpu.host_call with tf.compat.v1.summary": (
        "host_call runs in a TF1 graph on the host, where TF1 summaries work", None),
    "train.use_tpu.input_fn with a dynamic batch dimension": (
        "only a TPUStrategy needs static shapes (refused there before tracing)", None),
    "train.use_tpu.PER_SHARD_V1 input_fn returns a Dataset": (
        "input_fn is called once per replica, as the original; their datasets are interleaved", None),
    "evaluate.use_tpu.steps=None": ("evaluates to the end of the input, padded", None),
    "evaluate.use_tpu.EstimatorSpec": ("a plain spec evaluates on the strategy path too", None),
    "predict.use_tpu.EstimatorSpec": ("a plain spec predicts on the strategy path too", None),
    "predict.use_tpu.Tensor predictions": ("one prediction tensor works on every path (the original's TODO)", None),
    "tpu.RunConfig.TF_CONFIG{cluster, no task}": (
        "MultiWorkerMirroredStrategy clusters may list only workers (worker 0 is chief); the task is still required",
        ("ValueError", 'If "cluster" is set in TF_CONFIG, task type must be set.')),
    "TPUEstimatorSpec.mode=train without train_op": (
        "a Keras optimizer may train it; 'Missing train_op.' comes when the model has none", None),
    "EstimatorSpec.mode=train without train_op": (
        "a Keras optimizer may train it; 'Missing train_op.' comes when the model has none", None),
    # The original's Saver failed to restore (tf.errors.OutOfRangeError, "Read less bytes than
    # requested"); here the newest checkpoint that can be read is restored, with a warning.
    "train.cpu.truncated newest checkpoint": (
        "the next older checkpoint (model.ckpt-1) is restored with a warning", None),
    "evaluate.cpu.truncated newest checkpoint": (
        "the next older checkpoint (model.ckpt-1) is evaluated with a warning", None),
    "predict.cpu.truncated newest checkpoint": (
        "the next older checkpoint (model.ckpt-1) predicts with a warning", None),
}


def test_deliberate_differences_are_recorded_differences():
    for name, (_, ours) in DELIBERATE.items():
        assert original.ERRORS[name] != (ours and list(ours)), f"{name} is the original's behaviour"


@pytest.mark.parametrize("name", list(cases.ERRORS))
def test_error(name, tmp_path):
    api = api_for(tmp_path)
    case = cases.ERRORS[name]
    expected = original.ERRORS[name]
    if name in DELIBERATE:
        expected = DELIBERATE[name][1] and list(DELIBERATE[name][1])
    if expected is None:
        case(api)  # the original accepted this: so must this library
        return
    compare = "any" if name in cases.ANY_ERROR else "type" if name in cases.TYPE_ONLY else "message"
    assert_raises_like(lambda: case(api), expected, api.model_dir, compare)


@pytest.mark.parametrize("name", list(cases.DEFAULTS))
def test_default(name, tmp_path):
    assert cases.DEFAULTS[name](api_for(tmp_path)) == original.DEFAULTS[name]


# --- checks the original makes only with a TPU ----------------------------------------------------
# Read from the original's source, not run: the message (placeholders `{}`) and the condition.
# "L<n>" is a line of /work/shared/reference/tpu_estimator.py.txt; tpu_context.py lines are of
# tensorflow_estimator/python/estimator/tpu/tpu_context.py (tensorflow-estimator 2.15).
SOURCE_ONLY = {
    "train_batch_size not divisible": (
        "ValueError",
        "train batch size {} must be divisible by number of replicas {}",
        "tpu_context.py L741-743",
        "TRAIN on TPU (not BROADCAST): train_batch_size % num_replicas != 0",
    ),
    "eval_batch_size not divisible": (
        "ValueError",
        "eval batch size {} must be divisible by number of replicas {}",
        "tpu_context.py L752-754",
        "EVAL on TPU (not BROADCAST): eval_batch_size % num_replicas != 0",
    ),
    "predict_batch_size not divisible": (
        "ValueError",
        "predict batch size {} must be divisible by number of replicas {}",
        "tpu_context.py L776-778",
        "PREDICT on TPU (not BROADCAST): predict_batch_size % num_replicas != 0",
    ),
    "num_shards mismatch": (
        "ValueError",
        "TPUConfig.num_shards is not set correctly. According to TPU system metadata for "
        "Tensorflow master ({}): num_replicas should be ({}), got ({}). For "
        "non-model-parallelism, num_replicas should be the total num of TPU cores in the "
        "system. For model-parallelism, the total number of TPU cores should be "
        "num_cores_per_replica * num_replicas. Please set it accordingly or leave it as `None`",
        "tpu_context.py L712-722",
        "on TPU: TPUConfig.num_shards set and != the replicas the TPU system has",
    ),
    "real batch size": (
        "tf.errors.InvalidArgumentError",
        "The real batch size should not be greater than batch_size.",
        "L4140",
        "PREDICT on TPU: a batch from input_fn has more rows than params['batch_size']",
    ),
    "NaN variable": (
        "tf.errors.InvalidArgumentError",
        "Gradient for {} is NaN",
        "L230-231",
        "after each TPU train/eval/predict loop (not BROADCAST): a trainable variable holds NaN/Inf",
    ),
    "CrossShardOptimizer": (
        "ValueError",
        "CrossShardOptimizer must be used for model training on TPUs.",
        "L3797-3798",
        "TPU TRAIN with control flow v1 and num_replicas > 1: no CrossReplicaSum op in the graph",
    ),
}
# CrossShardOptimizer: not held here (replicas' gradients are this library's to sum).


def _source_only(name: str, *args) -> list[str]:
    kind, message, _, _ = SOURCE_ONLY[name]
    return [kind, message.format(*args) if args else message]


def _estimator_on(strategy, model_dir, model_fn=None, **kwargs):
    config = kte.estimator.tpu.RunConfig(
        model_dir=str(model_dir),
        tpu_config=kte.estimator.tpu.TPUConfig(iterations_per_loop=1),
        train_distribute=strategy,
    )
    api = api_for(model_dir)
    kwargs = {"train_batch_size": 4, "eval_batch_size": 4, "predict_batch_size": 4, **kwargs}
    return kte.estimator.tpu.TPUEstimator(
        model_fn or cases.model_fn_for(api), config=config, use_tpu=True, **kwargs
    )


@pytest.mark.parametrize("mode", ["train", "eval", "predict"])
def test_batch_size_not_divisible_by_the_replicas(mode, mirrored, tmp_path):
    est = _estimator_on(mirrored, tmp_path, **{f"{mode}_batch_size": 6})
    run = {
        "train": lambda: est.train(cases.input_fn, max_steps=1),
        "eval": lambda: est.evaluate(cases.input_fn, steps=1),
        "predict": lambda: list(est.predict(cases.predict_input_fn)),
    }[mode]
    assert_raises_like(run, _source_only(f"{mode}_batch_size not divisible", 6, 4), str(tmp_path))


def test_num_shards_not_the_replicas(tmp_path):
    api = api_for(tmp_path)
    config = cases.run_config(api, use_tpu=True, num_shards=2)
    est = cases.estimator_for(api, use_tpu=True, config=config)
    kind, message = _source_only("num_shards mismatch")
    first_sentence = message[: message.index(". ") + 1]  # "TPUConfig.num_shards is not set correctly."
    assert_raises_like(lambda: est.train(cases.input_fn, max_steps=1), [kind, first_sentence], str(tmp_path))


def test_a_predict_batch_larger_than_batch_size(tmp_path):
    api = api_for(tmp_path)

    def oversized_input_fn(params):
        return cases.predict_input_fn({**params, "batch_size": 2 * params["batch_size"]})

    est = cases.estimator_for(api, use_tpu=True, predict_batch_size=1)
    run = lambda: list(est.predict(oversized_input_fn))  # noqa: E731
    assert_raises_like(run, _source_only("real batch size"), str(tmp_path))


def test_a_nan_variable_after_a_tpu_training_loop(tmp_path):
    api = api_for(tmp_path)

    def nan_spec(mode, loss, **_):
        w = tf.compat.v1.get_variable("w")
        step = tf.compat.v1.train.get_global_step()
        train_op = tf.group(w.assign(w * np.nan), step.assign_add(1))
        return api.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    est = cases.estimator_for(api, cases.model_fn_for(api, nan_spec), use_tpu=True)
    kind, message = _source_only("NaN variable")
    with pytest.raises(Exception) as info:
        est.train(cases.input_fn, max_steps=1)
    assert is_of_type(info.value, kind), repr(info.value)
    assert message.format("w") in str(info.value)
