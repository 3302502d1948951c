"""attention_weights, attention_rollout, rollout_to_image, mean_attention_distance."""

import itertools
import math

import keras
import numpy as np
import pytest
from inspection_helpers import build_vit, to_numpy, zero_query_key

from keras_vit import ViTConfig
from keras_vit.inspection import (
    attention_maps,
    attention_rollout,
    attention_weights,
    effective_patch_count,
    mean_attention_distance,
    patch_centres,
    rollout_object_share,
    rollout_to_image,
    uniform_attention_distance,
)


@pytest.fixture(scope="module")
def token_vit():
    return build_vit("token")


@pytest.fixture(scope="module")
def gap_vit():
    return build_vit("gap")


@pytest.fixture
def vit_images():
    return np.random.default_rng(0).uniform(-1, 1, (3, 16, 16, 3)).astype("float32")


@pytest.mark.parametrize("classifier, tokens", [("token", 17), ("gap", 16)])
def test_attention_weights_shapes_and_rows(classifier, tokens, vit_images, request):
    model = request.getfixturevalue(f"{classifier}_vit")
    before = to_numpy(model(vit_images))
    weights = attention_weights(model, vit_images, batch_size=2)
    assert len(weights) == 3
    for layer in weights:
        assert layer.shape == (3, 2, tokens, tokens) and layer.dtype == np.float32
        np.testing.assert_allclose(layer.sum(-1), 1.0, atol=1e-5)
        assert layer.min() >= 0
    np.testing.assert_array_equal(to_numpy(model(vit_images)), before)
    assert len(model.outputs) == 1


def test_first_layer_weights_are_the_softmax_of_the_first_block(token_vit, vit_images):
    """Recompute block 0's attention from its weights with numpy."""
    tokens, _ = token_vit.backbone.encoder.embed(token_vit.get_layer("embedding")(vit_images))
    x = to_numpy(tokens).astype("float64")
    block = token_vit.get_layer("encoderblock_0")
    norm = block.LayerNorm_0
    y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)
    y = y * to_numpy(norm.gamma) + to_numpy(norm.beta)
    attention = block.MultiHeadDotProductAttention_1
    q, k = ((y @ to_numpy(p.kernel) + to_numpy(p.bias)).reshape(*y.shape[:2], 2, 8)
            for p in (attention.query, attention.key))
    logits = np.einsum("bqhk,bshk->bhqs", q, k) / math.sqrt(8)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    np.testing.assert_allclose(attention_weights(token_vit, vit_images)[0], probs, atol=1e-5)


def test_single_layer_model_still_gives_a_list(vit_images):
    weights = attention_weights(build_vit(num_layers=1), vit_images)
    assert isinstance(weights, list) and len(weights) == 1


@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_uniform_attention_gives_a_flat_rollout(classifier, vit_images):
    model = zero_query_key(build_vit(classifier))
    for layer in attention_weights(model, vit_images):
        np.testing.assert_allclose(layer, 1.0 / layer.shape[-1], rtol=1e-5)
    rollout = attention_rollout(model, vit_images)
    assert rollout.shape == (3, 4, 4)
    # A' = (J/T + I)/2 for T tokens; these commute, so after L layers a query keeps 2^-L on
    # itself and spreads the rest evenly: (1 - 2^-L)/T on each token (1/T for the GAP mean).
    tokens = 17 if classifier == "token" else 16
    expected = (1 - 0.5**3) / tokens if classifier == "token" else 1 / tokens
    np.testing.assert_allclose(rollout, expected, rtol=1e-5)


@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_rollout_multiplies_later_layers_on_the_left(classifier, vit_images, request):
    model = request.getfixturevalue(f"{classifier}_vit")
    weights = attention_weights(model, vit_images)
    expected = []
    for b in range(len(vit_images)):
        joint = np.eye(weights[0].shape[-1])
        for layer in weights:
            mixed = 0.5 * layer[b].astype("float64").mean(0) + 0.5 * np.eye(len(joint))
            joint = mixed @ joint
        row = joint[0, 1:] if classifier == "token" else joint.mean(0)
        expected.append(row.reshape(4, 4))
    np.testing.assert_allclose(attention_rollout(model, vit_images), expected, atol=1e-6)


