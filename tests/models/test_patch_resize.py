"""FlexiViT's PI-resize (``keras_vit.resize_patch_size``) and the property that defines it."""

import jax
import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.models.resize import pi_resize_kernel


def _bilinear(patches, size):
    """An independent bilinear resize of (n, P, P) patches: jax.image.resize."""
    out = jax.image.resize(patches, (patches.shape[0], size, size), "bilinear")
    return np.asarray(out, np.float64)


@pytest.mark.parametrize("old, new", [(4, 8), (4, 6), (8, 16), (3, 5)])
def test_upsampling_keeps_every_tokens_value(old, new):
    rng = np.random.default_rng(0)
    kernel = rng.normal(size=(old, old, 1, 7))
    patches = rng.normal(size=(20, old, old))
    resized = pi_resize_kernel(kernel, new)
    before = np.einsum("nij,ijd->nd", patches, kernel[:, :, 0])
    after = np.einsum("nij,ijd->nd", _bilinear(patches, new), resized[:, :, 0])
    np.testing.assert_allclose(after, before, atol=1e-5)  # jax resizes in float32


@pytest.mark.parametrize("old, new", [(8, 4), (6, 4)])
def test_downsampling_is_the_least_squares_match(old, new):
    rng = np.random.default_rng(1)
    kernel = rng.normal(size=(old, old, 1, 3))
    basis = np.eye(old * old).reshape(-1, old, old)
    resize = _bilinear(basis, new).reshape(old * old, new * new)  # row k: the resize of x_k
    flat = kernel.reshape(old * old, 3)
    best = np.linalg.lstsq(resize, flat, rcond=None)[0]  # min sum_k (<B x_k, w'> - <x_k, w>)^2
    np.testing.assert_allclose(pi_resize_kernel(kernel, new).reshape(-1, 3), best, atol=1e-5)


def test_resize_patch_size_model():
    model = keras_vit.ViTImageClassifier(image_size=32, patch_size=8, hidden_size=16,
                                         num_layers=1, num_heads=2, mlp_dim=32, num_classes=4,
                                         head_kernel_initializer="glorot_uniform")
    finer = keras_vit.resize_patch_size(model, 4)
    assert finer.config.grid == (8, 8) and finer.config.patches.patch_size == 4
    posemb = finer.get_layer("posembed_input").pos_embedding
    assert tuple(posemb.shape) == (1, 65, 16)
    images = np.random.default_rng(2).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    assert finer.predict(images, verbose=0).shape == (2, 4)
    # a ResNet-free ViT at its own patch size is unchanged
    same = keras_vit.resize_patch_size(model, 8)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(same(images)),
                               keras.ops.convert_to_numpy(model(images)), atol=1e-5)
    # a backbone stays a backbone, with the classifier's backbone's tokens
    backbone = keras_vit.resize_patch_size(model.backbone, 4)
    assert isinstance(backbone, keras_vit.ViTBackbone) and backbone.config.grid == (8, 8)
    np.testing.assert_allclose(backbone.predict(images, verbose=0)["pooled"],
                               finer.backbone.predict(images, verbose=0)["pooled"], atol=1e-6)


def test_bad_patch_sizes():
    model = keras_vit.ViTImageClassifier(image_size=32, patch_size=8, hidden_size=16,
                                         num_layers=1, num_heads=2, mlp_dim=32)
    with pytest.raises(ValueError, match="larger than the image"):
        keras_vit.resize_patch_size(model, 64)
    with pytest.raises(ValueError, match="not a multiple of the new patch size"):
        keras_vit.resize_patch_size(model, 5)
    bit = keras_vit.ResNetImageClassifier(block_units=[1], width_factor=0.5, image_size=32)
    with pytest.raises(TypeError, match="takes a model with patches .a ViT, hybrid or Axial-ViT"):
        keras_vit.resize_patch_size(bit, 4)
