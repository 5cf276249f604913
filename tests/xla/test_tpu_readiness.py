"""`check_tpu_compatibility`: what a TPU would refuse, found with XLA on this CPU; the model untouched."""

import dataclasses
import inspect
import json
import os
import pathlib
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = __file__


def readme_model_fn():
    """The `model_fn` of README.md's Quickstart, as written there."""
    section = (ROOT / "README.md").read_text().split("## Quickstart", 1)[1]
    code = section.split("```python", 1)[1].split("def input_fn", 1)[0]
    namespace = {"tf": tf, "kte": kte}
    exec(compile(code, "README.md", "exec"), namespace)
    return namespace["model_fn"]


def notebook_namespace():
    """`make_data`, `input_fn`, `predict_input_fn`, `model_fn` and `params` of notebooks/quickstart.ipynb."""
    cells = json.loads((ROOT / "notebooks" / "quickstart.ipynb").read_text())["cells"]
    namespace = {"np": np, "tf": tf, "kte": kte}
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and ("def input_fn" in source or "def model_fn" in source):
            exec(compile(source, "quickstart.ipynb", "exec"), namespace)
    return namespace


def input_fn(params, drop_remainder=True):
    x = np.random.RandomState(0).randn(256, 4).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [3.0], [0.5]], np.float32)
    dataset = tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat()
    return dataset.batch(params["batch_size"], drop_remainder=drop_remainder)


def dynamic_input_fn(params):
    return input_fn(params, drop_remainder=False)


def linear(features, labels, mode):
    w = tf.compat.v1.get_variable("w", [4, 1])
    predictions = tf.matmul(features["x"], w)
    if mode == kte.ModeKeys.PREDICT:
        return kte.TPUEstimatorSpec(mode, predictions={"y": predictions})
    loss = tf.reduce_mean(tf.square(predictions - labels))
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
        loss, global_step=tf.compat.v1.train.get_global_step()
    )
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def py_function_model_fn(features, labels, mode, params):
    doubled = tf.py_function(lambda x: x * 2, [features["x"]], tf.float32)  # PY_FUNCTION_LINE
    doubled.set_shape(features["x"].shape)
    return linear({"x": doubled}, labels, mode)


def string_model_fn(features, labels, mode, params):
    text = tf.strings.as_string(features["x"])  # STRING_LINE
    length = tf.cast(tf.strings.length(text), tf.float32)
    return linear({"x": features["x"] + 0.0 * length}, labels, mode)


def outside_compilation_model_fn(features, labels, mode, params):
    def on_host(x):
        return tf.cast(tf.strings.length(tf.strings.as_string(x)), tf.float32)

    length = tf.compat.v1.tpu.outside_compilation(on_host, features["x"])
    return linear({"x": features["x"] + 0.0 * length}, labels, mode)


def segment_sum_model_fn(features, labels, mode, params):
    ids = tf.zeros([params["batch_size"]], tf.int32)
    total = tf.math.segment_sum(features["x"], ids)  # SEGMENT_LINE
    return linear({"x": features["x"] + 0.0 * tf.reduce_sum(total)}, labels, mode)


def data_dependent_shape_model_fn(features, labels, mode, params):
    count = tf.cast(tf.reduce_max(tf.abs(features["x"])), tf.int32)
    extra = tf.reduce_sum(tf.cast(tf.range(count), tf.float32))  # RANGE_LINE: a shape from the data
    return linear({"x": features["x"] + 0.0 * extra}, labels, mode)


def float64_model_fn(features, labels, mode, params):
    wide = tf.cast(features["x"], tf.float64) * 2.0  # FLOAT64_LINE
    return linear({"x": tf.cast(wide, tf.float32)}, labels, mode)


def keras_optimizer_model_fn(features, labels, mode, params):
    w = tf.compat.v1.get_variable("w", [4, 1])
    predictions = tf.matmul(features["x"], w)
    if mode == kte.ModeKeys.PREDICT:
        return kte.TPUEstimatorSpec(mode, predictions={"y": predictions})
    return kte.TPUEstimatorSpec(mode, loss=tf.reduce_mean(tf.square(predictions - labels)))


