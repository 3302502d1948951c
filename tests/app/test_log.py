"""The log of ``keras-vit train`` is readable where it is not a terminal."""

import os
import re
import subprocess
import sys

import pytest

from keras_vit.app import configs
from tests.app.test_cli import ROOT, TINY

QUIET = TINY[:-2]  # the tiny run without its --verbose 0
assert TINY[-2:] == ["--verbose", "0"]


@pytest.mark.fashion_mnist
def test_a_log_written_to_a_file_has_one_line_per_epoch(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    log = tmp_path / "train.log"
    with open(log, "w") as stdout:
        subprocess.run([sys.executable, "-m", "keras_vit", "train", *QUIET, "--epochs", "3",
                        "--no-validate", "--output", str(tmp_path / "run")], cwd=ROOT, env=env,
                       stdout=stdout, stderr=subprocess.DEVNULL, check=True)
    text = log.read_text()
    assert "\r" not in text and "\x1b" not in text  # no bar redraws, no colours
    assert len(re.findall(r"^\d+/\d+ - .*/step", text, re.MULTILINE)) == 3, text


def test_an_explicit_verbose_wins():
    class Terminal:
        def isatty(self):
            return True

    config = configs.TrainConfig.from_dict({})
    assert config.verbose is None
    assert config.keras_verbose(Terminal()) == 1
    assert configs.TrainConfig.from_dict({"verbose": 2}).keras_verbose(Terminal()) == 2
    assert configs.TrainConfig.from_dict({"verbose": 0}).keras_verbose(Terminal()) == 0
