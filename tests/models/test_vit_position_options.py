"""ViTImageClassifier(position_embedding=..., position_embedding_placement=...): Table 8
variants."""

import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import ViTImageClassifier
from keras_vit.models.resize import weight_layers

VARIANTS = [
    ("learned_1d", "stem"),
    ("learned_1d", "every_layer"),
    ("learned_1d", "every_layer_shared"),
    ("learned_2d", "stem"),
    ("learned_2d", "every_layer"),
    ("learned_2d", "every_layer_shared"),
    ("relative", "stem"),
    ("none", "stem"),
]
ROWS = COLS = 2
HIDDEN = 8


def tiny(kind="learned_1d", placement="stem", classifier="token", num_layers=2):
    return ViTImageClassifier(
        image_size=8, patch_size=4, hidden_size=HIDDEN, num_layers=num_layers, num_heads=2,
        mlp_dim=16, num_classes=3, classifier=classifier, position_embedding=kind,
        position_embedding_placement=placement, head_kernel_initializer="glorot_uniform",
    )


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def _images(count=4):
    return np.random.default_rng(0).uniform(-1, 1, (count, 8, 8, 3)).astype("float32")


def _position_weights(model):
    return {w.path: tuple(w.shape) for w in model.weights
            if "posembed" in w.path or "relative_position" in w.path}


