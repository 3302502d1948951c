"""Execute every teaching notebook top to bottom in small mode (KERAS_VIT_SMALL=1).

Run as `KERAS_BACKEND=jax python -m pytest notebooks`. The committed notebooks keep the outputs
of a full run; this only checks that they run without error. .ci/run will call it once the five
notebooks of issue 5 have landed.
"""

import glob
import os

import nbformat
import pytest
from nbclient import NotebookClient

HERE = os.path.dirname(os.path.abspath(__file__))
NOTEBOOKS = sorted(glob.glob(os.path.join(HERE, "[0-9][0-9]_*.ipynb")))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs_in_small_mode(path, monkeypatch):
    monkeypatch.setenv("KERAS_VIT_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    repo = os.path.dirname(HERE)
    monkeypatch.setenv("PYTHONPATH", repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": HERE}})
    client.execute()
