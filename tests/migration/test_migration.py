"""`install()` and `python -m keras_tpu_estimator`: an old program finds this library where it looked.

Each check runs in a fresh process: `install()` changes `tensorflow`'s
namespaces for the rest of a process, and the runner is a command.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from keras_tpu_estimator.migration.install import ESTIMATOR_PACKAGES, MODULE_PATHS


def python(code: str, *args: str, runner: bool = False, cwd=None) -> subprocess.CompletedProcess:
    """Runs `code` as a file in a fresh Python (through the runner when `runner`)."""
    path = os.path.join(cwd, "program.py")
    with open(path, "w") as f:
        f.write(textwrap.dedent(code))
    command = [sys.executable, *(["-m", "keras_tpu_estimator"] if runner else []), path, *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})


def test_importing_the_package_changes_nothing_in_tensorflow(tmp_path):
    done = python("""
        import sys
        import tensorflow as tf
        import keras_tpu_estimator as kte
        assert not hasattr(tf, "estimator") and not hasattr(tf.compat.v1, "estimator")
        assert "tensorflow_estimator" not in sys.modules and not kte.installed()
        print("ok")
    """, cwd=tmp_path)
    assert done.stdout.strip() == "ok", done.stderr


def test_install_makes_every_old_name_this_library(tmp_path):
    done = python(f"""
        import importlib
        import keras_tpu_estimator as kte
        from keras_tpu_estimator import estimator as namespace
        kte.install()
        kte.install()  # idempotent
        assert kte.installed()

        import tensorflow as tf
        import tensorflow.compat.v1 as v1
        import tensorflow.compat.v2 as v2
        from tensorflow.compat.v1 import estimator as tf_estimator
        from tensorflow.compat.v1.estimator.tpu import TPUEstimator, TPUEstimatorSpec, RunConfig
        from tensorflow.estimator import ModeKeys
        import tensorflow_estimator
        assert tf.estimator is v1.estimator is v2.estimator is tf_estimator is namespace
        assert tensorflow_estimator.estimator is namespace
        assert tf.estimator.tpu.TPUEstimator is TPUEstimator is kte.TPUEstimator
        assert tf.compat.v1.estimator.tpu.TPUEstimatorSpec is TPUEstimatorSpec is kte.TPUEstimatorSpec
        assert RunConfig is kte.RunConfig and ModeKeys is kte.ModeKeys
        assert tf.estimator.export.PredictOutput is kte.export.PredictOutput

        from tensorflow_estimator.python.estimator.tpu import tpu_estimator, tpu_config, tpu_context
        from tensorflow_estimator.python.estimator.tpu.tpu_estimator import TPUEstimator as T2
        from tensorflow_estimator.python.estimator import model_fn as model_fn_lib, run_config
        from tensorflow.python.estimator import model_fn as model_fn_lib2
        from tensorflow.python.estimator.export import export_output
        assert tpu_estimator.TPUEstimator is T2 is kte.TPUEstimator
        assert tpu_config.TPUConfig is kte.TPUConfig and tpu_config.InputPipelineConfig is kte.InputPipelineConfig
        assert tpu_context.TPUContext is kte.TPUContext
        assert model_fn_lib.EstimatorSpec is model_fn_lib2.EstimatorSpec is kte.EstimatorSpec
        assert model_fn_lib.ModeKeys is kte.ModeKeys and run_config.RunConfig is kte.RunConfig
        assert export_output.PredictOutput is kte.export.PredictOutput
        for package in {list(ESTIMATOR_PACKAGES)!r}:
            for relative in {sorted(MODULE_PATHS)!r}:
                importlib.import_module(package + "." + relative)
        try:
            tf.contrib
        except AttributeError:
            print("ok")
    """, cwd=tmp_path)
    assert done.stdout.strip() == "ok", done.stderr


def test_the_runner_runs_a_program_as_python_would(tmp_path):
    (tmp_path / "helper_module.py").write_text("VALUE = 'next to the script'\n")
    done = python("""
        import sys
        from absl import app, flags
        import helper_module   # the script's directory is first on sys.path
        import tensorflow as tf

        flags.DEFINE_integer("steps", 0, "")
        FLAGS = flags.FLAGS

        def main(argv):
            print(__name__, FLAGS.steps, argv[1:], helper_module.VALUE, sys.argv[0].endswith("program.py"))
            print(tf.estimator.tpu.TPUEstimator.__module__)
            return 3

        if __name__ == "__main__":
            app.run(main)
    """, "--steps=7", "extra", runner=True, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == [
        "__main__ 7 ['extra'] next to the script True",
        "keras_tpu_estimator.tpu_estimator",
    ]


def test_the_runner_reports_a_failing_program_as_python_would(tmp_path):
    done = python("raise ValueError('bad flag value')\n", runner=True, cwd=tmp_path)
    assert done.returncode == 1
    assert "ValueError: bad flag value" in done.stderr


def test_the_runner_runs_a_module_and_mirrors_over_cpu_replicas(tmp_path):
    (tmp_path / "replicas_program.py").write_text(textwrap.dedent("""
        import sys
        import tensorflow as tf
        import keras_tpu_estimator as kte
        model = kte.EstimatorModel(lambda features, labels, mode, params: None, use_tpu=True)
        print(__name__, sys.argv[1:], model.distribute_strategy.num_replicas_in_sync)
    """))
    command = [sys.executable, "-m", "keras_tpu_estimator", "--replicas", "2", "-m", "replicas_program", "a"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert done.stdout.split() == ["__main__", "['a']", "2"], done.stderr


@pytest.mark.parametrize("args,message", [
    ([], "error: no script given"),
    (["--replicas", "zero", "x.py"], "error: unknown option or bad value: --replicas"),
    (["--replicas=0", "x.py"], "error: unknown option or bad value: --replicas=0"),
    (["--verbose", "x.py"], "error: unknown option or bad value: --verbose"),
    (["missing.py"], "can't open file 'missing.py'"),
])
def test_the_runner_names_what_is_wrong_with_its_arguments(args, message, tmp_path, monkeypatch):
    from keras_tpu_estimator.__main__ import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as raised:
        main(args)
    assert message in str(raised.value.code)


def test_the_runner_options_come_before_the_script():
    from keras_tpu_estimator.__main__ import _parse

    assert _parse(["--replicas", "2", "prog.py", "--replicas=3", "-m"]) == (2, "prog.py", None, ["--replicas=3", "-m"])
    assert _parse(["--replicas=4", "-m", "pkg.mod", "x"]) == (4, None, "pkg.mod", ["x"])


GRAPH_MODE_PROGRAM = """
    import numpy as np
    import tensorflow.compat.v1 as tf
    tf.disable_v2_behavior()   # before this library is even imported
    import keras_tpu_estimator as kte
    kte.install()
    USE_TPU = {use_tpu}

    def model_fn(features, labels, mode, params):
        w = tf.get_variable("w", [4, 1], initializer=tf.zeros_initializer())
        assert features["x"].shape[1].value == 4   # the program's v1 TensorShape
        y = tf.matmul(features["x"], w)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.tpu.TPUEstimatorSpec(mode, predictions={{"y": y}})
        loss = tf.reduce_mean(tf.square(y - labels))
        train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss, tf.train.get_global_step())
        return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    def input_fn(params):
        x = np.arange(32, dtype=np.float32).reshape(8, 4) / 32
        return tf.data.Dataset.from_tensor_slices(({{"x": x}}, x[:, :1])).repeat().batch(4)

    estimator = tf.estimator.tpu.TPUEstimator(
        model_fn, config=tf.estimator.tpu.RunConfig(model_dir="model"), use_tpu=USE_TPU,
        train_batch_size=4, eval_batch_size=4, predict_batch_size=4)
    estimator.train(input_fn, max_steps=3)
    print(round(float(estimator.evaluate(input_fn, steps=2)["loss"]), 6))
    for prediction in estimator.predict(lambda params: input_fn(params).take(1)):
        assert not tf.executing_eagerly()   # the caller's loop keeps its graph mode
        print(round(float(prediction["y"][0]), 6))
    with tf.Session() as session:   # the program's own graph-mode code still works
        print(session.run(tf.constant(2.0) * 3))
    try:
        kte.EstimatorModel(model_fn)
    except RuntimeError as error:
        print(str(error).split(",")[0])
"""


@pytest.mark.parametrize("use_tpu", [False, True])
def test_a_graph_mode_program_runs_through_the_facade(use_tpu, tmp_path):
    done = python(GRAPH_MODE_PROGRAM.format(use_tpu=use_tpu), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    eager = python(GRAPH_MODE_PROGRAM.format(use_tpu=use_tpu).replace(
        "tf.disable_v2_behavior()", "pass").replace("assert not tf.executing_eagerly()", "pass").replace(
        ".shape[1].value", ".shape[1]"), cwd=tmp_path / "model")
    lines = done.stdout.splitlines()
    assert len(lines) == 7 and lines[:5] == eager.stdout.splitlines()[:5]  # loss, 4 predictions
    assert lines[5:] == ["6.0", "EstimatorModel is a Keras 3 model"]
