"""Parameter counts of every registered model name (224x224 RGB input, 1000 classes).

Every name that ``keras_vit.model_names()`` lists must have a row here: a new name without one
fails ``test_every_registered_name_has_a_count``. Models are built without initialising their
weights (``shapes_only``), so the 900M-parameter BiT-R152x4 costs milliseconds.

Where the numbers come from: the plain ViT rows equal the closed form below, written from the
paper's Eqs. 1-4, and match Table 1 of the paper (B 86M, H 632M; Table 1 prints 307M for L,
which none of L/16 and L/32 reaches at 224 px with a 1000-class head: 304.3M and 306.5M). The
BiT and hybrid rows are the counts of the architectures that load the official checkpoints
(tests/checkpoints), kept here so that a change to them is seen.
"""

import pytest

import keras_vit
from conftest import shapes_only
from keras_vit.models.registry import VIT_SIZES

COUNTS = {
    "ViT-Ti/16": 5_717_416,
    "ViT-S/16": 22_050_664,
    "ViT-S/32": 22_878_952,
    "ViT-B/8": 86_576_872,
    "ViT-B/16": 86_567_656,
    "ViT-B/32": 88_224_232,
    "ViT-L/16": 304_326_632,
    "ViT-L/32": 306_535_400,
    "ViT-H/14": 632_045_800,
    "ViT-Ti/4": 6_143_656,
    "BiT-R26x1": 15_987_496,
    "BiT-R50x1": 25_549_352,
    "BiT-R50x2": 97_988_712,
    "BiT-R50x3": 217_319_080,
    "BiT-R101x1": 44_541_480,
    "BiT-R101x3": 387_934_888,
    "BiT-R152x1": 60_185_128,
    "BiT-R152x2": 236_335_208,
    "BiT-R152x4": 936_533_224,
    "BiT-R200x3": 568_633_000,
    "R50+ViT-B/16": 98_659_112,
    "R50+ViT-B/32": 110_945_832,
    "R50+ViT-L/16": 316_483_624,
    "R50+ViT-L/32": 328_994_856,
    "R26+ViT-S/32": 36_431_912,
    "R+ViT-Ti/16": 6_337_704,
    # Closed forms and the reference implementation's counts: tests/models/test_axial_models.py.
    "Axial-ViT-B/16": 171_622_120,
    "Axial-ViT-B/32": 173_278_696,
    "AxialResNet50": 19_373_640,
}
# Paper Table 1, in millions (ViT-Base, ViT-Huge).
TABLE_1 = {"B": 86, "H": 632}


def _names():
    # model_names() shows some examples with a note: "ViT-Ti/4 (any size with any patch size)"
    return [name.split(" (")[0] for name in keras_vit.model_names()]


def _count(name):
    with shapes_only():
        return keras_vit.create_model(name, image_size=224, num_classes=1000).count_params()


def vit_formula(size, patch, image_size=224, channels=3, classes=1000):
    """ViT parameters from the paper: Eq. 1 (patch projection, class token, position
    embeddings), L blocks of Eqs. 2-3 (two LayerNorms, Q/K/V/output projections, a 2-layer
    MLP, all with biases), the final LayerNorm of Eq. 4, and the head."""
    d, layers, mlp = (VIT_SIZES[size][k] for k in ("hidden_size", "num_layers", "mlp_dim"))
    tokens = (image_size // patch) ** 2 + 1
    embedding = patch * patch * channels * d + d + d + tokens * d
    block = 2 * 2 * d + 4 * (d * d + d) + (d * mlp + mlp) + (mlp * d + d)
    return embedding + layers * block + 2 * d + d * classes + classes


def test_every_registered_name_has_a_count():
    missing = [name for name in _names() if name not in COUNTS]
    assert not missing, f"add the parameter count of {missing} to COUNTS in {__file__}"


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_parameter_count(name):
    assert _count(name) == COUNTS[name]


@pytest.mark.parametrize("name", [n for n in COUNTS if n.startswith("ViT-")])
def test_vit_counts_follow_the_paper(name):
    size, patch = name[4:].split("/")
    assert COUNTS[name] == vit_formula(size, int(patch))
    if size in TABLE_1 and patch in ("14", "16"):
        assert COUNTS[name] // 10**6 == TABLE_1[size]  # the paper truncates: 86.57M is "86M"


def test_published_spellings_count_the_same():
    assert _count("ViT-B_16") == COUNTS["ViT-B/16"]
    assert _count("BiT-M-R50x1") == COUNTS["BiT-R50x1"]
    assert _count("R26_S_32") == COUNTS["R26+ViT-S/32"]