def test_rollout_to_image():
    maps = np.random.default_rng(1).uniform(0.1, 1, (2, 4, 4))
    images = rollout_to_image(maps, 16)
    assert images.shape == (2, 16, 16)
    np.testing.assert_allclose(images.max(axis=(1, 2)), 1.0, rtol=1e-6)
    raw = rollout_to_image(maps, (8, 12), normalize=False)
    assert raw.shape == (2, 8, 12)
    assert maps.min() - 1e-6 <= raw.min() and raw.max() <= maps.max() + 1e-6
    np.testing.assert_allclose(rollout_to_image(np.full((2, 2), 0.3), 6, normalize=False), 0.3,
                               rtol=1e-6)
    peak = np.zeros((4, 4))
    peak[0, 3] = 1.0
    image = rollout_to_image(peak, 16)
    assert np.unravel_index(image.argmax(), image.shape)[0] < 4
    assert np.unravel_index(image.argmax(), image.shape)[1] >= 12
    with pytest.raises(ValueError, match="rows, cols"):
        rollout_to_image(np.zeros((1, 2, 2, 2)), 8)


def _mean_pairwise_patch_distance(image_size, patch_size):
    """Mean distance over all ordered pairs of patch centres, from the pixels of each patch."""
    sides = range(0, image_size, patch_size)
    centres = [
        (np.mean(np.arange(top, top + patch_size)), np.mean(np.arange(left, left + patch_size)))
        for top, left in itertools.product(sides, sides)
    ]
    total = sum(math.dist(a, b) for a in centres for b in centres)
    return total / len(centres) ** 2


@pytest.mark.parametrize("classifier", ["token", "gap"])
@pytest.mark.parametrize("image_size, patch_size", [(16, 4), (32, 8)])
def test_uniform_attention_distance_is_the_mean_pairwise_distance(
    classifier, image_size, patch_size
):
    model = zero_query_key(build_vit(classifier, image_size=image_size, patch_size=patch_size))
    images = np.random.default_rng(2).uniform(-1, 1, (2, image_size, image_size, 3))
    distance = mean_attention_distance(model, images.astype("float32"))
    assert distance.shape == (3, 2)
    expected = _mean_pairwise_patch_distance(image_size, patch_size)
    np.testing.assert_allclose(distance, expected, rtol=1e-5)
    assert uniform_attention_distance(model) == pytest.approx(expected)


def test_batching_does_not_change_the_results(token_vit, vit_images):
    # the analyses reduce one batch at a time; the batch size must not matter
    for function in (mean_attention_distance, attention_rollout, attention_maps):
        np.testing.assert_allclose(function(token_vit, vit_images, batch_size=1),
                                   function(token_vit, vit_images, batch_size=32), rtol=1e-5,
                                   atol=1e-7)


@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_attention_maps_are_the_rows_reaching_the_classifier(classifier, vit_images, request):
    model = request.getfixturevalue(f"{classifier}_vit")
    maps = attention_maps(model, vit_images)
    weights = attention_weights(model, vit_images)
    assert maps.shape == (3, 3, 2, 4, 4)  # images, layers, heads, grid
    for layer, layer_weights in enumerate(weights):
        if classifier == "token":
            expected = layer_weights[:, :, 0, 1:]
        else:
            expected = layer_weights.mean(axis=2)
        np.testing.assert_allclose(maps[:, layer].reshape(3, 2, 16), expected, rtol=1e-6)
    flat = attention_maps(zero_query_key(build_vit(classifier)), vit_images[:1])
    np.testing.assert_allclose(flat, 1 / (17 if classifier == "token" else 16), rtol=1e-5)


def test_attention_distance_of_a_trained_like_model_is_bounded(token_vit, vit_images):
    distance = mean_attention_distance(token_vit, vit_images)
    assert distance.shape == (3, 2)
    assert np.all(distance >= 0) and np.all(distance <= math.hypot(12, 12) + 1e-9)


