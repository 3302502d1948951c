import keras
import numpy as np
import pytest
from keras.backend import standardize_dtype
from keras.ops import convert_to_numpy as to_numpy

import keras_vit
from keras_vit.training import MaskedPatchPrediction
from keras_vit.training.mpp import quantized_colors


def _vit(image_size=8, patch_size=4, **kwargs):
    config = dict(hidden_size=8, num_layers=1, num_heads=2, mlp_dim=16, num_classes=5)
    config.update(kwargs)
    return keras_vit.ViTImageClassifier(image_size=image_size, patch_size=patch_size,
                                        **config)


def _images(count, size=8, channels=3, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (count, size, size, channels)).astype(
        "float32"
    )


def test_color_targets_of_constant_patches():
    # A 2x2 grid of 4x4 patches, each of one colour.
    colours = [(-1.0, -1.0, -1.0), (1.0, 1.0, 1.0), (1.0, -1.0, -1.0), (0.0, -0.75, 0.74)]
    image = np.zeros((1, 8, 8, 3), "float32")
    for i, colour in enumerate(colours):
        r, c = divmod(i, 2)
        image[0, 4 * r : 4 * r + 4, 4 * c : 4 * c + 4] = colour
    # Levels: -1 -> 0, 1 -> 7, 0 -> 4, -0.75 -> 1, 0.74 -> 6; class = r * 64 + g * 8 + b.
    expected = [0, 511, 7 * 64, 4 * 64 + 1 * 8 + 6]
    assert to_numpy(quantized_colors(image, 4)).tolist() == [expected]
    # The mean decides: half black, half white gives the mid level 4 in every channel.
    image = np.full((1, 4, 4, 3), -1.0, "float32")
    image[0, :2] = 1.0
    assert to_numpy(quantized_colors(image, 4)).tolist() == [[4 * 64 + 4 * 8 + 4]]
    # Grayscale: 8 classes.
    gray = np.full((1, 4, 4, 1), 0.3, "float32")
    assert to_numpy(quantized_colors(gray, 4)).tolist() == [[5]]


def test_4x4_cell_targets_are_row_major_cells():
    image = np.full((1, 8, 8, 3), -1.0, "float32")
    image[0, 0:2, 2:4] = (1.0, -1.0, -1.0)  # cell (0, 1) of the first patch is red
    image[0, 6:8, 6:8] = 1.0  # cell (3, 3) of the last patch is white
    classes = to_numpy(quantized_colors(image, 8, cells=4))
    assert classes.shape == (1, 1, 16)
    expected = np.zeros(16, int)
    expected[1], expected[15] = 448, 511
    assert classes[0, 0].tolist() == expected.tolist()


def test_targets_and_output_shapes_of_every_target():
    vit = _vit()
    images = _images(2)
    expected_targets = {
        "color_3bit": to_numpy(quantized_colors(images, 4)),
        "color_3bit_4x4": to_numpy(quantized_colors(images, 4, cells=4)),
        "l2": to_numpy(keras_vit.patchify(images, 4)),
    }
    for target, pred_shape in (
        ("color_3bit", (2, 4, 512)),
        ("color_3bit_4x4", (2, 4, 16, 512)),
        ("l2", (2, 4, 48)),
    ):
        out = MaskedPatchPrediction(vit, target=target)(images)
        assert tuple(out["predictions"].shape) == pred_shape
        assert standardize_dtype(out["predictions"].dtype) == "float32"
        assert tuple(out["corrupted"].shape) == (2, 4)
        np.testing.assert_array_equal(to_numpy(out["targets"]), expected_targets[target])


def test_corruption_fractions():
    vit = _vit(image_size=32, patch_size=4, hidden_size=16)  # 64 patches
    mpp = MaskedPatchPrediction(vit, seed=3)
    batch, count, dim = 64, 64, 16
    tokens = np.random.default_rng(0).normal(size=(batch, count, dim)).astype("float32")
    corrupted_tokens, corrupted = mpp.corrupt(keras.ops.convert_to_tensor(tokens))
    out, corrupted = to_numpy(corrupted_tokens), to_numpy(corrupted).astype(bool)
    mask = to_numpy(mpp.mask_token)[0, 0]

    # Exactly half of the patches of every image are corrupted.
    assert (corrupted.sum(axis=1) == 32).all()
    # Uncorrupted embeddings are untouched.
    np.testing.assert_array_equal(out[~corrupted], tokens[~corrupted])

    is_mask = np.all(out == mask, axis=-1)
    is_kept = np.all(out == tokens, axis=-1)
    same = np.all(out[:, :, None, :] == tokens[:, None, :, :], axis=-1)  # (B, N, N)
    is_other = same.any(axis=-1) & ~is_kept
    assert not (is_mask & ~corrupted).any()
    assert (is_mask | is_kept | is_other).all()
    assert not (is_mask & is_other).any() and not (is_mask & is_kept).any()

    total = corrupted.sum()  # 2048 corrupted patches; 3 sigma of the 10% share is 0.02
    assert abs(is_mask[corrupted].sum() / total - 0.8) < 0.03
    assert abs(is_other[corrupted].sum() / total - 0.1) < 0.02
    assert abs(is_kept[corrupted].sum() / total - 0.1) < 0.02
    # Replacements come from another position of the same image, spread over the positions.
    sources = same.argmax(axis=-1)[is_other]
    positions = np.nonzero(is_other)[1]
    assert (sources != positions).all()
    assert len(np.unique(sources)) > 40


