"""A small ViT trained on Fashion-MNIST, shipped with the package so that inspection needs no
training: 56 x 56 px (Fashion-MNIST upsampled), 4 x 4 patches, a 14 x 14 grid like ViT-B/16's at
224 px. ``keras_vit.app.shipped.train_fashion_mnist_vit()`` is the run that trained it (its
defaults); ``benchmarks/inspection_structure.py`` reports what it learned."""

import os

import keras

from keras_vit.checkpoints.formats import load_checkpoint
from keras_vit.models.description import ViTConfig
from keras_vit.models.vit import ViTImageClassifier

WEIGHTS = os.path.join(os.path.dirname(__file__), "weights", "fashion_mnist_vit_56px_p4.npz")

# The architecture of the shipped weights (and of the benchmark's defaults).
FASHION_MNIST_VIT = ViTConfig.from_keywords(
    image_size=56, patch_size=4, num_channels=1, num_classes=10, hidden_size=48, num_layers=6,
    num_heads=6, mlp_dim=96)


def fashion_mnist_vit(trained=True, seed=0):
    """The shipped Fashion-MNIST ViT, or the same architecture freshly initialised.

    Args:
        trained: load the shipped weights (float16 on disk, float32 in the model); False gives
            an untrained twin to compare against, initialised after
            ``keras.utils.set_random_seed(seed)`` (which seeds Keras' global generators).
        seed: the random seed of the untrained model.

    Returns:
        A ``ViTImageClassifier`` described by ``FASHION_MNIST_VIT``, for (batch, 56, 56, 1)
        images in [-1, 1] (Fashion-MNIST resized with
        ``keras_vit.data.load("fashion_mnist", ..., image_size=56)``), 10 classes.

    Example:
    >>> model = fashion_mnist_vit()
    >>> model.config.grid, model.config.encoder.num_layers, model.config.encoder.num_heads
    ((14, 14), 6, 6)
    """
    if trained:
        return load_checkpoint(WEIGHTS)
    keras.utils.set_random_seed(seed)
    return ViTImageClassifier(config=FASHION_MNIST_VIT, name="untrained")