def line_of(function, marker):
    lines, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(lines) if marker in line)


def make_model(model_fn, **kwargs):
    sizes = {"train_batch_size": 64, "eval_batch_size": 64, "predict_batch_size": 64}
    return kte.EstimatorModel(model_fn, params={}, **{**sizes, **kwargs})


def messages(report, mode):
    return [message for m, message in report.problems if m == mode]


def test_the_readme_quickstart_model_compiles_in_every_mode():
    report = make_model(readme_model_fn()).check_tpu_compatibility(input_fn)
    assert report.ok and report.problems == () and report.warnings == ()
    assert report.modes == ("train", "eval", "infer") and report.cores == 8
    assert dict(report.per_core_batch) == {"train": 8, "eval": 8, "infer": 8}  # 64 over 8 cores
    sizes = dict(report.program_sizes)
    assert set(sizes) == {"train", "eval", "infer"} and all(size > 0 for size in sizes.values())
    assert sizes["train"] > sizes["eval"] > sizes["infer"]  # the update, then the loss, then predictions
    text = str(report)
    assert text.startswith("TPU compatibility: OK (8 TPU cores")
    for mode, shown in (("train", "train: per-core batch 8;"), ("eval", "eval: per-core batch 8 (padded);"),
                        ("infer", "predict: per-core batch 8 (padded);")):
        assert f"{shown} compiled, {sizes[mode]} HLO instructions" in text


def test_the_notebook_model_compiles_and_its_int64_argmax_is_a_warning():
    notebook = notebook_namespace()
    model = kte.EstimatorModel(
        notebook["model_fn"], params=notebook["params"], train_batch_size=64, eval_batch_size=64,
        predict_batch_size=16,
    )
    report = model.check_tpu_compatibility(notebook["input_fn"], ("train", "eval"))
    assert report.ok and report.program_size("train") > 0 and report.program_size("eval") > 0
    # The metric's tf.argmax is int64: a warning, which leaves the report ok (TPUs ran such programs).
    assert [mode for mode, _ in report.warnings] == ["eval"]
    assert "int64" in report.warnings[0][1] and "ArgMax" in report.warnings[0][1]
    predict = model.check_tpu_compatibility(notebook["predict_input_fn"], "predict")
    assert predict.ok and dict(predict.per_core_batch) == {"infer": 2}  # 16 over 8 cores, padded
    assert predict.program_size("predict") > 0


def test_a_dynamic_batch_is_the_originals_static_shape_error_with_the_fix():
    report = make_model(linear_model_fn).check_tpu_compatibility(dynamic_input_fn)
    assert not report.ok
    train = messages(report, "train")
    assert len(train) == 2  # features and labels
    assert train[0].startswith(
        "The features to the model returned by input_fn must have static shape. Tensor: features['x']"
    )
    assert train[1].startswith("The labels to the model returned by input_fn must have static shape.")
    assert all("drop_remainder=True" in message for message in train)
    # EVAL and PREDICT batches are padded to the static batch, as on the strategy path: no problem.
    assert messages(report, "eval") == messages(report, "infer") == []
    assert report.program_size("train") > 0  # the rest was still compiled with the static batch


def linear_model_fn(features, labels, mode, params):
    return linear(features, labels, mode)


def test_a_py_function_in_the_step_is_named_with_its_model_fn_line():
    report = make_model(py_function_model_fn).check_tpu_compatibility(input_fn, "train")
    assert not report.ok and report.program_size("train") is None
    (message,) = messages(report, "train")
    assert message.startswith("tf.py_function in the step: EagerPyFunc op")
    assert f"{HERE}:{line_of(py_function_model_fn, 'PY_FUNCTION_LINE')}" in message
    assert "host_call" in message and "outside_compilation" in message


