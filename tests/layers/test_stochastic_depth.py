"""Stochastic depth (Huang et al. 2016; timm's drop_path_rate): the layer, the encoder's rates,
their checks and their saving."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_vit
from keras_vit.inspection.gradients import gradient
from keras_vit.layers.axial import AxialEncoder, AxialEncoderBlock
from keras_vit.layers.encoder import (
    Encoder,
    EncoderBlock,
    EncoderConfig,
    StochasticDepth,
)
from keras_vit.models.description import ViTConfig

SMALL = dict(num_layers=3, num_heads=2, mlp_dim=16)
TINY_VIT = dict(image_size=8, patch_size=4, hidden_size=8, num_layers=3, num_heads=2,
                mlp_dim=16, num_classes=3)


def _x(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _np(x):
    return ops.convert_to_numpy(x)


# ----------------------------------------------------------------------------- the layer


def test_the_layer_is_the_identity_at_inference():
    x = _x(8, 5, 4)
    layer = StochasticDepth(0.5, seed=0)
    for training in (None, False):
        np.testing.assert_array_equal(_np(layer(x, training=training)), x)


def test_whole_examples_are_dropped_at_the_rate_and_kept_ones_rescaled():
    rate, examples = 0.25, 4000
    out = _np(StochasticDepth(rate, seed=1)(np.ones((examples, 3, 2), "float32"),
                                            training=True)).reshape(examples, -1)
    dropped = np.all(out == 0, axis=1)
    kept = np.all(np.isclose(out, 1 / (1 - rate), rtol=1e-6), axis=1)
    assert np.all(dropped | kept)  # every example: its whole branch, one or the other
    # Binomial standard deviation sqrt(0.25 * 0.75 / 4000) = 0.0068; 4 of them.
    assert abs(dropped.mean() - rate) < 0.028


def test_the_gradient_is_the_mask_over_the_keep_probability():
    rate, x = 0.5, np.ones((64, 3), "float32")
    # Two layers of the same seed draw the same first mask: one for the forward, one inside
    # the backend's differentiation.
    out = _np(StochasticDepth(rate, seed=2)(x, training=True))
    layer = StochasticDepth(rate, seed=2)
    (grad,) = gradient(lambda t: ops.sum(layer(t[0], training=True)), [x])
    assert np.all(np.isfinite(grad))
    np.testing.assert_allclose(grad, out, rtol=1e-6)  # d(x m / keep)/dx = m / keep, x = 1
    assert 0 < np.count_nonzero(grad[:, 0]) < len(x)


def test_a_rate_of_zero_adds_no_variable():
    assert not StochasticDepth(0.0).variables
    assert StochasticDepth(0.1).variables  # its SeedGenerator's state, as keras' Dropout


# ----------------------------------------------------------------------------- in the blocks


def _block_candidates(block, x):
    """The block's four possible training outputs: each branch dropped or kept and rescaled."""
    keep = 1 - block.stochastic_depth_rate
    attention = _np(block.MultiHeadDotProductAttention_1(block.LayerNorm_0(x)))
    for a in (0.0, 1 / keep):
        after = x + a * attention
        mlp = _np(block.MlpBlock_3(block.LayerNorm_2(after)))
        for m in (0.0, 1 / keep):
            yield after + m * mlp


def test_each_branch_of_a_block_is_dropped_per_example():
    config = EncoderConfig(**SMALL, stochastic_depth_rate=0.5)
    block = EncoderBlock(config)
    x = _x(64, 5, 8)
    out = _np(block(x, training=True))
    candidates = np.stack(list(_block_candidates(block, x)))  # (4, batch, N, D)
    close = np.all(np.isclose(out[None], candidates, atol=1e-5), axis=(2, 3))  # (4, batch)
    assert np.all(close.any(axis=0))  # every example is one of the four
    assert np.all(close.any(axis=1))  # and each of the four happens


def _encoder(encoder_class, rate):
    config = EncoderConfig(**SMALL, stochastic_depth_rate=rate, axial=encoder_class is AxialEncoder)
    encoder = encoder_class(config, position_embedding_grid=(2, 2))
    encoder.build((2, 2, 2, 8))
    return encoder


