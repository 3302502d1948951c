"""The Fashion-MNIST ViT shipped as package data loads on every backend and classifies."""

import keras
import numpy as np
import pytest

from keras_vit import ViTImageClassifier, data
from keras_vit.inspection import FASHION_MNIST_VIT, fashion_mnist_vit
from keras_vit.inspection.shipped import WEIGHTS


def test_shipped_model_has_the_documented_architecture_and_the_file_weights():
    model = fashion_mnist_vit()
    assert isinstance(model, ViTImageClassifier)
    assert model.config.replace(head=FASHION_MNIST_VIT.head) == FASHION_MNIST_VIT
    assert model.config.head.num_classes == 10
    assert fashion_mnist_vit(trained=False).config == FASHION_MNIST_VIT
    with np.load(WEIGHTS) as archive:
        assert all(archive[key].dtype == np.float16 for key in archive.files)
        kernel = archive["embedding/kernel"].astype(np.float32)
    loaded = keras.ops.convert_to_numpy(model.get_layer("embedding").conv.kernel)
    np.testing.assert_array_equal(loaded, kernel)


@pytest.mark.fashion_mnist
def test_shipped_model_classifies_fashion_mnist_and_the_untrained_twin_does_not():
    # 128 images: accuracy 0.6 is 77 of them, chance (a tenth) about 13
    images, labels = data.as_arrays(data.load("fashion_mnist", "test", batch_size=128,
                                              image_size=56, max_examples=128))
    truth = labels.argmax(axis=-1) if labels.ndim == 2 else labels
    trained = fashion_mnist_vit().predict(images, verbose=0).argmax(axis=-1)
    untrained = fashion_mnist_vit(trained=False).predict(images, verbose=0).argmax(axis=-1)
    assert (trained == truth).mean() > 0.6
    assert (untrained == truth).mean() < 0.3


def test_loading_the_float16_file_at_a_new_size_resizes_in_float32():
    """Loading at 112 px gives the table that resizing the loaded float32 table gives (notebook
    05 checks this on the shipped file offline), not one rounded to float16 after resizing."""
    from keras_vit import load_checkpoint, resize_position_embedding

    def table(model):
        return keras.ops.convert_to_numpy(model.get_layer("posembed_input").pos_embedding)

    resized = load_checkpoint(WEIGHTS, image_size=112)
    by_hand = resize_position_embedding(table(load_checkpoint(WEIGHTS)), resized.config.grid,
                                        has_class_token=True)
    np.testing.assert_allclose(table(resized), by_hand, atol=1e-6)
