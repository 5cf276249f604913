"""Re-executes the notebooks in place so their saved outputs are current.

Run: `.venv/bin/python notebooks/refresh_outputs.py` (after `bash scripts/setup.sh`).
TensorFlow's start-up chatter on stderr is dropped from the saved outputs.
"""

import pathlib
import sys

import nbformat
from nbclient import NotebookClient

HERE = pathlib.Path(__file__).resolve().parent


def refresh(path: pathlib.Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(HERE)}}).execute()
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if not (o.output_type == "stream" and o.name == "stderr")]
    nbformat.write(notebook, path)


if __name__ == "__main__":
    for name in sys.argv[1:] or ["quickstart.ipynb"]:
        refresh(HERE / name)
