"""Execute every teaching notebook top to bottom in small mode (KERAS_VIT_SMALL=1).

Run by .ci/run as `python -m pytest notebooks` under a chosen KERAS_BACKEND; the committed
notebooks keep the outputs of a full run, this only checks that they run without error.
"""

import glob
import os

import nbformat
import pytest
from nbclient import NotebookClient

HERE = os.path.dirname(os.path.abspath(__file__))
NOTEBOOKS = sorted(glob.glob(os.path.join(HERE, "[0-9][0-9]_*.ipynb")))


def test_all_five_notebooks_exist():
    assert len(NOTEBOOKS) >= 5, NOTEBOOKS


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
