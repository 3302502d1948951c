"""RandAugment (``keras_vit.data.randaugment``) against big_vision's own TensorFlow operations
(``tests/fixtures/randaugment``: every operation, every magnitude and sign, and the whole policy
given big_vision's draws, to the bit), and the policy's own draws: a function of each image's
key alone, the operations chosen uniformly."""

import pathlib

import numpy as np
import pytest

from keras_vit.data import preprocessing
from keras_vit.data import randaugment as ra
from tests.blocked_imports import run_without

pytestmark = pytest.mark.backend_independent  # numpy only

FIXTURE = np.load(pathlib.Path(__file__).parents[1] / "fixtures" / "randaugment" /
                  "big_vision_ops.npz")
GROUPS = ("rgb", "wide", "grey")


def _cases(name):
    """``(group, magnitude, sign, expected)`` of one operation in the fixture."""
    for key in FIXTURE.files:
        group, op, *rest = key.split("/")
        if op == name and group in GROUPS and len(rest) == 2:
            magnitude, sign = rest
            yield group, float(magnitude), int(sign), FIXTURE[key]


def test_the_fixture_holds_every_operation_of_the_policy():
    names = {key.split("/")[1] for key in FIXTURE.files if key.split("/")[0] in GROUPS}
    assert names - {"images", "cutout_centres"} == set(ra.OPERATIONS)
    assert len(ra.OPERATIONS) == 16


@pytest.mark.parametrize("name", ra.OPERATIONS)
def test_every_operation_equals_big_vision_to_the_bit(name):
    """Every group (RGB, non-square, grey), magnitude and sign: uint8 equality."""
    cases = list(_cases(name))
    assert len(cases) >= 3
    for group, magnitude, sign, expected in cases:
        images, centres = FIXTURE[f"{group}/images"], FIXTURE[f"{group}/cutout_centres"]
        got = ra.apply(name, images, magnitude, sign, centres[:, 0], centres[:, 1])
        assert got.dtype == np.uint8 and got.shape == images.shape
        np.testing.assert_array_equal(got, expected, err_msg=f"{group} {name} {magnitude} {sign}")


@pytest.mark.parametrize("name", ra.OPERATIONS)
def test_the_magnitude_maps_are_big_vision_s(name):
    for key in FIXTURE.files:
        op, magnitude, field = key.split("/") if key.count("/") == 2 else (None, None, None)
        if op == name and field == "parameters":
            stored = FIXTURE[key]
            value = ra.parameter(name, float(magnitude))
            assert (value is None) == (stored.size == 0), key
            if value is not None:
                assert value == stored[0], key


@pytest.mark.parametrize("magnitude", [5, 10, 15, 20])
def test_pixel_scale_scales_the_shifts_and_cutout_and_nothing_else(magnitude):
    """big_vision's pixel sizes are for 224-pixel images; ``pixel_scale`` keeps their share of
    another size, and 1 is big_vision's."""
    for name in ra.OPERATIONS:
        scaled, plain = ra.parameter(name, magnitude, 28 / 224), ra.parameter(name, magnitude)
        if name.startswith("Translate"):
            assert scaled == pytest.approx(plain * 28 / 224)
        elif name == "Cutout":
            assert scaled == int(magnitude / 10 * 40 * 28 / 224) < plain
        else:
            assert scaled == plain, name
    images, keys = _images(24), preprocessing.example_keys(0, 0, np.arange(24))
    np.testing.assert_array_equal(ra.randaugment(images, 2, magnitude, keys, 1.0),
                                  ra.randaugment(images, 2, magnitude, keys))
    shifted = ra.apply("TranslateX", images, magnitude, pixel_scale=0.5)
    np.testing.assert_array_equal(shifted, ra.translate_x(images, ra.parameter(
        "TranslateX", magnitude) / 2))


@pytest.mark.parametrize("pixel_scale", [0, -0.5, float("nan"), True, "1", None])
def test_pixel_scale_is_validated(pixel_scale):
    with pytest.raises(ValueError, match="pixel_scale must be a number > 0"):
        ra.randaugment(_images(2), 2, 10, preprocessing.example_keys(0, 0, [0, 1]), pixel_scale)


@pytest.mark.parametrize("magnitude", [0, 10, 15, 20])
def test_the_policy_equals_big_vision_s_given_its_draws(magnitude):
    """Three layers in a row, each image's operation always applied, every operation chosen
    somewhere over the four magnitudes: big_vision's ``distort_image_with_randaugment``."""
    images, prefix = FIXTURE["rgb/images"], f"policy/{magnitude}"
    ops, signs, centres = (FIXTURE[f"{prefix}/{name}"] for name in ("ops", "signs", "centres"))
    out = images
    for layer in range(len(ops)):
        out = ra.apply_layer(out, magnitude, ops[layer], signs[layer], centres[layer, :, 0],
                             centres[layer, :, 1])
    np.testing.assert_array_equal(out, FIXTURE[f"{prefix}/output"])
    assert (out != images).any()


def test_the_policy_fixture_chooses_every_operation():
    chosen = {int(op) for m in (0, 10, 15, 20) for op in FIXTURE[f"policy/{m}/ops"].ravel()}
    assert chosen == set(range(len(ra.OPERATIONS)))


def _images(count, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (count, 12, 10, 3), dtype=np.uint8)


