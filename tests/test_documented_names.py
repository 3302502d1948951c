"""Every dotted name the documentation gives (``keras_vit.models.registry.build_model``) is
reached by attribute access after a plain ``import keras_vit``, whatever else was imported.

The names come from README.md, docs/*.md, the notebooks' cells and the package's source
(docstrings and comments). They are resolved in a fresh interpreter; a submodule attribute that
an earlier import set on its package is taken away for the look-up, so that each name resolves
as it would first in a program (a name found only because another import ran is what broke
``keras_vit.models.registry`` in one test order). A module that needs an optional package may
instead refuse with the error that names the extra to install, where that package is missing.
"""

import glob
import json
import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.backend_independent  # documentation, resolved in a fresh interpreter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = re.compile(r"\bkeras_vit(?:\.[A-Za-z_]\w*)+")


def _texts():
    for path in [os.path.join(ROOT, "README.md"), *glob.glob(os.path.join(ROOT, "docs", "*.md")),
                 *glob.glob(os.path.join(ROOT, "keras_vit", "**", "*.py"), recursive=True)]:
        with open(path, encoding="utf-8") as handle:
            yield handle.read()
    for path in glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")):
        with open(path, encoding="utf-8") as handle:
            cells = json.load(handle)["cells"]
        yield from ("".join(cell["source"]) for cell in cells)  # code and markdown, no outputs


def documented_names():
    return sorted({name for text in _texts() for name in NAME.findall(text)})


_RESOLVE = r"""
import importlib.util, json, sys, types
import keras_vit

def lookup(owner, part):
    # owner.part as if no import had set the submodule attribute owner.part
    value = vars(owner).get(part) if isinstance(owner, types.ModuleType) else None
    if not (isinstance(value, types.ModuleType) and value.__name__ == f"{owner.__name__}.{part}"):
        return getattr(owner, part)
    delattr(owner, part)
    try:
        return getattr(owner, part)
    finally:
        setattr(owner, part, value)

found = {}
for name in json.loads(sys.argv[1]):
    try:
        owner = keras_vit
        for part in name.split(".")[1:]:
            owner = lookup(owner, part)
        found[name] = "ok"
    except ModuleNotFoundError as error:
        missing = (error.name or "").partition(".")[0]
        absent = bool(missing) and importlib.util.find_spec(missing) is None
        hint = 'keras-vit-paper[' in str(error)
        found[name] = f"needs {missing}" if absent and hint else f"{type(error).__name__}: {error}"
    except Exception as error:
        found[name] = f"{type(error).__name__}: {error}"
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def resolved():
    environ = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", _RESOLVE, json.dumps(documented_names())],
                          env=environ, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_the_documents_name_modules():
    names = documented_names()
    assert len(names) > 100, names  # the pattern still finds the names
    assert {"keras_vit.models.registry", "keras_vit.app.runtime.setup", "keras_vit.app.cli",
            "keras_vit.data.preprocessing.preprocess"} <= set(names)


@pytest.mark.parametrize("name", documented_names())
def test_documented_name_resolves(name, resolved):
    outcome = resolved[name]
    if outcome.startswith("needs "):
        pytest.skip(f"{name} {outcome}, which is not installed (its error names the extra)")
    assert outcome == "ok", f"{name}: {outcome}"
