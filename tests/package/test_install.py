"""Installing never replaces the machine's TensorFlow; the supported range is stated once.

The test marked `install` builds a venv that holds only `tensorflow-cpu` (as
many CPU machines do; TPU VMs hold `tensorflow-tpu`) and asks pip what
installing this project would add: no TensorFlow distribution may be in it.
Another builds the wheel, as `pip install` does, and checks the build prints no
deprecation warning and states the SPDX license `Apache-2.0`.
They need the package index, so they run as their own CI step.
"""

import json
import pathlib
import re
import subprocess
import sys
import venv
import zipfile

import pytest

from keras_tpu_estimator import versions

ROOT = pathlib.Path(__file__).resolve().parents[2]


def normalized(name):
    """A distribution name as PyPI compares them (`tf_keras` is `tf-keras`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_tensorflow_extras_state_the_supported_range():
    text = (ROOT / "pyproject.toml").read_text()  # read as text: tomllib needs Python 3.11
    (low_major, low_minor), (high_major, high_minor) = versions.SUPPORTED["tensorflow"]
    bounds = f">={low_major}.{low_minor},<{high_major}.{high_minor + 1}"
    for extra, requirement in (("cpu", "tensorflow-cpu"), ("gpu", "tensorflow[and-cuda]"),
                               ("tpu", "tensorflow-tpu")):
        assert f'\n{extra} = ["{requirement}{bounds}"]\n' in text
    # Nothing else names a TensorFlow distribution or tf_keras (comments aside).
    requirements = re.findall(r'^\s*(?:\w+ = \[)?"([^"]+)"', text, flags=re.MULTILINE)
    named = [r for r in requirements if re.match(r"(tensorflow|tf[-_])", r)]
    assert sorted(named) == sorted(
        f"{r}{bounds}" for r in ("tensorflow-cpu", "tensorflow[and-cuda]", "tensorflow-tpu")
    )


def test_without_tensorflow_the_import_error_names_what_to_install():
    code = "import sys; sys.modules['tensorflow'] = None; import keras_tpu_estimator"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 1
    assert "ImportError: keras_tpu_estimator needs TensorFlow 2.20-2.21, and none is installed" in run.stderr
    assert "keras-tpu-estimator[cpu]" in run.stderr and "tensorflow-tpu" in run.stderr


def test_tf_keras_requirement_matches_the_installed_tensorflow():
    import tensorflow as tf

    major, minor = tf.__version__.split(".")[:2]
    assert versions.tf_keras_requirement() == f"tf_keras=={major}.{minor}.*"
    assert versions.installed_distributions()  # the one this suite runs on


@pytest.mark.install
def test_a_tensorflow_cpu_machine_gets_no_second_tensorflow(tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")

    def pip(*args):
        run = subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True, timeout=1200)
        assert run.returncode == 0, run.stderr[-3000:]
        return run

    pip("install", "--quiet", "tensorflow-cpu==2.21.*")
    installs = {}
    for target in (str(ROOT), f"{ROOT}[test]"):
        report = tmp_path / "report.json"
        pip("install", "--dry-run", "--quiet", "--report", str(report), target)
        installs[target] = {normalized(i["metadata"]["name"]) for i in json.loads(report.read_text())["install"]}
    for names in installs.values():
        assert "keras-tpu-estimator" in names
        assert not names & {normalized(d) for d in versions.DISTRIBUTIONS}, names
    # The TF1 layers, as scripts/setup.sh installs them: the matching tf_keras, nothing else.
    requirement = subprocess.run(
        [python, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
         "from keras_tpu_estimator.versions import tf_keras_requirement as r; print(r())", str(ROOT)],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert requirement == "tf_keras==2.21.*"
    report = tmp_path / "tf_keras.json"
    pip("install", "--dry-run", "--quiet", "--no-deps", "--report", str(report), requirement)
    assert [normalized(i["metadata"]["name"]) for i in json.loads(report.read_text())["install"]] == ["tf-keras"]


@pytest.mark.install
def test_the_build_is_quiet_and_states_an_spdx_license(tmp_path):
    # This suite's pip (a recent one shows the build backend's warnings, the venv's bundled pip does not).
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(ROOT)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    output = run.stdout + run.stderr
    assert not re.search(r"deprecat", output, flags=re.IGNORECASE), output[-3000:]
    (wheel,) = tmp_path.glob("keras_tpu_estimator-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(name).decode()
    assert "License-Expression: Apache-2.0\n" in metadata
