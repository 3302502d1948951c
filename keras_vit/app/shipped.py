"""How the Fashion-MNIST ViT shipped with the package was trained, as one call: the weights of
``keras_vit.inspection.fashion_mnist_vit()`` came from ``train_fashion_mnist_vit()`` with its
defaults (``SHIPPED_TRAINING``), so a longer or otherwise changed run of the same recipe is one
argument away (notebook 06, exercise 1).

The recipe is the package's pre-training recipe (``keras_vit.training.pretraining_optimizer``:
AdamW, weight decay 0.1, linear warmup over a tenth of the steps, then linear decay) on
Fashion-MNIST's 60,000 training images resized to the model's 56 px, with random horizontal flips.
"""

import keras

from keras_vit import data
from keras_vit.inspection.shipped import fashion_mnist_vit
from keras_vit.training.recipes import classification_loss, pretraining_optimizer

# The settings of the shipped weights' run: 3,000 steps of 64 images (192,000 images).
SHIPPED_TRAINING = dict(steps=3000, batch_size=64, learning_rate=2e-3, weight_decay=0.1, seed=0)


def train_fashion_mnist_vit(steps=3000, *, batch_size=64, learning_rate=2e-3, weight_decay=0.1,
                            seed=0, model=None, verbose=0):
    """Train the shipped model's architecture on Fashion-MNIST with the shipped weights' recipe.

    Args:
        steps: updates (the shipped weights: 3,000, about 3.2 epochs of batch 64).
        batch_size: training images per update.
        learning_rate: the peak learning rate, reached after ``steps // 10`` warmup steps.
        weight_decay: AdamW's decoupled weight decay.
        seed: seeds the initial weights (as ``fashion_mnist_vit(trained=False, seed=seed)``), the
            order of the images and their flips.
        model: a model to train instead (in place), e.g. another size of the architecture;
            it must take (batch, H, W, 1) images and have 10 classes.
        verbose: Keras' ``fit`` verbosity (0: silent, 1: a progress bar).

    Returns:
        the trained ``ViTImageClassifier``.

    Example (two steps of a smaller model; the default is the shipped run):
    >>> from keras_vit.inspection import FASHION_MNIST_VIT
    >>> from keras_vit.models.vit import ViTImageClassifier
    >>> small = ViTImageClassifier(config=FASHION_MNIST_VIT.replace(
    ...     image_size=16, hidden_size=8, num_layers=1, num_heads=2, mlp_dim=16))
    >>> train_fashion_mnist_vit(2, batch_size=8, model=small) is small
    True
    """
    if model is None:
        model = fashion_mnist_vit(trained=False, seed=seed)
    keras.utils.set_random_seed(seed)
    model.compile(
        optimizer=pretraining_optimizer(steps, learning_rate=learning_rate,
                                        warmup_steps=steps // 10,
                                        weight_decay=weight_decay),
        loss=classification_loss(), weighted_metrics=["accuracy"])
    images = data.load("fashion_mnist", "train", batch_size=batch_size,
                       image_size=model.config.image_size[0], augmentation="resize", flip=True,
                       repeat=True, seed=seed)
    model.fit(images, epochs=1, steps_per_epoch=steps, shuffle=False, verbose=verbose)
    return model
