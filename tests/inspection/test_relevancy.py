"""Gradient relevancy (Chefer et al., ICCV 2021) against a reference written apart from it.

The reference is a float64 numpy forward of a 2-block ViT read from the model's weights, with
an additive perturbation E on each block's attention probabilities: d y_t / d E at E = 0 is
grad_A y_t itself, taken by central differences (exact to ~1e-9 in float64), with no gate, no
Keras layer and no backend gradient. The weights are drawn by numpy, so every backend is held to
the same numbers: agreeing with the reference at 1e-5 on each is agreeing with one another.
"""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import ViTBackbone, ViTImageClassifier
from keras_vit.inspection import relevancy
from keras_vit.inspection.gradients import attention_gradients, gradient

CLASSES = 4


def numpy_weights(model, seed=0):
    """Every weight drawn by numpy (the same on every backend), scaled to keep softmax soft."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(rng.normal(scale=0.4, size=variable.shape).astype("float32"))
    return model


def tiny(classifier="token", **kwargs):
    settings = dict(image_size=12, patch_size=4, hidden_size=8, num_layers=2, num_heads=2,
                    mlp_dim=16, num_classes=CLASSES, classifier=classifier)
    return numpy_weights(ViTImageClassifier(**{**settings, **kwargs}))


def images(count=2, size=12, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, (count, size, size, 3)).astype("float32")


def weights_of(layer):
    return [np.asarray(keras.ops.convert_to_numpy(w), np.float64) for w in layer.weights]


def layer_norm(x, layer):
    gamma, beta = weights_of(layer)
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + layer.epsilon) * gamma + beta


def dense(x, layer):
    kernel, bias = weights_of(layer)
    return x @ kernel + bias


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def reference_forward(model, x, perturbations):
    """float64 logits and every block's probabilities A, with A + E in place of A."""
    config = model.config
    patch = config.patches.patch_size
    kernel, bias = weights_of(model.get_layer("embedding"))
    batch, height, width, channels = x.shape
    cells = x.reshape(batch, height // patch, patch, width // patch, patch, channels)
    cells = cells.transpose(0, 1, 3, 2, 4, 5).reshape(batch, -1, patch * patch * channels)
    tokens = cells @ kernel.reshape(-1, kernel.shape[-1]) + bias
    if config.encoder.classifier == "token":
        cls = weights_of(model.get_layer("cls"))[0].reshape(1, 1, -1)
        tokens = np.concatenate([np.repeat(cls, batch, 0), tokens], axis=1)
    table = model.backbone.position_embedding_layer(0).position_embeddings()
    tokens = tokens + np.asarray(keras.ops.convert_to_numpy(table), np.float64)
    probabilities = []
    for i, perturbation in enumerate(perturbations):
        block = model.get_layer(f"encoderblock_{i}")
        attention = block.MultiHeadDotProductAttention_1
        h = layer_norm(tokens, block.LayerNorm_0)
        heads = config.encoder.num_heads
        q, k, v = (dense(h, p).reshape(batch, -1, heads, h.shape[-1] // heads)
                   for p in (attention.query, attention.key, attention.value))
        logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
        a = np.exp(logits - logits.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        probabilities.append(a)
        context = np.einsum("bhqk,bkhd->bqhd", a + perturbation, v).reshape(tokens.shape)
        tokens = tokens + dense(context, attention.out)
        mlp = block.MlpBlock_3
        tokens = tokens + dense(gelu_tanh(dense(layer_norm(tokens, block.LayerNorm_2),
                                                mlp.Dense_0)), mlp.Dense_1)
    tokens = layer_norm(tokens, model.get_layer("encoder_norm"))
    pooled = tokens[:, 0] if config.encoder.classifier == "token" else tokens.mean(axis=1)
    return dense(pooled, model.get_layer("head")), probabilities


def reference_gradients(model, x, classes, step=1e-5):
    """grad_A y_t of every block by central differences of the float64 forward."""
    _, probabilities = reference_forward(model, x, [0.0, 0.0])
    zeros = [np.zeros_like(a) for a in probabilities]
    rows = np.arange(len(x))
    grads = []
    for block in range(len(zeros)):
        grad = np.zeros_like(zeros[block])
        for index in np.ndindex(grad.shape[1:]):
            values = []
            for sign in (1.0, -1.0):
                shifted = [z.copy() for z in zeros]
                shifted[block][(slice(None), *index)] = sign * step
                logits, _ = reference_forward(model, x, shifted)
                values.append(logits[rows, classes])
            grad[(slice(None), *index)] = (values[0] - values[1]) / (2 * step)
        grads.append(grad)
    return grads, probabilities


def reference_relevancy(grads, probabilities, classifier):
    """The formula written out: R = I; R <- R + mean_h[max(grad A * A, 0)] R; the output row."""
    tokens = probabilities[0].shape[-1]
    maps = []
    for b in range(len(grads[0])):
        r = np.eye(tokens)
        for grad, a in zip(grads, probabilities):
            weighted = np.maximum(grad[b] * a[b], 0.0)
            r = r + sum(weighted[h] for h in range(len(weighted))) / len(weighted) @ r
        maps.append(r[0, 1:] if classifier == "token" else r.mean(axis=0))
    return np.stack(maps)


@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_relevancy_matches_the_formula_on_an_independent_reference(classifier):
    model, x, classes = tiny(classifier), images(), np.array([1, 3])
    grads, probabilities = reference_gradients(model, x, classes)
    expected = reference_relevancy(grads, probabilities, classifier).reshape(2, 3, 3)
    np.testing.assert_allclose(relevancy(model, x, class_index=classes), expected, atol=1e-5,
                               rtol=1e-5)
    assert np.abs(expected).max() > 1e-2  # a map with something in it, not zeros on both sides


def test_gate_gradient_is_grad_a_times_a():
    model, x, classes = tiny(), images(), np.array([2, 0])
    grads, probabilities = reference_gradients(model, x, classes)
    gated = attention_gradients(model, x, classes)
    for got, grad, a in zip(gated, grads, probabilities):
        assert np.abs(grad * a).max() > 1e-3
        np.testing.assert_allclose(got, grad * a, atol=1e-5, rtol=1e-4)


def test_gated_forward_at_ones_is_the_models_forward():
    for model in (tiny(representation_size=6), tiny("gap", position_embedding_placement=
                                                         "every_layer")):
        x, tokens = images(), 9 + (model.config.encoder.classifier == "token")
        gates = [keras.ops.ones((2, 2, tokens, tokens))] * 2
        np.testing.assert_allclose(keras.ops.convert_to_numpy(model.record(x, gates=gates)[0]),
                                   keras.ops.convert_to_numpy(model(x)), atol=1e-5)


def test_gradient_of_a_known_function():
    x, y = np.array([0.5, -1.0, 2.0]), np.array([3.0, 1.0, -2.0])
    grads = gradient(lambda t: keras.ops.sum(keras.ops.sin(t[0]) * t[1]), [x, y])
    np.testing.assert_allclose(grads[0], np.cos(x) * y, rtol=1e-6)
    np.testing.assert_allclose(grads[1], np.sin(x), rtol=1e-6)


def test_predicted_class_is_the_default_and_one_int_serves_all():
    model, x = tiny(), images(3)
    predicted = np.argmax(keras.ops.convert_to_numpy(model(x)), axis=-1)
    np.testing.assert_array_equal(relevancy(model, x), relevancy(model, x, predicted))
    other = (predicted + 1) % CLASSES
    assert not np.allclose(relevancy(model, x), relevancy(model, x, other))
    np.testing.assert_allclose(relevancy(model, x, 2), relevancy(model, x, [2, 2, 2]))


def test_any_image_size_hybrid_and_batches():
    model = numpy_weights(ViTImageClassifier(
        image_size=None, patch_size=4, hidden_size=8, num_layers=2, num_heads=2, mlp_dim=16,
        num_classes=CLASSES, position_embedding_grid=(3, 3)))
    x = images(3, size=16)
    maps = relevancy(model, x, class_index=1, batch_size=2)
    assert maps.shape == (3, 4, 4)
    np.testing.assert_allclose(maps[2:], relevancy(model, x[2:], class_index=1), atol=1e-6)
    hybrid = numpy_weights(ViTImageClassifier(
        image_size=32, patch_size=2, hidden_size=8, num_layers=1, num_heads=2, mlp_dim=16,
        num_classes=CLASSES, stem_num_layers=(1,), stem_width_factor=0.5))
    x = images(2, size=32)
    assert hybrid.config.grid == (4, 4)
    assert relevancy(hybrid, x).shape == (2, 4, 4)
    gates = [keras.ops.ones((2, 2, 17, 17))]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(hybrid.record(x, gates=gates)[0]),
                               keras.ops.convert_to_numpy(hybrid(x)), atol=1e-4)


def test_bad_inputs_name_the_fix():
    model, x = tiny(), images()
    with pytest.raises(ValueError, match=r"out of range .* 4 classes"):
        relevancy(model, x, class_index=4)
    with pytest.raises(ValueError, match="one int per image"):
        relevancy(model, x, class_index=[0, 1, 2])
    with pytest.raises(ValueError, match=r"ViTImageClassifier\(backbone, num_classes"):
        relevancy(ViTBackbone(image_size=12, patch_size=4, hidden_size=8, num_layers=1,
                              num_heads=2, mlp_dim=16), x)
    with pytest.raises(ValueError, match="attention_weights"):
        relevancy(ViTImageClassifier(image_size=12, patch_size=4, hidden_size=8, num_layers=1,
                                     num_heads=2, mlp_dim=16, num_classes=3, axial=True), x)
    quantized = tiny()
    quantized.quantize("int8")
    with pytest.raises(ValueError, match="float model"):
        relevancy(quantized, x)


def test_a_model_without_attention_is_refused():
    resnet = keras_vit.ResNetImageClassifier(block_units=(1,), width_factor=1, num_classes=3,
                                             image_size=32)
    with pytest.raises(TypeError, match="no token attention"):
        relevancy(resnet, images(1, size=32))