def test_patch_centres_are_spaced_by_the_model_stride():
    """A hybrid's patches: 4 x 4 on the feature map of a stem that downsamples 8 times."""
    config = ViTConfig.from_keywords(image_size=(64, 96), patch_size=4, hidden_size=8,
                                     num_layers=1, num_heads=2, mlp_dim=16,
                                     stem=dict(num_layers=(1, 1), width_factor=0.5))
    expected = [[16, 16], [16, 48], [16, 80], [48, 16], [48, 48], [48, 80]]
    np.testing.assert_array_equal(patch_centres(config), expected)
    np.testing.assert_array_equal(patch_centres(config.replace(image_size=None,
                                                               position_embedding_grid=(1, 1)),
                                                (64, 96)), expected)
    with pytest.raises(ValueError, match="any image size; pass image_size"):
        patch_centres(config.replace(image_size=None, position_embedding_grid=(1, 1)))


def test_bad_inputs_are_rejected(token_vit):
    with pytest.raises(ValueError, match=r"images\[None\]"):
        attention_weights(token_vit, np.zeros((16, 16, 3), "float32"))
    with pytest.raises(ValueError, match="image_size"):
        attention_rollout(token_vit, np.zeros((1, 32, 32, 3), "float32"))
    with pytest.raises(ValueError, match="3\\)"):
        mean_attention_distance(token_vit, np.zeros((1, 16, 16, 1), "float32"))
    with pytest.raises(ValueError, match="empty batch"):
        attention_rollout(token_vit, np.zeros((0, 16, 16, 3), "float32"))
    with pytest.raises(ValueError, match="batch_size"):
        attention_weights(token_vit, np.zeros((1, 16, 16, 3), "float32"), batch_size=0)
    with pytest.raises(TypeError, match="ViTImageClassifier or ViTBackbone"):
        attention_weights(keras.Sequential([keras.layers.Dense(2)]), np.zeros((1, 4)))


def test_a_backbone_gives_what_its_classifier_gives(token_vit, vit_images):
    for function in (attention_weights, attention_rollout, attention_maps,
                     mean_attention_distance):
        np.testing.assert_array_equal(function(token_vit.backbone, vit_images),
                                      function(token_vit, vit_images))
    assert uniform_attention_distance(token_vit.backbone) == uniform_attention_distance(
        token_vit.config)


def test_a_model_of_any_size_reads_the_grid_of_its_images():
    model = zero_query_key(build_vit("gap", image_size=None, position_embedding_grid=(4, 4)))
    images = np.random.default_rng(4).uniform(-1, 1, (2, 16, 32, 3)).astype("float32")
    assert attention_weights(model, images)[0].shape == (2, 2, 32, 32)
    np.testing.assert_allclose(attention_rollout(model, images), 1 / 32, rtol=1e-5)
    assert attention_maps(model, images).shape == (2, 3, 2, 4, 8)
    np.testing.assert_allclose(mean_attention_distance(model, images),
                               uniform_attention_distance(model, (16, 32)), rtol=1e-5)
    with pytest.raises(ValueError, match="not a multiple"):
        attention_rollout(model, images[:, :, :30])
    with pytest.raises(ValueError, match=r"\(batch, height, width, 3\)"):
        attention_maps(model, images[..., :1])


def test_an_axial_vit_gives_row_and_column_weights_and_no_rollout(vit_images):
    model = build_vit("token", num_layers=1, axial=True)
    row, column = attention_weights(model, vit_images)
    assert row.shape == (3, 5, 2, 4, 4) and column.shape == (3, 4, 2, 5, 5)  # the class row
    np.testing.assert_allclose(row.sum(-1), 1.0, atol=1e-5)
    for function in (attention_rollout, attention_maps, mean_attention_distance):
        with pytest.raises(ValueError, match="Axial-ViT attends within rows"):
            function(model, vit_images)


