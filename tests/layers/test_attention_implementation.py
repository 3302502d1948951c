"""The attention kernel as a setting of the model, and Keras' TPU attention path never taken.

On a TPU, ``keras.ops.dot_product_attention`` with Keras' own choice of kernel runs the Pallas
Splash kernel with a causal mask, no bias and no 1/sqrt(d) scale, or logs a traceback where the
token count does not tile. ``tests/tpu_emulation.py`` makes Keras' jax backend behave so on this
CPU; every ViT here must give the CPU's numbers there, with nothing logged.
"""

import logging

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers import attention
from keras_vit.layers.attention import flash_attention_argument
from keras_vit.layers.encoder import EncoderConfig
from tests.tolerances import assert_same_function

BACKEND = keras.backend.backend()
on_jax = pytest.mark.skipif(BACKEND != "jax", reason="Keras' TPU attention path is jax's")

# tokens: (image size, classifier, position embedding); patches of 4 pixels
TOKEN_COUNTS = {
    "17-token": (16, "token", "learned_1d"),
    "197-token": (56, "token", "learned_1d"),
    "257-token": (64, "token", "learned_1d"),
    "256-gap": (64, "gap", "learned_1d"),  # tiles into the kernel's blocks: runs, causally
    "128-relative": ((32, 64), "gap", "relative"),  # a bias the kernel would drop
}


def _vit(image_size, classifier, position_embedding, **kwargs):
    keras.utils.set_random_seed(0)
    return keras_vit.ViTImageClassifier(
        image_size=image_size, patch_size=4, hidden_size=32, num_layers=2, num_heads=4,
        mlp_dim=64, num_classes=10, classifier=classifier, position_embedding=position_embedding,
        head_kernel_initializer="glorot_uniform", **kwargs)


def _images(image_size, batch=2):
    height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
    return np.random.default_rng(0).uniform(-1, 1, (batch, height, width, 3)).astype("float32")


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def _relative(a, b):
    a, b = np.asarray(a, "float64"), np.asarray(b, "float64")
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def _gradients(model, images, labels):
    import jax

    trainable = [v.value for v in model.trainable_variables]
    frozen = [v.value for v in model.non_trainable_variables]

    def loss(weights):
        logits, _ = model.stateless_call(weights, frozen, images, training=True)
        return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(
            labels, logits, from_logits=True))

    return jax.jit(jax.grad(loss))(trainable)


@on_jax
@pytest.mark.parametrize("case", list(TOKEN_COUNTS))
def test_a_tpu_gives_the_cpus_logits_and_logs_nothing(case, caplog):
    from tpu_emulation import keras_sees_a_tpu

    image_size, classifier, position = TOKEN_COUNTS[case]
    model, images = _vit(image_size, classifier, position), _images(image_size)
    on_cpu = np.asarray(model(images))
    caplog.set_level(logging.DEBUG)
    with keras_sees_a_tpu() as splash_calls:
        eager = np.asarray(model(images))
        model.make_predict_function(force=True)  # traced again, on the "TPU"
        compiled = model.predict(images, verbose=0)
    model.make_predict_function(force=True)
    assert splash_calls == []
    assert _relative(eager, on_cpu) <= 1e-5 and _relative(compiled, on_cpu) <= 1e-5
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


@on_jax
@pytest.mark.parametrize("case", ["197-token", "128-relative"])
def test_a_tpu_gives_the_cpus_gradients_and_attention(case, caplog):
    from tpu_emulation import keras_sees_a_tpu

    image_size, classifier, position = TOKEN_COUNTS[case]
    model, images = _vit(image_size, classifier, position), _images(image_size)
    labels = np.array([3, 7])
    grads_cpu = _gradients(model, images, labels)
    probs_cpu = model.backbone.attention_model()(images)
    caplog.set_level(logging.DEBUG)
    with keras_sees_a_tpu() as splash_calls:
        grads_tpu = _gradients(model, images, labels)
        probs_tpu = model.backbone.attention_model()(images)
    assert splash_calls == []
    for tpu, cpu in zip(grads_tpu, grads_cpu):
        assert _relative(tpu, cpu) <= 1e-5
    for tpu, cpu in zip(probs_tpu, probs_cpu):
        np.testing.assert_allclose(np.asarray(tpu), np.asarray(cpu), atol=1e-6)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


