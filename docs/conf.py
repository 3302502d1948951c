"""Sphinx configuration of keras_vit's documentation site.

Build it from the repository root (the README's command):

    pip install -e ".[docs]" && sphinx-build -W -b html docs docs/_build/html

The guides are the Markdown files of docs/ (MyST), the notebooks are those of notebooks/,
rendered from their committed outputs and never executed, and the API reference is generated
from the docstrings of every name docs/api.md lists (tests/test_docs_site.py checks that list
against the package's ``__all__``).
"""

import os
import pathlib
import shutil
import sys

DOCS = pathlib.Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # the checkout's package, whatever is installed
# autodoc imports the package; Keras reads its backend once, at its first import. Any installed
# backend works for the docstrings; jax is in the docs extra.
os.environ.setdefault("KERAS_BACKEND", "jax")

# The notebooks live in notebooks/, outside this source folder: each build copies them into
# docs/tutorials/ (ignored by git), so the site renders the committed files as they are.
TUTORIALS = DOCS / "tutorials"
shutil.rmtree(TUTORIALS, ignore_errors=True)
TUTORIALS.mkdir()
for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
    shutil.copy2(notebook, TUTORIALS / notebook.name)

import keras_vit  # noqa: E402  (after the backend and the path are set)

project = "keras_vit"
author = "The keras_vit developers"
copyright = "The keras_vit developers"  # noqa: A001  (Sphinx's name)
release = keras_vit.__version__ if hasattr(keras_vit, "__version__") else ""

extensions = [
    "myst_nb",  # Markdown pages (MyST) and notebooks
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",  # the docstrings' Google style (Args:, Returns:)
    "sphinx.ext.viewcode",
    # MathJax served with the pages rather than from a CDN: the equations render offline too
    # (a classroom without network, a site opened from disk).
    "sphinx-mathjax-offline",
]
# .rst first: autosummary writes its stub pages with the first suffix, and they are reST.
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
templates_path = ["_templates"]

# Notebooks: shown with the outputs they were committed with; a build never runs one (a full
# run takes hours on a CPU; the tests run them in small mode).
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "colon_fence"]
# Headings become anchors, so that links such as results.md#the-main-job work as on GitHub.
myst_heading_anchors = 3

autosummary_generate = True  # a stub page per listed name, under docs/api/ (ignored by git)
autosummary_imported_members = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the docstrings say the types in words
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# A class's "Attributes:" section as fields of the class, not as attribute entries that its
# members (a NamedTuple's fields) would describe a second time.
napoleon_use_ivar = True
# A method that keras_vit overrides without a docstring of its own shows none, rather than
# Keras' (written in Markdown, not reST).
autodoc_inherit_docstrings = False

html_theme = "furo"
html_title = "keras_vit"
html_static_path = ["_static"]
html_css_files = ["custom.css"]

# The notebooks go from their title (#) to ### headings, which reads well in Jupyter and Colab;
# the site renders them as committed, so MyST's note on the skipped level is not a problem there.
suppress_warnings = ["myst.header"]


def _constants_without_type_docs(app, what, name, obj, options, lines):
    """A constant (``keras_vit.data.DATASETS``, a dict) has no docstring of its own: autodoc
    would show its type's (``dict() -> new empty dictionary...``), whose ``**kwargs`` breaks the
    summary's markup. Say what it is instead; its module's page describes it."""
    if what in ("data", "attribute") and type(obj).__doc__ and obj.__doc__ == type(obj).__doc__:
        lines[:] = [f"A ``{type(obj).__name__}``: see its module, ``{name.rpartition('.')[0]}``."]


def _doctests_after_a_blank_line(app, what, name, obj, options, lines):
    """A docstring's examples start right under "Example:" (``>>>`` at the heading's indent),
    which doctest reads but reST does not: without a blank line before them they are read as
    a paragraph (``**kwargs`` as bold). Runs before napoleon."""
    for index in range(len(lines) - 1, 0, -1):
        if lines[index].lstrip().startswith(">>>") and lines[index - 1].strip() \
                and not lines[index - 1].lstrip().startswith(("...", ">>>")):
            lines.insert(index, "")


def setup(app):
    app.connect("autodoc-process-docstring", _doctests_after_a_blank_line, priority=100)
    app.connect("autodoc-process-docstring", _constants_without_type_docs)
