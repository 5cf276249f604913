"""The quickstart notebook runs headless, top to bottom, and shows what it promises."""

import pathlib
import re

import nbformat
from nbclient import NotebookClient

NOTEBOOK = pathlib.Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"


def test_quickstart_notebook_runs(tmp_path):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=180, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "\n".join(
        output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    )
    images = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert "global step: 300" in text
    assert "100 predictions (exactly the 100 input rows)" in text
    # evaluate() returns NumPy scalars, as the original did (`np.int64(200)` under NumPy 2).
    assert re.search(r"'global_step': (np\.int64\()?200", text) and "layer_0/kernel" in text
    assert "probabilities" in text  # the served request
    assert len(images) == 1  # the TensorBoard scalars plot