@on_jax
def test_the_emulation_shows_what_keras_would_do():
    """The stand-in is Keras' TPU path: left to Keras (flash_attention=None), a 256-token
    attention comes out causal (the first query sees only itself) and a 197-token one raises
    inside the kernel and is logged."""
    from tpu_emulation import keras_sees_a_tpu

    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(1, 256, 2, 8)).astype("float32") for _ in range(3))
    with keras_sees_a_tpu() as splash_calls:
        keras_tpu = np.asarray(keras.ops.dot_product_attention(q, k, v))
        ours = np.asarray(keras.ops.dot_product_attention(
            q, k, v, flash_attention=flash_attention_argument("auto", q)))
    assert len(splash_calls) == 1 and type(splash_calls[0].masks[0]).__name__ == "CausalMask"
    np.testing.assert_allclose(keras_tpu[0, 0], v[0, 0], rtol=1e-5)
    reference = np.asarray(keras.ops.dot_product_attention(q, k, v, flash_attention=False))
    np.testing.assert_allclose(ours, reference, atol=1e-6)
    assert _relative(keras_tpu, reference) > 0.1


@pytest.mark.parametrize("implementation", ["auto", "xla"])
def test_every_implementation_gives_the_explicit_softmax(implementation):
    """The fast path under each setting equals A = softmax(q k^T / sqrt(d) + bias) of the
    explicit path (the one attention scores come from)."""
    layer = attention.MultiHeadSelfAttention(
        4, relative_position=True, attention_implementation=implementation)
    x = np.random.default_rng(1).normal(size=(2, 9, 32)).astype("float32")
    fast = layer(x)
    probs = _numpy(layer.probabilities(x))  # the explicit softmax, (batch, H, N, N)
    values = _numpy(layer.value(x)).reshape(2, 9, 4, 8)
    context = np.einsum("bhqk,bkhd->bqhd", probs, values).reshape(2, 9, 32)
    np.testing.assert_allclose(_numpy(fast), _numpy(layer.out(context)), atol=2e-6)


def test_the_setting_is_saved_with_the_model(tmp_path):
    model = _vit(16, "token", "learned_1d", attention_implementation="xla")
    assert model.config.encoder.attention_implementation == "xla"
    block = model.get_layer("encoderblock_1")
    assert block.MultiHeadDotProductAttention_1.attention_implementation == "xla"
    model.save(tmp_path / "vit.keras")
    loaded = keras.saving.load_model(tmp_path / "vit.keras")
    assert loaded.config.encoder.attention_implementation == "xla"
    images = _images(16)
    np.testing.assert_allclose(_numpy(loaded(images)), _numpy(model(images)), atol=1e-6)
    rebuilt = keras_vit.create_model("ViT-Ti/16", image_size=32, num_classes=3,
                                     attention_implementation="xla")
    assert rebuilt.backbone.encoder.config.attention_implementation == "xla"


def test_an_unknown_implementation_is_refused():
    with pytest.raises(ValueError, match="Unknown attention_implementation 'cudnn'.*'auto'"):
        EncoderConfig(num_layers=1, num_heads=2, mlp_dim=8, attention_implementation="cudnn")
    with pytest.raises(ValueError, match="'auto'.*'xla'.*'flash'"):
        _vit(16, "token", "learned_1d", attention_implementation="splash")


def test_flash_where_there_is_none_names_what_is_available():
    """This machine has no flash kernel: TensorFlow refuses 'flash' when the model is built,
    jax and torch when it first runs on the CPU; the message names 'auto' and 'xla'."""
    if BACKEND == "tensorflow":
        with pytest.raises(ValueError, match="TensorFlow backend.*'auto'.*'xla'"):
            _vit(16, "token", "learned_1d", attention_implementation="flash")
        return
    model = _vit(16, "token", "learned_1d", attention_implementation="flash")
    with pytest.raises(ValueError, match="not available on a CPU.*'auto'.*'xla'"):
        model(_images(16))


class _Query:
    """A stand-in query of (batch, tokens, heads, head_dim) on no particular device."""

    def __init__(self, dtype, tokens=197, head_dim=64):
        self.dtype, self.shape = dtype, (2, tokens, 12, head_dim)