@pytest.mark.parametrize("kind, placement", VARIANTS)
def test_variant_trains_attends_and_round_trips(kind, placement, tmp_path):
    model = tiny(kind, placement)
    images = _images()
    before = _np(model(images))
    probs = [_np(p) for p in model.backbone.attention_model()(images)]
    assert [p.shape for p in probs] == [(4, 2, 5, 5)] * 2
    np.testing.assert_allclose(np.sum(probs, axis=-1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(_np(model(images)), before)

    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_config() == model.get_config()
    np.testing.assert_allclose(_np(loaded(images)), before, atol=1e-6)

    position = [w.path for w in model.trainable_weights if w.path in _position_weights(model)]
    start = {w.path: keras.ops.convert_to_numpy(w).copy() for w in model.trainable_weights}
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(images, np.array([0, 1, 2, 0]), epochs=1, batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    for w in model.trainable_weights:
        if w.path in position:
            assert not np.allclose(keras.ops.convert_to_numpy(w), start[w.path]), w.path


def test_default_is_the_official_layout():
    model = tiny()
    assert model.config.encoder.position_embedding == "learned_1d"
    assert model.config.encoder.position_embedding_placement == "stem"
    assert _position_weights(model) == {"Transformer/posembed_input/pos_embedding": (1, 5, HIDDEN)}


@pytest.mark.parametrize("classifier, extra", [("token", HIDDEN), ("gap", 0)])
def test_learned_2d_has_rows_plus_cols_half_width_parameters(classifier, extra):
    model = tiny("learned_2d", classifier=classifier)
    count = sum(np.prod(shape) for shape in _position_weights(model).values())
    assert count == (ROWS + COLS) * HIDDEN // 2 + extra


def test_relative_has_2n_minus_1_offsets_per_layer_and_head():
    weights = _position_weights(tiny("relative", classifier="gap", num_layers=3))
    tokens = ROWS * COLS
    assert weights == {
        f"Transformer/encoderblock_{i}/MultiHeadDotProductAttention_1/relative_position/embedding":
        (2 * tokens - 1, 2, HIDDEN // 2) for i in range(3)
    }


def test_none_has_no_position_weights():
    model = tiny("none")
    assert _position_weights(model) == {}
    assert tiny("learned_1d").count_params() - model.count_params() == 5 * HIDDEN
    with pytest.raises(ValueError, match="no absolute position embedding"):
        model.backbone.position_embedding_layer()


def test_none_is_permutation_equivariant_over_patches():
    """Without position information, shuffling the patches cannot change a GAP model's output."""
    model = tiny("none", classifier="gap")
    images = _images(2)
    swapped = images.copy()
    swapped[:, :4, :4], swapped[:, 4:, 4:] = images[:, 4:, 4:], images[:, :4, :4]
    np.testing.assert_allclose(_np(model(swapped)), _np(model(images)), atol=1e-5)
    with_position = tiny("learned_1d", classifier="gap")
    assert not np.allclose(_np(with_position(swapped)), _np(with_position(images)), atol=1e-5)


def test_every_layer_has_one_table_per_block_and_shared_one_in_all():
    assert sorted(_position_weights(tiny("learned_1d", "every_layer", num_layers=3))) == [
        f"Transformer/posembed_{i}/pos_embedding" for i in range(3)
    ]
    shared = tiny("learned_1d", "every_layer_shared", num_layers=3)
    assert list(_position_weights(shared)) == ["Transformer/posembed_shared/pos_embedding"]
    layer = shared.get_layer("posembed_shared")
    assert all(shared.backbone.position_embedding_layer(i) is layer for i in range(3))


@pytest.mark.parametrize("kind", ["learned_1d", "learned_2d"])
def test_shared_equals_every_layer_with_equal_tables(kind):
    shared = tiny(kind, "every_layer_shared", num_layers=3)
    separate = tiny(kind, "every_layer", num_layers=3)
    for layer in weight_layers(shared):
        if layer.weights and layer.name != "posembed_shared":
            separate.get_layer(layer.name).set_weights(layer.get_weights())
    for i in range(3):
        separate.get_layer(f"posembed_{i}").set_weights(
            shared.get_layer("posembed_shared").get_weights()
        )
    images = _images(2)
    np.testing.assert_allclose(_np(separate(images)), _np(shared(images)), atol=1e-6)
    # and the per-layer tables are really used before every block, not only the first
    rng = np.random.default_rng(1)
    separate.get_layer("posembed_2").set_weights(
        [w + rng.normal(size=w.shape) for w in separate.get_layer("posembed_2").get_weights()]
    )
    assert not np.allclose(_np(separate(images)), _np(shared(images)), atol=1e-4)


def test_stem_placement_adds_the_table_once_to_the_class_token_and_patches():
    model = tiny("learned_2d")
    grid = np.random.default_rng(2).normal(size=(2, ROWS, COLS, HIDDEN)).astype("float32")
    tokens, _ = model.backbone.encoder.embed(grid)
    cls = _np(model.get_layer("cls").cls)
    table = _np(model.get_layer("posembed_input").position_embeddings())
    expected = np.concatenate([np.repeat(cls, 2, axis=0), grid.reshape(2, -1, HIDDEN)], 1) + table
    np.testing.assert_allclose(_np(tokens), expected, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(position_embedding="sinusoidal"), "Unknown position_embedding"),
        (dict(position_embedding_placement="input"), "Unknown position_embedding_placement"),
        (dict(position_embedding="relative", position_embedding_placement="every_layer"),
         "has none to place"),
        (dict(position_embedding="none", position_embedding_placement="every_layer_shared"),
         "has none to place"),
        (dict(position_embedding="learned_2d", hidden_size=9, num_heads=3), "must be even"),
    ],
)
def test_bad_position_options_are_rejected(kwargs, message):
    config = dict(image_size=8, patch_size=4, hidden_size=8, num_layers=1, num_heads=2,
                  mlp_dim=16, num_classes=3)
    config.update(kwargs)
    with pytest.raises(ValueError, match=message):
        ViTImageClassifier(**config)


@pytest.mark.parametrize("kind, placement", VARIANTS[1:])
def test_official_format_refuses_variants(kind, placement, tmp_path):
    path = os.path.join(tmp_path, "x.npz")
    with pytest.raises(ValueError, match=r"model\.save\('model\.keras'\)"):
        keras_vit.save_checkpoint(tiny(kind, placement), path)
    assert not os.path.exists(path)


def test_official_format_round_trips_the_default_and_refuses_variant_overrides(tmp_path):
    model = tiny()
    path = os.path.join(tmp_path, "x.npz")
    keras_vit.save_checkpoint(model, path)
    loaded = keras_vit.load_checkpoint(path)
    images = _images(2)
    np.testing.assert_array_equal(_np(loaded(images)), _np(model(images)))
    with pytest.raises(ValueError, match="position_embedding='learned_2d'"):
        keras_vit.load_checkpoint(path, position_embedding="learned_2d")


def test_configs_without_position_keys_take_the_defaults():
    config = tiny().get_config()
    del config["config"]["encoder"]["position_embedding"]
    del config["config"]["encoder"]["position_embedding_placement"]
    encoder = ViTImageClassifier.from_config(config).config.encoder
    assert (encoder.position_embedding, encoder.position_embedding_placement) == (
        "learned_1d", "stem")


def test_create_model_passes_the_options():
    model = keras_vit.create_model("ViT-Ti/4", image_size=8, num_classes=3, num_layers=1,
                                   hidden_size=8, num_heads=2, mlp_dim=16,
                                   position_embedding="learned_2d",
                                   position_embedding_placement="every_layer")
    assert model.backbone.position_embedding_layer(0).name == "posembed_0"
    assert model.get_layer("posembed_0").grid_size == (2, 2)