@pytest.mark.parametrize("encoder_class", [Encoder, AxialEncoder])
def test_encoders_are_the_identity_at_inference(encoder_class):
    plain, dropping = _encoder(encoder_class, 0.0), _encoder(encoder_class, 0.5)
    dropping.set_weights(plain.get_weights())
    x = _x(2, 2, 2, 8)
    np.testing.assert_array_equal(_np(dropping(x)), _np(plain(x)))
    np.testing.assert_array_equal(_np(dropping(x, training=False)), _np(plain(x)))


def test_training_with_a_rate_differs_from_inference():
    encoder = Encoder(EncoderConfig(**SMALL, stochastic_depth_rate=0.9),
                      position_embedding_grid=(2, 2))
    x = _x(16, 2, 2, 8)
    assert not np.allclose(_np(encoder(x, training=True)), _np(encoder(x)))


def test_block_rates_rise_linearly_from_zero_as_timm():
    config = EncoderConfig(**dict(SMALL, num_layers=5), stochastic_depth_rate=0.2)
    np.testing.assert_allclose(config.stochastic_depth_rates, np.linspace(0, 0.2, 5))
    assert config.stochastic_depth_rates[0] == 0.0 and config.stochastic_depth_rates[-1] == 0.2
    assert EncoderConfig(**dict(SMALL, num_layers=1),
                         stochastic_depth_rate=0.2).stochastic_depth_rates == (0.0,)
    encoder = Encoder(config, position_embedding_grid=(2, 2))
    assert [b.stochastic_depth_rate for b in encoder.blocks] == list(
        config.stochastic_depth_rates)
    axial = AxialEncoder(config.replace(axial=True), position_embedding_grid=(2, 2))
    for pair, rate in zip(axial.blocks, config.stochastic_depth_rates):  # a pair is one block
        assert pair.row.stochastic_depth_rate == pair.column.stochastic_depth_rate == rate


def test_a_lone_block_takes_the_config_rate_or_its_own():
    config = EncoderConfig(**SMALL, stochastic_depth_rate=0.3)
    assert EncoderBlock(config).stochastic_depth_rate == 0.3
    assert EncoderBlock(config, stochastic_depth_rate=0.1).stochastic_depth.rate == 0.1
    assert AxialEncoderBlock(config, stochastic_depth_rate=0.1).column.stochastic_depth_rate \
        == 0.1


def test_gradients_flow_through_a_model_in_training():
    model = keras_vit.ViTImageClassifier(**TINY_VIT, stochastic_depth_rate=0.5)
    images = _x(8, 8, 8, 3)
    weights = _x(1, 5, 8, seed=1)  # the head starts at zero (official): read the tokens

    def loss(tensors):
        tokens = model.backbone(tensors[0], training=True)["tokens"]
        return ops.sum(tokens * ops.convert_to_tensor(weights))

    (grad,) = gradient(loss, [images])
    assert np.all(np.isfinite(grad))
    assert np.all(np.abs(grad).reshape(len(images), -1).max(axis=1) > 0)


# ----------------------------------------------------------------------------- checks


@pytest.mark.parametrize("rate", [1.0, -0.1, 1.5])
def test_a_rate_outside_zero_one_is_refused_with_the_fix(rate):
    message = r"stochastic_depth_rate must be in \[0, 1\).*Use a rate such as 0.1"
    with pytest.raises(ValueError, match=message):
        EncoderConfig(**SMALL, stochastic_depth_rate=rate)
    with pytest.raises(ValueError, match=message):
        StochasticDepth(rate)
    with pytest.raises(ValueError, match=message):
        EncoderBlock(EncoderConfig(**SMALL), stochastic_depth_rate=rate)


def test_remat_with_stochastic_depth_is_refused():
    message = r"remat=True needs .*stochastic_depth_rate=0.*new random masks"
    with pytest.raises(ValueError, match=message):
        EncoderConfig(**SMALL, remat=True, stochastic_depth_rate=0.1)
    with pytest.raises(ValueError, match=message):
        EncoderBlock(EncoderConfig(**SMALL, remat=True), stochastic_depth_rate=0.1)
    with pytest.raises(ValueError, match=message):
        keras_vit.ViTImageClassifier(**TINY_VIT, remat=True, stochastic_depth_rate=0.1)
    assert EncoderConfig(**SMALL, remat=True).stochastic_depth_rate == 0.0


