"""resize_model: another resolution with every weight carried over (paper Sec. 3.2), on a
classifier, a backbone and a ResNet."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.models.resize import rebuild, weight_layers


def _tiny(**kwargs):
    config = dict(image_size=16, patch_size=4, hidden_size=16, num_layers=2, num_heads=2,
                  mlp_dim=32, num_classes=10, num_channels=1)
    config.update(kwargs)
    model = keras_vit.ViTImageClassifier(**config)
    for v in model.weights:
        v.assign(np.random.default_rng(len(v.path)).normal(size=v.shape).astype("float32") * 0.1)
    return model


def _posemb(model):
    return keras.ops.convert_to_numpy(model.get_layer("posembed_input").pos_embedding)


@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_resize_model_carries_weights_and_resizes_posemb(classifier):
    model = _tiny(classifier=classifier)
    bigger = keras_vit.resize_model(model, 32)
    assert bigger.config.image_size == (32, 32) and bigger.config.grid == (8, 8)
    expected = keras_vit.resize_position_embedding(_posemb(model), 8, classifier == "token")
    np.testing.assert_array_equal(_posemb(bigger), expected)
    for layer in weight_layers(model):
        if layer.name == "posembed_input":
            continue
        for a, b in zip(layer.get_weights(), bigger.get_layer(layer.name).get_weights()):
            np.testing.assert_array_equal(a, b)
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 1)).astype("float32")
    assert bigger.predict(images, verbose=0).shape == (2, 10)


def test_resize_to_the_same_size_keeps_outputs():
    model = _tiny(representation_size=8)
    same = keras_vit.resize_model(model, (16, 16))
    images = np.random.default_rng(1).uniform(-1, 1, (2, 16, 16, 1)).astype("float32")
    np.testing.assert_allclose(same.predict(images, verbose=0), model.predict(images, verbose=0),
                               rtol=1e-5, atol=1e-6)


def test_resized_model_round_trips_through_keras_file(tmp_path):
    bigger = keras_vit.resize_model(_tiny(), 24)
    path = str(tmp_path / "m.keras")
    bigger.save(path)
    loaded = keras.saving.load_model(path, compile=False)
    np.testing.assert_array_equal(_posemb(loaded), _posemb(bigger))


def test_resize_errors():
    model = _tiny()
    with pytest.raises(ValueError, match=r"height \(30\) is not a multiple of .* \(4\).*28 or 32"):
        keras_vit.resize_model(model, 30)
    with pytest.raises(ValueError, match=r"new image width \(18\) is not a multiple .* 16 or 20"):
        keras_vit.resize_model(model, (16, 18))
    with pytest.raises(TypeError, match="no setting 'image_sise'"):
        rebuild(model, image_sise=32)
    bit = keras_vit.ResNetImageClassifier(block_units=[1], width_factor=0.5, image_size=32)
    with pytest.raises(TypeError, match="A ResNet has no setting 'image_sise'"):
        rebuild(bit, image_sise=32)


@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_resize_between_non_square_grids(classifier):
    wide = _tiny(image_size=(12, 20), classifier=classifier)
    assert wide.config.grid == (3, 5)
    token = classifier == "token"
    for size, grid in (((32, 16), (8, 4)), ((8, 36), (2, 9)), (24, (6, 6))):
        resized = keras_vit.resize_model(wide, size)
        assert resized.config.grid == grid
        expected = keras_vit.resize_position_embedding(_posemb(wide), grid, token, (3, 5))
        np.testing.assert_array_equal(_posemb(resized), expected)
    # a square start keeps today's square result, and goes to a non-square grid as well
    square = _tiny(classifier=classifier)
    np.testing.assert_array_equal(
        _posemb(keras_vit.resize_model(square, (20, 12))),
        keras_vit.resize_position_embedding(_posemb(square), (5, 3), token))


def test_resize_learned_2d_and_no_position_embeddings():
    model = _tiny(position_embedding="learned_2d")
    bigger = keras_vit.resize_model(model, 32)
    layer, new_layer = model.get_layer("posembed_input"), bigger.get_layer("posembed_input")
    table = keras.ops.convert_to_numpy(layer.position_embeddings())
    # The X/Y tables resampled separately give the official bilinear resize of the whole table.
    expected = keras_vit.resize_position_embedding(table, 8, has_class_token=True)
    got = keras.ops.convert_to_numpy(new_layer.position_embeddings())
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    wide = keras_vit.resize_model(model, (12, 28))
    expected = keras_vit.resize_position_embedding(table, (3, 7), has_class_token=True)
    got = keras.ops.convert_to_numpy(wide.get_layer("posembed_input").position_embeddings())
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    plain = keras_vit.resize_model(_tiny(position_embedding="none"), (32, 8))
    assert plain.config.image_size == (32, 8)


def test_resize_every_layer_placement():
    model = _tiny(position_embedding_placement="every_layer")
    bigger = keras_vit.resize_model(model, 24)
    for name in ("posembed_0", "posembed_1"):
        old = keras.ops.convert_to_numpy(model.get_layer(name).pos_embedding)
        new = keras.ops.convert_to_numpy(bigger.get_layer(name).pos_embedding)
        np.testing.assert_array_equal(new, keras_vit.resize_position_embedding(old, 6, True))


def test_relative_position_embeddings_are_refused():
    model = _tiny(position_embedding="relative")
    with pytest.raises(ValueError, match="relative position embeddings"):
        keras_vit.resize_model(model, 32)
    assert keras_vit.resize_model(model, 16).config.image_size == (16, 16)


def test_hybrid_resize():
    model = keras_vit.ViTImageClassifier(
        image_size=32, patch_size=1, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
        num_classes=4, stem=dict(num_layers=(1,), width_factor=1))
    bigger = keras_vit.resize_model(model, 2 * 32)
    stem, new_stem = model.get_layer("resnet"), bigger.get_layer("resnet")
    for a, b in zip(stem.get_weights(), new_stem.get_weights()):
        np.testing.assert_array_equal(a, b)
    expected = keras_vit.resize_position_embedding(_posemb(model), bigger.config.grid, True)
    np.testing.assert_array_equal(_posemb(bigger), expected)


def test_a_backbone_resizes_to_a_backbone():
    backbone = _tiny().backbone
    bigger = keras_vit.resize_model(backbone, 32)
    assert isinstance(bigger, keras_vit.ViTBackbone) and bigger.config.head is None
    expected = keras_vit.resize_position_embedding(_posemb(backbone), 8, True)
    np.testing.assert_array_equal(_posemb(bigger), expected)
    images = np.random.default_rng(2).uniform(-1, 1, (2, 32, 32, 1)).astype("float32")
    assert bigger.predict(images, verbose=0)["pooled"].shape == (2, 16)


def test_a_resnet_takes_another_size_with_the_same_weights():
    for image_size in (32, None):  # a fixed size, and a model of any size
        model = keras_vit.ResNetImageClassifier(block_units=[1], width_factor=0.5,
                                                num_classes=3, image_size=image_size)
        bigger = keras_vit.resize_model(model, 64)
        assert bigger.config.image_size == (64, 64)
        for a, b in zip(model.get_weights(), bigger.get_weights()):
            np.testing.assert_array_equal(a, b)
    assert keras_vit.resize_model(model, None).config.image_size is None
