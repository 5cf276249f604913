"""Programs written as public TPUEstimator programs are, run unchanged as files through
`python -m keras_tpu_estimator`, give the original's numbers on every path (`tests/fixtures/programs/runs.py`).

Each run is a subprocess, as a user runs a program; `tests/recorded/program_results_generated.py`
holds what TensorFlow 2.15's TPUEstimator gave for the same file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.fixtures.programs.runs import RUNS
from tests.fixtures.same_results import assert_same
from tests.recorded.program_results_generated import RESULTS

CASES = [(name, path) for name, run in RUNS.items() for path in run.paths]


def run_program(name: str, path: str, tmp_path, extra: tuple[str, ...] = ()) -> dict:
    """Runs `RUNS[name]` through `python -m keras_tpu_estimator` on `path`; its JSON results."""
    run = RUNS[name]
    runner = ["--replicas", "2"] if path == "mirrored" else []
    flags = list(run.flags) + (["--use_tpu=true"] if path in ("tpu", "mirrored") else []) + list(extra)
    result = tmp_path / "result.json"
    command = [sys.executable, "-m", "keras_tpu_estimator", *runner, str(run.script), *flags,
               f"--model_dir={tmp_path / 'model'}", f"--result_file={result}"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stderr[-6000:]}"
    return json.loads(result.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("name,path", CASES, ids=[f"{n}-{p}" for n, p in CASES])
def test_program_gives_the_originals_results(name, path, tmp_path):
    assert_same(run_program(name, path, tmp_path), RUNS[name].expected(RESULTS[name], path), name, RUNS[name].rtol)