H100, T4 = ("gpu", "9.0"), ("gpu", "7.5")


@pytest.mark.parametrize(
    "device, dtype, bias, tokens, training, expected",
    [
        (H100, "bfloat16", False, 197, False, None),  # mixed_bfloat16: cuDNN or torch flash
        (("gpu", "8.0"), "float16", False, 197, False, None),  # A100
        (H100, "bfloat16", False, 196, True, None),  # GAP trains on flash
        (H100, "bfloat16", False, 197, True, None),  # trains on one masked token more (jax)
        (H100, "bfloat16", False, None, True, "unknown"),  # jax only: padding needs the count
        (H100, "float32", False, 197, False, "float16 or bfloat16"),
        (T4, "float16", False, 197, False, "a T4 has 7.5"),
        (H100, "bfloat16", True, 197, False, "bias"),  # relative positions
        (("tpu", None), "bfloat16", False, 256, False, "causal"),
        (("cpu", None), "float32", False, 197, False, "cpu platform"),
    ],
)
def test_what_each_device_gets(monkeypatch, device, dtype, bias, tokens, training, expected):
    monkeypatch.setattr(attention, "_device", lambda query: device)
    query = _Query(dtype, tokens)
    bias = np.zeros((1, 12, tokens, tokens), dtype) if bias else None
    auto = flash_attention_argument("auto", query, bias, training)
    if BACKEND == "tensorflow":
        assert auto is False
        return
    if BACKEND == "torch":  # Keras asks torch whether its flash kernel takes the inputs
        assert auto is None
        if expected == "unknown":  # torch's flash kernel trains on any token count
            expected = None
    else:
        assert auto is (None if expected is None else False)
    if expected is None:
        assert flash_attention_argument("flash", query, bias, training) is True
    else:
        with pytest.raises(ValueError, match=expected):
            flash_attention_argument("flash", query, bias, training)
    assert flash_attention_argument("xla", query, bias, training) is False


@pytest.mark.parametrize("tokens", [197, 5])
def test_an_odd_token_count_padded_by_one_masked_token_is_exact(tokens):
    q, k, v = np.random.default_rng(1).normal(size=(3, 2, tokens, 4, 8)).astype("float32")
    padded = attention.even_token_attention(q, k, v, flash_attention=False)
    plain = keras.ops.dot_product_attention(q, k, v, flash_attention=False)
    assert tuple(padded.shape) == (2, tokens, 4, 8)
    assert_same_function(_numpy(padded), _numpy(plain), depth=1)


def test_only_a_jax_training_call_on_an_odd_count_that_may_take_flash_is_padded():
    query = _Query("bfloat16", 197)
    expected = BACKEND == "jax"
    assert attention.pads_for_flash(query, None, training=True) is expected
    assert attention.pads_for_flash(query, True, training=True) is expected
    assert not attention.pads_for_flash(query, False, training=True)  # XLA takes any count
    assert not attention.pads_for_flash(query, None, training=False)  # the forward takes 197
    assert not attention.pads_for_flash(_Query("bfloat16", 196), None, training=True)


@on_jax
def test_a_model_trained_on_the_padded_attention_gets_the_same_gradients(monkeypatch):
    """As on a GPU where flash attention may run: the 197-token ViT's training step goes through
    even_token_attention (here on XLA's kernel) and its gradients are the unpadded ones."""
    model = _vit(56, "token", "learned_1d")
    images, labels = _images(56), np.array([1, 7])
    plain = _gradients(model, images, labels)
    calls = []

    def padded(*args, **kwargs):
        calls.append(args[0].shape)
        return even_token_attention(*args, **kwargs)

    even_token_attention = attention.even_token_attention
    monkeypatch.setattr(attention, "flash_attention_argument", lambda *a, **k: None)
    monkeypatch.setattr(attention, "even_token_attention", padded)
    through_padding = _gradients(model, images, labels)
    assert calls and all(shape[1] == 197 for shape in calls), calls
    # over all weights at once: the key biases' true gradient is 0 (softmax ignores a constant
    # shift of a query's logits), so theirs alone is rounding noise on either side
    flat = [np.concatenate([np.ravel(_numpy(g)) for g in grads])
            for grads in (through_padding, plain)]
    assert _relative(*flat) < 1e-5
