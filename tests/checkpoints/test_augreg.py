"""AugReg by name: the index (tests/fixtures/augreg/index.csv, the real schema) and tiny official
files under the names it lists, served from a mirror on 127.0.0.1 into a fresh Keras cache."""

import os
import shutil

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints import augreg, official
from tests import mirror
from tests.conftest import fixture_path

INDEX = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "augreg", "index.csv")
B16 = "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"
# published name -> the tiny official file served under it (each a different architecture, so
# that a wrong choice shows).
FILES = {
    B16: "vit_tiny_token_rep16.npz",
    B16 + "--imagenet2012-steps_20k-lr_0.03-res_384": "vit_tiny_token_norep.npz",
    B16 + "--imagenet2012-steps_20k-lr_0.01-res_224": "vit_tiny_gap_norep.npz",
}


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A mirror with the index and the files above; an empty Keras cache."""
    root = tmp_path / "mirror"
    mirror.put(root, augreg.INDEX_URL, INDEX)
    for name, fixture in FILES.items():
        mirror.put(root, official.VIT_URL.format(name="augreg/" + name), fixture_path(fixture))
    url, server = mirror.serve(root)
    monkeypatch.setenv("KERAS_VIT_MIRROR", url)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    yield root
    server.shutdown()


def test_index_is_read_in_its_real_schema(served, tmp_path):
    rows = augreg.read_index()
    assert len(rows) == 10 and rows[0]._fields == augreg.COLUMNS
    row = rows[1]
    assert (row.name, row.ds, row.aug, row.wd, row.adapt_resolution, row.adapt_final_test) == (
        "B/16", "i21k", "medium1", 0.1, 384, 0.85486)
    assert isinstance(row.adapt_steps, int) and row.adapt_filename.endswith("res_384")
    assert rows[6].infer_samples_per_sec is None  # an empty cell
    assert augreg.models() == ["B/16", "R+Ti/16", "R26+S/32"]
    cached = tmp_path / "keras_home" / "keras_vit" / "augreg" / "index.csv"
    assert cached.is_file()
    os.remove(mirror.location(served, augreg.INDEX_URL))  # from now on, from the cache
    assert augreg.read_index() == rows


def test_recommended_is_the_best_i21k_final_val():
    for spelling in ("ViT-B/16", "B/16", "B_16", "ViT-B_16"):
        best = augreg.recommended(spelling, index=INDEX)
        # not the i1k file, whose final_val is higher (another validation set)
        assert best.filename == B16 and best.ds == "i21k" and best.final_val == 0.4731
    assert best._fields == augreg.UPSTREAM_COLUMNS
    hybrid = augreg.recommended("R+ViT-Ti/16", index=INDEX)
    assert hybrid == augreg.recommended("R_Ti_16", index=INDEX)
    assert hybrid.name == "R+Ti/16" and hybrid.final_val == 0.3901
    assert augreg.recommended("R26+ViT-S/32", index=INDEX).aug == "light1"


def test_query_filters_and_ranks_by_downstream_validation():
    rows = augreg.query("ViT-B/16", adapt_ds="imagenet2012", index=INDEX)
    assert [r.adapt_final_val for r in rows] == [0.8701, 0.8603, 0.8402, 0.8105]
    assert [r.ds for r in augreg.query("B/16", ds="i1k", index=INDEX)] == ["i1k"]
    rows = augreg.query("B/16", aug="medium1", wd=0.1, do=0.0, sd=0.0, adapt_ds="cifar100",
                        adapt_resolution=384, index=INDEX)
    assert [(r.adapt_lr, r.adapt_steps, r.adapt_final_test) for r in rows] == [
        (0.01, 10000, 0.9262)]
    best = augreg.query("B/16", recommended_only=True, index=INDEX)
    assert {r.filename for r in best} == {B16} and len(best) == 4
    assert len(augreg.query(recommended_only=True, index=INDEX)) == 8  # three models
    pets = augreg.query(adapt_ds="oxford_iiit_pet", adapt_steps=500, index=INDEX)
    # equal adapt_final_val keeps the index order (224 px listed before 384 px)
    assert [(r.name, r.adapt_resolution) for r in pets[:3]] == [
        ("R26+S/32", 224), ("R26+S/32", 384), ("R26+S/32", 384)]


def test_short_names():
    name = augreg.checkpoint_name
    assert name("augreg/ViT-B/16", index=INDEX) == "augreg/" + B16
    assert name("augreg/B/16:imagenet2012", index=INDEX).endswith("lr_0.03-res_384")
    assert name("augreg/B_16:imagenet2012@224", index=INDEX).endswith("lr_0.01-res_224")
    assert name("augreg/ViT-B/16:cifar100", index=INDEX).endswith(
        "cifar100-steps_10k-lr_0.01-res_384")
    assert name("augreg/R26+ViT-S/32:oxford_iiit_pet", index=INDEX).endswith("lr_0.003-res_224")
    assert name("augreg/R+ViT-Ti/16", index=INDEX) == (
        "augreg/R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0")
    assert augreg.is_short_name("augreg/R+ViT-Ti/16:kitti@384")
    assert not augreg.is_short_name("augreg/" + B16)  # a published file name is kept as it is
    assert not augreg.is_short_name("imagenet21k/ViT-B_16")


def test_load_checkpoint_by_short_name(served):
    model = keras_vit.load_checkpoint("augreg/ViT-B/16")
    assert model.config.head.representation_size == 16  # the recommended upstream file
    with np.load(fixture_path(FILES[B16])) as tensors:
        head = keras.ops.convert_to_numpy(model.get_layer("head").kernel)
        np.testing.assert_array_equal(head, tensors["head/kernel"])
    adapted = keras_vit.load_checkpoint("augreg/B/16:imagenet2012")
    assert (adapted.config.encoder.classifier, adapted.config.head.representation_size) == (
        "token", None)  # res_384
    gap = keras_vit.load_checkpoint("augreg/ViT-B/16:imagenet2012@224")
    assert gap.config.encoder.classifier == "gap"
    resized = keras_vit.load_checkpoint("augreg/ViT-B/16:imagenet2012", num_classes=3,
                                        image_size=48)
    assert (resized.config.head.num_classes, resized.config.image_size) == (3, (48, 48))
    # the full published name still loads the same file (a file name, never a short name)
    full = keras_vit.load_checkpoint("augreg/" + B16 + ".npz")
    assert full.count_params() == model.count_params()


def test_no_match_names_the_values_the_index_has():
    with pytest.raises(ValueError, match=r"adapt_ds='cifar10'; the index has adapt_ds in "
                                         r"\['cifar100', 'imagenet2012'\]"):
        augreg.query("B/16", adapt_ds="cifar10", index=INDEX)
    with pytest.raises(ValueError, match=r"adapt_resolution=512; the index has "
                                         r"adapt_resolution in \[224, 384\]"):
        augreg.checkpoint_name("augreg/ViT-B/16:imagenet2012@512", index=INDEX)
    with pytest.raises(ValueError, match=r"aug='strong1'.*aug in \['medium1', 'none', 'strong2'\]"):
        augreg.query("B/16", aug="strong1", index=INDEX)
    with pytest.raises(ValueError, match="no column adapt_dataset; filter on name, ds, epochs"):
        augreg.query("B/16", adapt_dataset="cifar100", index=INDEX)
    with pytest.raises(ValueError, match="whole number of pixels"):
        augreg.checkpoint_name("augreg/ViT-B/16:cifar100@high", index=INDEX)
    with pytest.raises(ValueError, match="not an AugReg short name.*augreg/<model>:<data set>"):
        augreg.checkpoint_name("augreg/ViT-B/16:cifar100:384", index=INDEX)


def test_unknown_model_names_the_models(served):
    with pytest.raises(ValueError, match=r"No AugReg model 'ViT-H/14' in the index; it has "
                                         r"B/16, R\+Ti/16, R26\+S/32"):
        keras_vit.load_checkpoint("augreg/ViT-H/14")
    with pytest.raises(ValueError, match="No AugReg model 'L/16'"):
        augreg.query("L/16")


def _serve_index(root, text):
    target = mirror.location(root, augreg.INDEX_URL)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "w") as f:
        f.write(text)


def test_index_without_columns_is_refused_and_not_kept(served, tmp_path):
    with open(INDEX) as f:
        lines = f.read().splitlines()
    keep = [i for i, column in enumerate(lines[0].split(","))
            if column not in ("final_val", "adapt_filename")]
    shorter = "\n".join(",".join(line.split(",")[i] for i in keep) for line in lines) + "\n"
    _serve_index(served, shorter)
    with pytest.raises(ValueError, match="the columns final_val, adapt_filename are missing.*"
                                         "it was deleted"):
        keras_vit.load_checkpoint("augreg/ViT-B/16")
    assert not list((tmp_path / "keras_home").rglob("index.csv"))
    local = tmp_path / "old_index.csv"
    local.write_text(shorter)
    with pytest.raises(ValueError, match="columns final_val, adapt_filename are missing.*"
                                         "Use a complete copy of https://storage.googleapis.com"):
        augreg.recommended("B/16", index=local)
    assert local.exists()  # the user's own file is reported, not deleted


def test_cut_off_or_damaged_index_is_refused(served, tmp_path):
    with open(INDEX) as f:
        whole = f.read()
    _serve_index(served, whole[:-40])  # ends inside the last file name
    with pytest.raises(ValueError, match="does not end with a line break.*cut short.*deleted"):
        augreg.recommended("B/16")
    assert not list((tmp_path / "keras_home").rglob("index.csv"))
    shutil.copyfile(INDEX, mirror.location(served, augreg.INDEX_URL))  # a retry succeeds
    assert augreg.recommended("B/16").filename == B16
    lines = whole.splitlines(keepends=True)
    damaged = tmp_path / "damaged.csv"
    damaged.write_text("".join(lines[:3]) + lines[3].replace("0.8455,", "") + "".join(lines[4:]))
    with pytest.raises(ValueError, match="line 4 has 20 fields where the header has 21"):
        augreg.read_index(damaged)
    damaged.write_text(whole.replace("0.85486", "n/a"))
    with pytest.raises(ValueError, match="line 3: adapt_final_test='n/a' is not a number"):
        augreg.read_index(damaged)