# ----------------------------------------------------------------------------- saving


def test_the_rate_goes_through_keywords_names_and_presets():
    config = ViTConfig.from_keywords(image_size=8, patch_size=4, hidden_size=8, num_layers=2,
                                     num_heads=2, mlp_dim=16, stochastic_depth_rate=0.1)
    assert config.encoder.stochastic_depth_rate == 0.1
    assert config.replace(stochastic_depth_rate=0.2).encoder.stochastic_depth_rate == 0.2
    model = keras_vit.create_model("ViT-Ti/4", image_size=8, num_layers=2, num_classes=3,
                                   stochastic_depth_rate=0.1)
    assert model.config.encoder.stochastic_depth_rate == 0.1
    assert model.backbone.encoder.blocks[-1].stochastic_depth_rate == 0.1


def test_get_config_and_a_keras_file_keep_the_rate(tmp_path):
    config = EncoderConfig(**SMALL, stochastic_depth_rate=0.2)
    for layer in (StochasticDepth(0.2, seed=3), EncoderBlock(config, stochastic_depth_rate=0.1),
                  AxialEncoderBlock(config, stochastic_depth_rate=0.1),
                  Encoder(config, position_embedding_grid=(2, 2))):
        again = type(layer).from_config(layer.get_config())
        assert again.get_config() == layer.get_config()
    model = keras_vit.ViTImageClassifier(**TINY_VIT, stochastic_depth_rate=0.2)
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert loaded.config.encoder.stochastic_depth_rate == 0.2
    assert [b.stochastic_depth_rate for b in loaded.backbone.encoder.blocks] == [0.0, 0.1, 0.2]
    images = _x(2, 8, 8, 3)
    np.testing.assert_array_equal(_np(loaded(images)), _np(model(images)))


@pytest.mark.parametrize("fmt, suffix, needs", [("official", ".npz", ()),
                                                ("timm", ".safetensors", ("safetensors",))])
def test_checkpoints_hold_the_same_tensors_with_a_rate(fmt, suffix, needs, tmp_path):
    for module in needs:
        pytest.importorskip(module)
    plain = keras_vit.ViTImageClassifier(**TINY_VIT, approximate_gelu=False)
    model = keras_vit.ViTImageClassifier(**TINY_VIT, approximate_gelu=False,
                                         stochastic_depth_rate=0.1)
    model.set_weights(plain.get_weights())
    for name, source in (("plain", plain), ("rate", model)):
        keras_vit.save_checkpoint(source, tmp_path / f"{name}{suffix}", format=fmt)
    loaded = [keras_vit.load_checkpoint(tmp_path / f"{name}{suffix}", num_heads=2,
                                        stochastic_depth_rate=0.1) for name in ("plain", "rate")]
    for again in loaded:
        assert again.config.encoder.stochastic_depth_rate == 0.1
        for a, b in zip(plain.weights, again.weights):
            np.testing.assert_array_equal(_np(a), _np(b))



def test_a_compiled_training_step_draws_masks():  # the backend's jit/tf.function path
    model = keras_vit.ViTImageClassifier(**TINY_VIT, stochastic_depth_rate=0.5)
    model.compile(optimizer="sgd",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(_x(4, 8, 8, 3), np.array([0, 1, 2, 0]), epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))



def test_a_named_model_with_weights_takes_the_rate(tmp_path):
    model = keras_vit.create_model("ViT-Ti/4", image_size=8, num_layers=2, num_classes=3)
    keras_vit.save_checkpoint(model, tmp_path / "model.npz")
    again = keras_vit.create_model("ViT-Ti/4", image_size=8, num_layers=2, num_classes=3,
                                   weights=tmp_path / "model.npz", stochastic_depth_rate=0.2)
    assert again.config.encoder.stochastic_depth_rate == 0.2
    assert again.backbone.encoder.blocks[-1].stochastic_depth_rate == 0.2