def test_a_string_op_in_the_step_is_named_with_its_model_fn_line():
    report = make_model(string_model_fn).check_tpu_compatibility(input_fn, ["eval"])
    (message,) = messages(report, "eval")
    assert message.startswith("String op(s) in the step: AsString op")
    assert f"{HERE}:{line_of(string_model_fn, 'STRING_LINE')}" in message and "StringLength" in message
    assert "host_call" in message and "outside_compilation" in message


def test_string_ops_in_outside_compilation_stay_on_the_host():
    report = make_model(outside_compilation_model_fn).check_tpu_compatibility(input_fn, "train")
    assert report.ok and report.program_size("train") > 0


def test_an_op_without_an_xla_kernel_is_named_with_its_line():
    report = make_model(segment_sum_model_fn).check_tpu_compatibility(input_fn, "train")
    (message,) = messages(report, "train")
    assert message.startswith("No XLA kernel for SegmentSum op")
    assert f"{HERE}:{line_of(segment_sum_model_fn, 'SEGMENT_LINE')}" in message


def test_another_compile_error_is_xlas_message_trimmed():
    report = make_model(data_dependent_shape_model_fn).check_tpu_compatibility(input_fn, "train")
    (message,) = messages(report, "train")
    assert message.startswith("XLA could not compile the step: ")
    assert "Range must be a compile-time constant" in message and len(message) < 550
    assert message.endswith(f"(the op was made at {HERE}:{line_of(data_dependent_shape_model_fn, 'RANGE_LINE')})")
    assert "TF_DUMP_GRAPH_PREFIX" not in message and "The op is created at" not in message


def test_float64_in_the_step_is_a_warning_naming_the_line():
    report = make_model(float64_model_fn).check_tpu_compatibility(input_fn, "train")
    assert report.ok and report.program_size("train") > 0
    (warning,) = [message for mode, message in report.warnings if mode == "train"]
    assert warning.startswith("float64 tensor(s) made in the step:")
    assert f"{HERE}:{line_of(float64_model_fn, 'FLOAT64_LINE')}" in warning
    assert "warning: float64" in str(report)


def test_batches_follow_num_shards_and_must_divide_over_the_cores():
    config = kte.RunConfig(tpu_config=kte.TPUConfig(num_shards=2))
    # On the CPU path (a TPU config on a laptop), and through the facade.
    report = make_model(linear_model_fn, config=config, use_tpu=False).check_tpu_compatibility(input_fn, "train")
    assert report.ok and report.cores == 2 and dict(report.per_core_batch) == {"train": 32}
    estimator = kte.TPUEstimator(linear_model_fn, config=config, train_batch_size=64)
    assert dict(estimator.check_tpu_compatibility(input_fn, "train").per_core_batch) == {"train": 32}
    report = make_model(linear_model_fn, train_batch_size=12).check_tpu_compatibility(input_fn, "train")
    (message,) = messages(report, "train")
    assert "train batch size 12 must be divisible by number of replicas 8" in message


def test_modes_are_checked():
    with pytest.raises(ValueError, match="modes must be among"):
        make_model(linear_model_fn).check_tpu_compatibility(input_fn, "serve")


def state(model, model_dir):
    files = sorted(
        (str(path.relative_to(model_dir)), path.stat().st_mtime_ns, path.stat().st_size)
        for path in pathlib.Path(model_dir).rglob("*")
    )
    return [w.numpy().copy() for w in model.weights], model.global_step, files


def test_the_check_leaves_weights_global_step_and_model_dir_unchanged(tmp_path, strategy):
    model_dir = str(tmp_path / "model")
    model = kte.EstimatorModel(
        linear_model_fn, params={}, config=kte.RunConfig(model_dir=model_dir), strategy=strategy,
        train_batch_size=64, eval_batch_size=64, predict_batch_size=64,
    )
    model.fit(input_fn, callbacks=[kte.StopAtStep(steps=3), kte.CheckpointSaver(model_dir)], verbose=0)
    before = state(model, model_dir)
    assert before[1] == 3 and before[2]
    report = model.check_tpu_compatibility(input_fn)
    assert report.ok
    after = state(model, model_dir)
    assert after[1] == before[1] and after[2] == before[2]
    for old, new in zip(before[0], after[0], strict=True):
        np.testing.assert_array_equal(old, new)
    model.fit(input_fn, callbacks=[kte.StopAtStep(steps=1)], verbose=0)  # the model still trains on
    assert model.global_step == 4


