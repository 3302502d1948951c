"""The install commands of the README: the first installs only what
``keras-vit train`` needs, and the dev extra pulls no TensorFlow in."""

import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Packages that are TensorFlow or require its full `tensorflow` distribution (keras-hub through
# tensorflow-text): CI installs tensorflow-cpu and keras-hub without tensorflow-text instead.
PULL_TENSORFLOW = {"tensorflow", "tensorflow-cpu", "tensorflow-text", "keras-hub", "tf-keras"}


def _extras():
    with open(ROOT / "pyproject.toml", "rb") as file:
        return tomllib.load(file)["project"]["optional-dependencies"]


def _name(requirement):
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_dev_leaves_tensorflow_out():
    assert not {_name(r) for r in _extras()["dev"]} & PULL_TENSORFLOW


def test_the_first_command_is_light():
    readme = (ROOT / "README.md").read_text()
    first = re.search(r"^    (pip install .*keras-vit train)$", readme, re.MULTILINE).group(1)
    extras = re.search(r'-e "\.\[([\w,]+)\]"', first).group(1).split(",")
    assert set(extras) == {"torch", "train"}
    pulled = {_name(r) for extra in extras for r in _extras()[extra]}
    assert pulled == {"torch", "matplotlib", "scikit-learn"}