def test_loss_counts_only_corrupted_patches():
    mpp = MaskedPatchPrediction(_vit(), seed=0)
    images = _images(4)
    y_pred = mpp(images)
    loss = float(to_numpy(mpp.compute_loss(images, None, y_pred)))
    corrupted = to_numpy(y_pred["corrupted"]).astype(bool)
    # Changing the predictions of uncorrupted patches does not move the loss...
    predictions = to_numpy(y_pred["predictions"]).copy()
    noise = np.random.default_rng(0).normal(size=predictions.shape).astype("float32")
    predictions[~corrupted] = noise[~corrupted]
    changed = dict(y_pred, predictions=keras.ops.convert_to_tensor(predictions))
    assert float(to_numpy(mpp.compute_loss(images, None, changed))) == pytest.approx(loss, rel=1e-6)
    # ...and the loss is the mean cross-entropy over the corrupted ones.
    logits = predictions[corrupted].astype("float64")
    targets = to_numpy(y_pred["targets"])[corrupted]
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -log_probs[np.arange(len(targets)), targets].mean()
    assert loss == pytest.approx(expected, rel=1e-5)


def test_fit_on_images_only_trains_the_shared_encoder():
    vit = _vit()
    mpp = MaskedPatchPrediction(vit, seed=0)
    assert mpp.encoder is vit
    assert mpp.trunk.get_layer("Transformer") is vit.backbone.encoder
    before = [np.array(w) for w in vit.get_weights()]
    head_before = [np.array(w) for w in vit.get_layer("head").get_weights()]

    images = _images(8)
    mpp.compile(keras.optimizers.Adam(1e-2))
    history = mpp.fit(images, batch_size=8, epochs=6, verbose=0).history
    assert history["loss"][-1] < history["loss"][0] - 0.2
    assert "accuracy" in history

    after = vit.get_weights()
    changed = [not np.allclose(a, b) for a, b in zip(before, after)]
    assert sum(changed) >= len(before) - 3  # every trunk weight moved (not the head)
    for a, b in zip(head_before, vit.get_layer("head").get_weights()):
        np.testing.assert_array_equal(a, b)
    # The encoder then fine-tunes with its own head.
    vit.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(True))
    vit.fit(images, np.arange(8) % 5, batch_size=8, epochs=1, verbose=0)
    assert not np.allclose(head_before[1], vit.get_layer("head").get_weights()[1])


def test_l2_target_trains(tmp_path):
    vit = _vit()
    mpp = MaskedPatchPrediction(vit, target="l2", seed=0)
    mpp.compile(keras.optimizers.Adam(1e-2))
    images = _images(8)
    history = mpp.fit(images, batch_size=8, epochs=4, verbose=0).history
    assert history["loss"][-1] < history["loss"][0]
    path = str(tmp_path / "mpp.keras")
    mpp.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, MaskedPatchPrediction) and loaded.target == "l2"
    assert isinstance(loaded.encoder, keras_vit.ViTImageClassifier)
    for name in ("embedding", "posembed_input", "encoderblock_0", "encoder_norm"):
        for a, b in zip(
            vit.get_layer(name).get_weights(), loaded.encoder.get_layer(name).get_weights()
        ):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(to_numpy(loaded.mask_token), to_numpy(mpp.mask_token))


def test_bad_arguments_are_clear_errors():
    vit = _vit()
    with pytest.raises(TypeError, match="needs a keras_vit ViT"):
        MaskedPatchPrediction(keras.Sequential([keras.layers.Dense(2)]))
    with pytest.raises(ValueError, match="Unknown target"):
        MaskedPatchPrediction(vit, target="colour")
    with pytest.raises(ValueError, match="corrupt_rate"):
        MaskedPatchPrediction(vit, corrupt_rate=0.0)
    with pytest.raises(ValueError, match="sum of at most 1"):
        MaskedPatchPrediction(vit, mask_fraction=0.9, random_fraction=0.2)
    with pytest.raises(ValueError, match="multiple of 4"):
        MaskedPatchPrediction(_vit(image_size=6, patch_size=3), target="color_3bit_4x4")
    with pytest.raises(ValueError, match="optimizer only"):
        MaskedPatchPrediction(vit).compile("adam", loss="mse")


def test_a_backbone_trains_alone_and_a_hybrid_predicts_per_stride():
    backbone = keras_vit.ViTBackbone(image_size=8, patch_size=4, hidden_size=8, num_layers=1,
                                     num_heads=2, mlp_dim=16)
    mpp = MaskedPatchPrediction(backbone, seed=0)
    assert mpp.encoder is backbone and mpp.patch_size == 4
    mpp.compile(keras.optimizers.Adam(1e-2))
    before = [np.array(w) for w in backbone.get_weights()]
    mpp.fit(_images(4), batch_size=4, epochs=1, verbose=0)
    assert any(not np.allclose(a, b) for a, b in zip(before, backbone.get_weights()))
    hybrid = _vit(image_size=16, patch_size=1, stem=dict(num_layers=[], width_factor=0.5))
    assert MaskedPatchPrediction(hybrid).patch_size == 4  # the root's /4, patch 1 on its map