def test_the_same_keys_give_the_same_images():
    images, keys = _images(24), preprocessing.example_keys(3, 1, np.arange(24))
    first = ra.randaugment(images, 2, 15, keys)
    np.testing.assert_array_equal(first, ra.randaugment(images.copy(), 2, 15, keys.copy()))
    assert (first != images).any()
    other = ra.randaugment(images, 2, 15, preprocessing.example_keys(3, 2, np.arange(24)))
    assert (other != first).any()  # another epoch, other draws


def test_a_batch_split_or_shuffled_gives_the_same_images_as_whole():
    """An example is augmented alike however the batch is split over devices and processes,
    in whatever order, or resumed from its (seed, epoch, index)."""
    images, indices = _images(30), np.arange(100, 130)
    whole = ra.randaugment(images, 3, 10, preprocessing.example_keys(0, 4, indices))
    halves = [ra.randaugment(images[part], 3, 10, preprocessing.example_keys(0, 4, indices[part]))
              for part in (slice(0, 13), slice(13, 30))]
    np.testing.assert_array_equal(np.concatenate(halves), whole)
    order = np.random.default_rng(1).permutation(30)
    shuffled = ra.randaugment(images[order], 3, 10, preprocessing.example_keys(0, 4,
                                                                              indices[order]))
    np.testing.assert_array_equal(shuffled, whole[order])


def test_no_layer_changes_nothing_and_grey_images_stay_grey():
    images, keys = _images(4), preprocessing.example_keys(0, 0, np.arange(4))
    np.testing.assert_array_equal(ra.randaugment(images, 0, 20, keys), images)
    grey = images[..., :1]
    out = ra.randaugment(grey, 2, 20, keys)
    assert out.shape == grey.shape and out.dtype == np.uint8


@pytest.mark.parametrize("num_layers", [-1, 1.5, True, "2", None])
def test_num_layers_is_validated(num_layers):
    with pytest.raises(ValueError, match="num_layers must be a whole number >= 0"):
        ra.randaugment(_images(2), num_layers, 10, preprocessing.example_keys(0, 0, [0, 1]))


@pytest.mark.parametrize("magnitude", [-1, 30.5, float("nan"), True, "10", None])
def test_magnitude_is_validated(magnitude):
    with pytest.raises(ValueError, match="magnitude must be a number from 0 to 30"):
        ra.randaugment(_images(2), 2, magnitude, preprocessing.example_keys(0, 0, [0, 1]))


def test_images_and_keys_are_validated():
    keys = preprocessing.example_keys(0, 0, [0, 1])
    with pytest.raises(ValueError, match="images must be uint8"):
        ra.randaugment(_images(2).astype(np.float32), 2, 10, keys)
    with pytest.raises(ValueError, match="images must be uint8"):
        ra.randaugment(_images(2)[0], 2, 10, keys)
    with pytest.raises(ValueError, match="one key per image"):
        ra.randaugment(_images(3), 2, 10, keys)


def test_the_policy_s_draws_are_clear_of_the_crop_and_the_flip():
    used = {preprocessing._TOP, preprocessing._LEFT, preprocessing._FLIP, preprocessing._WINDOW}
    assert ra.FIRST_DRAW > max(used) and ra.DRAWS_PER_LAYER >= 4


def _record(monkeypatch, chosen):
    """Replace every operation by one that records how many images, and with which signs, it
    was given, and returns them unchanged."""
    for name in ra.OPERATIONS:
        def record(images, value, signs, rows, columns, name=name):
            chosen.append((name, len(images), signs.copy()))
            return images
        monkeypatch.setitem(ra._APPLY, name, record)


def test_the_operations_are_chosen_uniformly_and_signs_half_and_half(monkeypatch):
    """80,000 images, 2 layers: each layer's counts pass a chi-square test at 1e-4 (15 degrees
    of freedom: 44.3), which a choice missing one operation or favouring one by a tenth
    fails; the signs are negative 50% +- 1%."""
    chosen = []
    _record(monkeypatch, chosen)
    count = 80_000
    images = np.zeros((count, 2, 2, 1), np.uint8)
    ra.randaugment(images, 2, 10, preprocessing.example_keys(7, 0, np.arange(count)))
    layers = [chosen[:16], chosen[16:]] if len(chosen) == 32 else None
    assert layers is not None, [name for name, _, _ in chosen]
    expected = count / len(ra.OPERATIONS)
    for layer in layers:
        counts = np.array([n for _, n, _ in layer], np.float64)
        assert counts.sum() == count
        assert ((counts - expected) ** 2 / expected).sum() < 44.3, counts
    signs = np.concatenate([s for _, _, s in chosen])
    assert abs((signs < 0).mean() - 0.5) < 0.01


def test_the_chi_square_bound_fails_a_biased_choice():
    """The bound of the test above is not too loose: one operation drawn 10% more often (and
    the rest a little less) fails it at this sample size."""
    count, expected = 80_000, 5000.0
    counts = np.full(16, (count - 5500) / 15)
    counts[0] = 5500
    assert ((counts - expected) ** 2 / expected).sum() > 44.3


def test_randaugment_needs_no_tensorflow():
    result = run_without({"tensorflow"}, """
import numpy as np
from keras_vit.data import preprocessing, randaugment
images = np.zeros((4, 8, 8, 3), np.uint8)
out = randaugment.randaugment(images, 2, 10, preprocessing.example_keys(0, 0, range(4)))
assert out.shape == images.shape
assert "tensorflow" not in sys.modules
""")
    assert result.returncode == 0, result.stderr[-3000:]
