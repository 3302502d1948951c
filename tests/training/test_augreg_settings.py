"""The AugReg settings by name: the table against big_vision's configuration
(tests/fixtures/augreg/big_vision.json, README there), every checkpoint name of the package's
index excerpt against its columns, and the errors."""

import dataclasses
import importlib.resources
import json
import os
import re

import pytest

from keras_vit.checkpoints.augreg import read_index, recommended
from keras_vit.training import augreg
from keras_vit.training.augreg import (
    AUGMENTATIONS,
    CHECKPOINT_AUGMENTATIONS,
    DEFAULTS,
    AugRegSetting,
    augreg_checkpoint_setting,
    augreg_setting,
)

pytestmark = pytest.mark.backend_independent  # a table of numbers, no backend code

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "augreg",
                       "big_vision.json")
EXCERPT = importlib.resources.files("keras_vit.checkpoints") / "augreg_index_excerpt.csv"
# What each augmentation of the excerpt's names stands for, written out (not read from the
# module), so that a changed table or pairing fails here.
EXCERPT_AUGMENTATIONS = {"none": (None, 0.0), "light1": ((2, 10), 0.2),
                         "medium1": ((2, 15), 0.2), "strong2": ((2, 20), 0.8)}


@pytest.fixture(scope="module")
def big_vision():
    with open(FIXTURE, encoding="utf-8") as handle:
        return json.load(handle)


def _randaug(text):
    """big_vision's preprocessing string as ``(layers, magnitude)``; '' is None."""
    if text == "":
        return None
    match = re.fullmatch(r"randaug\((\d+),(\d+)\)", text)
    assert match, text
    return int(match[1]), int(match[2])


def test_the_fixture_names_its_source(big_vision):
    assert big_vision["repository"] == "google-research/big_vision"
    assert big_vision["path"] == "big_vision/configs/vit_i1k.py"
    assert big_vision["commit"] in augreg.__doc__  # the module cites the commit it was held to


def test_the_table_is_big_vision_s(big_vision):
    defined = big_vision["augmentations"]
    assert list(AUGMENTATIONS) == list(defined)  # the same names, in the same order
    for name, entry in defined.items():
        assert entry["mixup"]["fold_in"] is None, name  # the one argument the table drops
        assert AUGMENTATIONS[name] == (_randaug(entry["randaug"]), entry["mixup"]["p"]), name


def test_the_defaults_are_big_vision_s_config(big_vision):
    config = big_vision["config"]
    # big_vision decays by wd times the schedule; the names' weight decay is times the rate
    assert DEFAULTS["weight_decay"] == pytest.approx(config["wd"] / config["lr"])
    assert not {"dropout", "stochastic_depth", "drop_path"} & set(config["model_options"])
    assert DEFAULTS["dropout"] == DEFAULTS["stochastic_depth"] == 0.0


@pytest.mark.parametrize("name", list(AUGMENTATIONS))
def test_each_name_gives_its_setting(name, big_vision):
    entry = big_vision["augmentations"][name]
    setting = augreg_setting(name, dropout=0.1, stochastic_depth=0.1, weight_decay=0.03)
    assert setting == AugRegSetting(name, _randaug(entry["randaug"]), entry["mixup"]["p"],
                                    0.1, 0.1, 0.03)
    assert augreg_setting(name) == dataclasses.replace(setting, dropout=0.0,
                                                       stochastic_depth=0.0, weight_decay=0.1)


def test_the_checkpoint_names_pair_with_big_vision_s_in_order():
    assert list(CHECKPOINT_AUGMENTATIONS) == ["none", "light0", "light1", "medium1", "medium2",
                                              "strong1", "strong2"]
    assert list(CHECKPOINT_AUGMENTATIONS.values()) == list(AUGMENTATIONS)


def test_every_excerpt_name_parses_to_its_columns():
    rows = read_index(EXCERPT)
    assert {row.aug for row in rows} == set(EXCERPT_AUGMENTATIONS)
    for row in rows:
        expected = augreg_checkpoint_setting(row)
        for name in (row.filename, row.adapt_filename, "augreg/" + row.filename,
                     row.adapt_filename + ".npz"):
            assert augreg_checkpoint_setting(name) == expected, name
        assert (expected.randaugment, expected.mixup) == EXCERPT_AUGMENTATIONS[row.aug]
        assert expected.augmentation == CHECKPOINT_AUGMENTATIONS[row.aug]
        assert (expected.weight_decay, expected.dropout, expected.stochastic_depth) == (
            row.wd, row.do, row.sd)


def test_an_upstream_row_parses_as_its_name():
    upstream = recommended("ViT-B/16", index=EXCERPT)  # an Upstream, not a Row
    assert augreg_checkpoint_setting(upstream) == augreg_checkpoint_setting(upstream.filename) == (
        augreg_setting("medium1"))


def test_the_setting_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        augreg_setting("none").dropout = 0.1


@pytest.mark.parametrize("name", ["heavy1", "light0", "Medium1", ""])
def test_an_unknown_augmentation_lists_the_names(name):
    with pytest.raises(ValueError, match="big_vision's names are none, light1, light2, "
                                         "medium1, medium2, strong1, strong2") as error:
        augreg_setting(name)
    assert ("augreg_checkpoint_setting" in str(error.value)) == (name == "light0")


@pytest.mark.parametrize("rates, axis, grid", [
    (dict(dropout=0.2), "dropout", "0.0, 0.1"),
    (dict(stochastic_depth=-0.1), "stochastic_depth", "0.0, 0.1"),
    (dict(weight_decay=0.05), "weight_decay", "0.03, 0.1"),
    (dict(weight_decay="0.1"), "weight_decay", "0.03, 0.1"),
    (dict(dropout=True), "dropout", "0.0, 0.1"),
])
def test_a_rate_off_the_grid_names_the_grid(rates, axis, grid):
    with pytest.raises(ValueError, match=f"AugReg's {axis} is one of {grid} "):
        augreg_setting("medium1", **rates)


def test_a_rate_a_rounding_away_is_the_grid_s():
    assert augreg_setting("none", weight_decay=0.1 + 1e-12).weight_decay == 0.1


@pytest.mark.parametrize("name", [
    "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0",  # no sd
    "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_x-do_0.0-sd_0.0",
    "augreg/ViT-B/16",  # a short name, not a file name
])
def test_a_malformed_checkpoint_name_shows_the_pattern(name):
    with pytest.raises(ValueError, match="not an AugReg checkpoint name: expected '<model>-"):
        augreg_checkpoint_setting(name)


def test_a_checkpoint_name_off_the_grid_is_refused():
    with pytest.raises(ValueError, match="they use none, light0, light1, medium1"):
        augreg_checkpoint_setting("B_16-i21k-300ep-lr_0.001-aug_light2-wd_0.1-do_0.0-sd_0.0")
    with pytest.raises(ValueError, match="AugReg's dropout is one of 0.0, 0.1"):
        augreg_checkpoint_setting("B_16-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.3-sd_0.0")
    with pytest.raises(TypeError, match="an AugReg checkpoint name or an index row"):
        augreg_checkpoint_setting(42)


def test_the_constructor_checks_the_table():
    with pytest.raises(ValueError, match=r"'medium1' is RandAugment \(2, 15\) with mixup p=0.2"):
        AugRegSetting("medium1", (2, 20), 0.2, 0.0, 0.0, 0.1)
    with pytest.raises(ValueError, match="AugReg's weight_decay is one of"):
        AugRegSetting("none", None, 0.0, 0.0, 0.0, 1e-4)  # big_vision's units, not the names'
