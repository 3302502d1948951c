"""train_fashion_mnist_vit is the shipped weights' recipe: its defaults are the shipped run's,
it starts from the untrained twin of fashion_mnist_vit and it trains."""

import inspect

import numpy as np
import pytest

from keras_vit.app.shipped import SHIPPED_TRAINING, train_fashion_mnist_vit
from keras_vit.inspection import FASHION_MNIST_VIT, fashion_mnist_vit
from keras_vit.models.vit import ViTImageClassifier


def test_the_defaults_are_the_shipped_run():
    defaults = {name: parameter.default for name, parameter
                in inspect.signature(train_fashion_mnist_vit).parameters.items()}
    assert {name: defaults[name] for name in SHIPPED_TRAINING} == SHIPPED_TRAINING


@pytest.mark.fashion_mnist
def test_it_trains_the_untrained_twin_of_the_shipped_model():
    twin = fashion_mnist_vit(trained=False, seed=0)
    model = train_fashion_mnist_vit(1, batch_size=8)
    assert model.config == FASHION_MNIST_VIT
    before, after = twin.get_weights(), model.get_weights()
    assert len(before) == len(after)
    # one update from the same initial weights: the patch embedding moved, by a small step
    kernel = [i for i, w in enumerate(before) if w.shape == (4, 4, 1, 48)][0]
    change = np.abs(after[kernel] - before[kernel])
    assert 0 < change.max() < 0.1


@pytest.mark.fashion_mnist
def test_a_given_model_is_trained_in_place_and_its_loss_falls():
    model = ViTImageClassifier(config=FASHION_MNIST_VIT.replace(
        image_size=16, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32))
    assert train_fashion_mnist_vit(30, batch_size=32, learning_rate=3e-3, model=model) is model
    history = model.history.history["loss"]
    assert len(history) == 1 and history[0] < np.log(10)  # below a uniform guess's mean loss
