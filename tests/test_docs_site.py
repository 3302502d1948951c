"""The documentation site's API reference lists every public name: ``keras_vit.__all__`` and
the ``__all__`` of the subpackages the README names, each in docs/api.md's autosummary (which
generates a page per name), under the module it belongs to. The site itself is built by
``sphinx-build -W`` in CI (.ci/run); this test needs no Sphinx."""

import importlib
import pathlib
import re

import pytest

import keras_vit

pytestmark = pytest.mark.backend_independent  # documentation

ROOT = pathlib.Path(__file__).resolve().parent.parent
SUBPACKAGES = ["data", "training", "evaluation", "inspection"]


def listed():
    """{module: names} of docs/api.md's autosummary blocks."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    found = {}
    for module, body in re.findall(
            r"\.\. currentmodule:: (\S+)\s+\.\. autosummary::\n(?:   :\S+:.*\n)*\n((?:   \S+\n)+)",
            text):
        found.setdefault(module, set()).update(body.split())
    return found


def public_names():
    names = {"keras_vit": set(keras_vit.__all__)}
    for sub in SUBPACKAGES:
        names[f"keras_vit.{sub}"] = set(importlib.import_module(f"keras_vit.{sub}").__all__)
    return names


def test_the_api_page_is_read():
    pages = listed()
    assert "ViTBackbone" in pages["keras_vit"], pages  # the pattern still finds the lists


@pytest.mark.parametrize("module", ["keras_vit", *(f"keras_vit.{s}" for s in SUBPACKAGES)])
def test_every_public_name_has_an_api_page(module):
    missing = public_names()[module] - listed().get(module, set())
    assert not missing, f"docs/api.md lists no page for {sorted(missing)} of {module}"


def test_the_notebooks_are_rendered_not_run():
    conf = (ROOT / "docs" / "conf.py").read_text(encoding="utf-8")
    assert re.search(r'^nb_execution_mode = "off"$', conf, re.MULTILINE)