def test_a_keras_optimizer_is_checked_on_a_copy():
    model = make_model(keras_optimizer_model_fn, optimizer=keras.optimizers.SGD(0.1))
    report = model.check_tpu_compatibility(input_fn, "train")
    assert report.ok and report.program_size("train") > 0
    assert not model.built and model.global_step == 0


def test_the_facade_checks_one_mode_or_several_and_writes_no_model_dir(tmp_path):
    model_dir = tmp_path / "model"
    estimator = kte.TPUEstimator(
        linear_model_fn, config=kte.RunConfig(model_dir=str(model_dir)), train_batch_size=64,
        predict_batch_size=64,
    )
    report = estimator.check_tpu_compatibility(input_fn, kte.ModeKeys.TRAIN)
    assert isinstance(report, kte.TPUCompatibilityReport) and report.ok and report.modes == ("train",)
    report = estimator.check_tpu_compatibility(dynamic_input_fn, [kte.ModeKeys.TRAIN, kte.ModeKeys.EVAL])
    assert "must have static shape" in messages(report, "train")[0]
    assert "`eval_batch_size` is needed" in messages(report, "eval")[0]  # none configured
    assert not model_dir.exists() or not any(model_dir.iterdir())


def test_the_report_is_a_frozen_value():
    report = kte.TPUCompatibilityReport(("train",), problems=(("train", "x"),))
    assert not report.ok and report.program_size("train") is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.problems = ()
    assert re.search(r"train: no batch; not compiled\n    problem: x", str(report))
    assert os.path.basename(HERE) == "test_tpu_readiness.py"


def summary_model_fn(features, labels, mode, params):
    spec = linear(features, labels, mode)
    tf.compat.v1.summary.scalar("loss", spec.loss)  # not written on a TPU (nor by TPUEstimator)
    return spec


def test_tf1_summaries_in_model_fn_are_left_out_as_on_a_tpu():
    report = make_model(summary_model_fn).check_tpu_compatibility(input_fn, "train")
    assert report.ok and report.program_size("train") > 0


def ragged_input_fn(params):
    lengths = tf.data.Dataset.range(1, 5).repeat()
    rows = lengths.map(lambda n: ({"x": tf.ones([n, 4])}, tf.ones([1])))
    return rows.padded_batch(params["batch_size"], drop_remainder=True)


def sequence_model_fn(features, labels, mode, params):
    return linear({"x": tf.reduce_sum(features["x"], axis=1)}, labels, mode)


def test_a_dynamic_inner_dimension_names_fixed_sizes_and_is_not_compiled():
    report = make_model(sequence_model_fn).check_tpu_compatibility(ragged_input_fn, "train")
    (message,) = messages(report, "train")
    assert message.startswith("The features to the model returned by input_fn must have static shape.")
    assert "shape=(8, None, 4)" in message and "padded_shapes" in message
    assert report.program_size("train") is None


def string_feature_input_fn(params):
    x = np.random.RandomState(0).randn(64, 4).astype(np.float32)
    dataset = tf.data.Dataset.from_tensor_slices(({"x": x, "name": ["a"] * 64}, x[:, :1])).repeat()
    return dataset.batch(params["batch_size"], drop_remainder=True)


def test_a_string_feature_is_refused_with_the_fix():
    report = make_model(linear_model_fn).check_tpu_compatibility(string_feature_input_fn, "train")
    (message,) = messages(report, "train")
    assert message.startswith("String input(s): features['name']") and "input_fn" in message


def test_inside_a_strategy_scope_the_check_says_to_call_it_outside(mirrored):
    model = make_model(linear_model_fn, strategy=mirrored)
    with mirrored.scope(), pytest.raises(RuntimeError, match="outside `strategy.scope"):
        model.check_tpu_compatibility(input_fn, "train")
    assert model.check_tpu_compatibility(input_fn, "train").ok