def _partner(offset):
    """Patch index -> its partner on a 4x4 grid: the patch ``offset`` (rows, cols) away, pairs
    swapped (an involution), so every patch has a partner exactly that far."""
    def swap(value, step):
        return value + step if (value // step) % 2 == 0 else value - step

    partner = []
    for index in range(16):
        row, col = divmod(index, 4)
        row = swap(row, offset[0]) if offset[0] else row
        col = swap(col, offset[1]) if offset[1] else col
        partner.append(row * 4 + col)
    return partner


def _attending_to_partners(offsets):
    """A GAP ViT (16x16 images, 4x4 patches) whose head h sends each query patch's attention to
    the patch ``offsets[h]`` away: zero patch projection, position embeddings that are one-hot
    per patch (one copy per head's 16 dimensions), keys equal to the normalised tokens and
    queries equal to the partner's, scaled up so the softmax is one-hot."""
    heads = len(offsets)
    model = build_vit("gap", num_layers=1, hidden_size=16 * heads, num_heads=heads)
    embedding = model.get_layer("embedding")
    for variable in embedding.weights:
        variable.assign(np.zeros(variable.shape, "float32"))
    model.get_layer("posembed_input").pos_embedding.assign(
        np.tile(np.eye(16, dtype="float32"), (1, heads))[None])
    attention = model.get_layer("encoderblock_0").MultiHeadDotProductAttention_1
    query = np.zeros((16 * heads, heads, 16), "float32")
    key = np.zeros_like(query)
    for head, offset in enumerate(offsets):
        for patch, partner in enumerate(_partner(offset)):
            query[16 * head + patch, head, partner] = 200.0
            key[16 * head + patch, head, patch] = 1.0
    attention.query.kernel.assign(query.reshape(attention.query.kernel.shape))
    attention.key.kernel.assign(key.reshape(attention.key.kernel.shape))
    for variable in (attention.query.bias, attention.key.bias):
        variable.assign(np.zeros(variable.shape, "float32"))
    return model


def test_attention_distance_weights_each_patch_by_its_attention():
    # heads attending to their own patch, one column, two rows and one diagonal step away
    offsets = [(0, 0), (0, 1), (2, 0), (1, 1)]
    model = _attending_to_partners(offsets)
    images = np.random.default_rng(3).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    weights = to_numpy(attention_weights(model, images)[0])
    for head, offset in enumerate(offsets):  # the construction gives one-hot attention
        expected = np.broadcast_to(np.eye(16)[_partner(offset)], (2, 16, 16))
        np.testing.assert_allclose(weights[:, head], expected, atol=1e-6)
    distance = mean_attention_distance(model, images)
    np.testing.assert_allclose(distance, [[0.0, 4.0, 8.0, 4.0 * math.sqrt(2)]], rtol=1e-5)


def test_rollout_object_share_against_the_object_mask():
    images = np.full((2, 8, 8, 1), -1.0)
    images[:, 4:, 4:] = 0.5  # the object: the bottom-right patch of a 2 x 2 grid
    images[1, 0, 0] = -0.5  # one bright pixel: patch mean -0.97, within the tolerance
    maps = np.array([[[1.0, 1.0], [1.0, 1.0]], [[0.0, 1.0], [1.0, 2.0]]])
    on_object, patches = rollout_object_share(maps, images)
    np.testing.assert_allclose(on_object, [0.25, 0.5])
    np.testing.assert_allclose(patches, [0.25, 0.25])  # a uniform map's share
    with pytest.raises(ValueError, match="split into the maps' 3 x 3 grid"):
        rollout_object_share(np.ones((2, 3, 3)), images)
    with pytest.raises(ValueError, match="same batch"):
        rollout_object_share(maps[:1], images)


def test_effective_patch_count_of_uniform_sharp_and_split_maps(token_vit, vit_images):
    maps = np.zeros((3, 4, 4))
    maps[0] = 1 / 17  # uniform attention of a class token (its own share left out)
    maps[1, 2, 3] = 0.6  # all on one patch
    maps[2, 0, :3] = 0.3  # even over three
    np.testing.assert_allclose(effective_patch_count(maps), [16.0, 1.0, 3.0])
    counts = effective_patch_count(attention_maps(token_vit, vit_images))
    assert counts.shape == (3, 3, 2) and np.all((counts >= 1) & (counts <= 16 + 1e-9))
    flat = attention_maps(zero_query_key(build_vit("token")), vit_images[:1])
    np.testing.assert_allclose(effective_patch_count(flat), 16.0)
    with pytest.raises(ValueError, match="non-negative"):
        effective_patch_count(-maps)
