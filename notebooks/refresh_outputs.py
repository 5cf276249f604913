"""Re-executes the notebooks in place so their saved outputs are current.

Run: `.venv/bin/python notebooks/refresh_outputs.py` (after `bash scripts/setup.sh`).

The saved outputs are what a reader sees, less what only tells which machine ran them:

- TensorFlow's C++ start-up log lines on stderr (oneDNN, CUDA drivers, CPU features):
  TensorFlow 2.20+ writes them before its logging is set up, so `TF_CPP_MIN_LOG_LEVEL`
  cannot silence them;
- deprecation notices that TensorFlow logs when its own TF1 helpers call each other (e.g.
  `predict_signature_def` calling `build_tensor_info` during an export): nothing in the
  notebook can change them;
- absolute paths of this machine (the Python environment, site-packages, this checkout,
  the temporary and home directories) become `<venv>`, `<site-packages>`, `<repo>`,
  `<tmp>` and `~`;
- the per-cell execution timestamps.

Whatever is dropped is printed here. Anything else stays, and `tests/package/test_notebook.py`
fails on stored outputs that hold a machine path, a warning or a stderr stream.
"""

from __future__ import annotations

import os
import pathlib
import re
import sys
import sysconfig
import tempfile

import nbformat
from nbclient import NotebookClient

HERE = pathlib.Path(__file__).resolve().parent

# A line of TensorFlow's C++ (absl) log: `I0000 00:00:1796078484.913149    1577 port.cc:153] ...`,
# absl's note that precedes them, and the continuation line of the CPU-feature message.
_CPP_LOG_LINE = re.compile(
    r"[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w.+-]+:\d+\] "
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags\."
)
# `WARNING:tensorflow:From <file>:<line>: <name> (from <module>) is deprecated ...`, then
# `Instructions for updating:` and its one line of text (what follows may be the cell's output).
_DEPRECATION_NOTICE = re.compile(
    r"^WARNING:tensorflow:From \S+:\d+: .* is deprecated.*(?:\n|$)"
    r"(?:Instructions for updating:\n.*(?:\n|$))?",
    flags=re.MULTILINE,
)


def machine_paths() -> list[tuple[str, str]]:
    """(absolute path, placeholder) pairs, the longest path first."""
    home = os.path.expanduser("~")
    paths = {
        sys.prefix: "<venv>",
        sysconfig.get_paths()["purelib"]: "<site-packages>",
        sysconfig.get_paths()["platlib"]: "<site-packages>",
        str(HERE.parent): "<repo>",
        tempfile.gettempdir(): "<tmp>",
        os.path.realpath(tempfile.gettempdir()): "<tmp>",
        home: "~",
    }
    pairs = [(os.path.normpath(path), name) for path, name in paths.items() if path not in ("", "/")]
    return sorted(pairs, key=lambda pair: -len(pair[0]))


def scrub_text(text: str, paths: list[tuple[str, str]]) -> str:
    """`text` with this machine's absolute paths replaced by placeholders."""
    for path, name in paths:
        text = re.sub(re.escape(path) + r"(?=[/\\'\"\s:,)\]]|$)", lambda _, name=name: name, text)
    return text


def scrub_outputs(outputs: list, paths: list[tuple[str, str]]) -> tuple[list, list[str]]:
    """The outputs to store, and the lines dropped from them."""
    kept, dropped = [], []
    for output in outputs:
        if output.output_type == "stream":
            text = output.text
            if output.name == "stderr":
                lines = text.splitlines(keepends=True)
                dropped += [line for line in lines if _CPP_LOG_LINE.match(line)]
                text = "".join(line for line in lines if not _CPP_LOG_LINE.match(line))
            dropped += [m.group(0) for m in _DEPRECATION_NOTICE.finditer(text)]
            text = _DEPRECATION_NOTICE.sub("", text)
            if not text.strip():
                continue
            output.text = scrub_text(text, paths)
        elif output.output_type in ("execute_result", "display_data"):
            for mime, value in output.get("data", {}).items():
                if mime.startswith("text/") and isinstance(value, str):
                    output.data[mime] = scrub_text(value, paths)
        elif output.output_type == "error":
            output.evalue = scrub_text(output.evalue, paths)
            output.traceback = [scrub_text(line, paths) for line in output.traceback]
        kept.append(output)
    return kept, dropped


def refresh(path: pathlib.Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(HERE)}}).execute()
    paths = machine_paths()
    for index, cell in enumerate(notebook.cells):
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs, dropped = scrub_outputs(cell.outputs, paths)
            for text in dropped:
                print(f"{path.name} cell {index}, dropped: {text.splitlines()[0][:160]}")
    nbformat.write(notebook, path)


if __name__ == "__main__":
    for name in sys.argv[1:] or ["quickstart.ipynb"]:
        refresh(HERE / name)
