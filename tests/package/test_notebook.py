"""The quickstart notebook runs headless, top to bottom, and shows what it promises.

Its stored outputs (written by `notebooks/refresh_outputs.py`) show a reader no path of
the machine that ran it and no warnings.
"""

import importlib.util
import json
import pathlib
import re

import nbformat
from nbclient import NotebookClient

NOTEBOOK = pathlib.Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"
REFRESH = NOTEBOOK.parent / "refresh_outputs.py"
MACHINE_PATH = re.compile(r"/work/|/tmp/|/root/|/home/|site-packages|\.venv")
WARNING_LINE = re.compile(r"^.*(?:retracing|WARNING|Warning:).*$", flags=re.MULTILINE)


def test_quickstart_notebook_runs(tmp_path):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=180, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "\n".join(
        output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    )
    images = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert "global step: 300" in text
    # The TPU-readiness check runs before the model trains, and passes (tests/xla/test_tpu_readiness.py).
    assert "TPU compatibility: OK" in text and "train: per-core batch 8; compiled, " in text
    assert "100 predictions (exactly the 100 input rows)" in text
    # evaluate() returns NumPy scalars, as the original did (`np.int64(200)` under NumPy 2).
    assert re.search(r"'global_step': (np\.int64\()?200", text) and "layer_0/kernel" in text
    assert "probabilities" in text  # the served request
    assert len(images) == 1  # the TensorBoard scalars plot


def stored_output_texts(notebook):
    """(cell index, text) of every stored output a reader sees as text."""
    for index, cell in enumerate(notebook["cells"]):
        for output in cell.get("outputs", []):
            if output["output_type"] == "stream":
                yield index, "".join(output["text"])
            elif output["output_type"] == "error":
                yield index, "\n".join([output["ename"], output["evalue"], *output["traceback"]])
            else:
                for mime, value in output.get("data", {}).items():
                    if mime.startswith("text/"):
                        yield index, "".join(value)


def test_stored_outputs_show_no_machine_paths_or_warnings():
    notebook = json.loads(NOTEBOOK.read_text())
    texts = list(stored_output_texts(notebook))
    assert any("global step: 300" in text for _, text in texts)  # outputs are stored at all
    texts.append(("metadata", json.dumps(notebook["metadata"])))
    paths = [(i, m.group(0)) for i, text in texts for m in re.finditer(rf".{{0,40}}(?:{MACHINE_PATH.pattern}).*", text)]
    assert not paths, f"machine paths in stored outputs (run notebooks/refresh_outputs.py): {paths}"
    warnings = [(i, m.group(0)[:200]) for i, text in texts for m in WARNING_LINE.finditer(text)]
    assert not warnings, f"warnings in stored outputs: {warnings}"
    streams = [(i, o.get("name")) for i, c in enumerate(notebook["cells"]) for o in c.get("outputs", [])]
    assert (None, "stderr") not in {(None, name) for _, name in streams}, streams
    assert not [c["metadata"]["execution"] for c in notebook["cells"] if "execution" in c["metadata"]]


def test_refresh_scrubs_machine_paths_and_tensorflow_start_up_lines():
    spec = importlib.util.spec_from_file_location("refresh_outputs", REFRESH)
    refresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(refresh)
    paths = [("/work/main/.venv", "<venv>"), ("/work/main", "<repo>"), ("/tmp", "<tmp>")]
    stderr = (
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
        "I0000 00:00:1796078484.913149    1577 port.cc:153] oneDNN custom operations are on.\n"
        "E0000 00:00:1796078486.826083    1577 cuda_platform.cc:52] failed call to cuInit\n"
    )
    notice = (
        "WARNING:tensorflow:From /work/main/.venv/lib/python3.11/site-packages/tensorflow/x.py:225: "
        "build_tensor_info (from tensorflow.python.saved_model.utils_impl) is deprecated and will be "
        "removed in a future version.\nInstructions for updating:\nThis API was designed for TensorFlow v1.\n"
    )
    outputs = [
        nbformat.v4.new_output("stream", name="stderr", text=stderr),
        nbformat.v4.new_output("stream", name="stderr", text=stderr + "UserWarning: kept\n"),
        nbformat.v4.new_output("stream", name="stdout", text=notice + "b'/tmp/kte_x/export/1'\n"),
        nbformat.v4.new_output("execute_result", data={"text/plain": "'/work/main/notebooks' '/work/mainly'"}),
    ]
    kept, dropped = refresh.scrub_outputs(outputs, paths)
    assert [o.get("text", o.get("data")) for o in kept] == [
        "UserWarning: kept\n", "b'<tmp>/kte_x/export/1'\n", {"text/plain": "'<repo>/notebooks' '/work/mainly'"},
    ]
    assert len(dropped) == 7 and dropped[-1].startswith("WARNING:tensorflow:From")
