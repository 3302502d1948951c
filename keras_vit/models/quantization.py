"""Post-training quantization of keras_vit models with ``model.quantize(mode)``.

Every projection of every model family is a Keras ``Dense`` or ``EinsumDense`` layer: the
attention's ``query``/``key``/``value``/``out`` (``MultiHeadSelfAttention``), the MLP's
``Dense_0``/``Dense_1``, the pre-logits layer and the head, and the ``qkv`` projection of
Axial-DeepLab's attention (AxialResNet). ``model.quantize(mode)`` quantizes exactly these, the
layers whose class Keras can quantize. Keras 3.15 quantizes no convolution: the patch
embedding (a stride-P ``Conv2D``) and the ResNet stems and BiT models' convolutions keep float
weights. Layer norms, position embeddings and the class token hold no projection.

The modes of Keras 3.15:

- ``"int8"``: per-output-channel int8 kernels, activations quantized per token at call time;
- ``"int4"``: int4 kernels packed two a byte, per channel (or grouped with an
  ``keras.quantizers.Int4QuantizationConfig(block_size=...)``);
- ``"float8"``: float8 (e4m3/e5m2) fake quantization with scales learned during training, the
  mode to fine-tune in;
- ``"gptq"`` and ``"awq"`` are refused: Keras calibrates them on token ids (its data loader
  casts the calibration data to int32 tokens), which an image model does not take.

A quantized model saves to and loads from ``.keras``: its config records each quantized
layer's policy in a ``keras.dtype_policies.DTypePolicyMap`` keyed by layer path, which rebuilds
the quantized variables before the weights are read.
"""

import contextlib
import functools
import gc
import re

import keras

from keras_vit.layers.tree import quantization_modes, sublayers

MODES = ("int8", "int4", "float8")
CALIBRATED_MODES = ("gptq", "awq")  # Keras' modes that calibrate on token sequences


def check_mode(mode, config=None):
    """``mode`` (or ``config``'s mode) if Keras can apply it to a keras_vit model, else a clear
    error naming what to use instead."""
    if mode is None and config is not None:
        mode = getattr(config, "mode", None)
    modes = MODES
    if mode in CALIBRATED_MODES:
        raise ValueError(
            f"quantize({mode!r}) calibrates on text: Keras {keras.__version__} feeds its "
            f"{mode.upper()} calibration data through a tokenizer and casts it to int32 token ids, "
            f"which an image model cannot take. Use one of {modes}: 'int8' keeps logits within "
            "about 1% (docs/results.md), 'int4' quarters the kernels' memory."
        )
    if mode not in modes:
        raise ValueError(f"Unknown quantization mode {mode!r}; use one of {modes}, e.g. "
                         "model.quantize('int8').")
    return mode


def check_float(model):
    """Raise a ``ValueError`` naming the fix when ``model`` cannot be quantized as it is: a layer
    is quantized already, or carries LoRA factors."""
    done = quantization_modes(model)
    if done:
        raise ValueError(
            f"The model is already quantized ({', '.join(done)}); a kernel is quantized once. "
            "Quantize the float model to another mode: build or load it again, then call "
            "model.quantize().")
    if any(getattr(layer, "lora_enabled", False) for layer in sublayers(model)):
        raise ValueError(
            "The model carries LoRA factors; merge them into the kernels before quantizing: "
            "model = keras_vit.models.lora.merge_lora(model); model.quantize(mode).")


def checked(model, keras_quantize):
    """``model.quantize`` with ``check_mode`` and ``check_float`` before Keras' own checks, and
    one full garbage collection instead of one a projection (``one_full_collection``)."""

    @functools.wraps(keras_quantize)
    def quantize(mode=None, config=None, **kwargs):
        check_mode(mode, config)
        check_float(model)
        with one_full_collection():
            return keras_quantize(mode=mode, config=config, **kwargs)

    return quantize


@contextlib.contextmanager
def one_full_collection():
    """Keras collects garbage each time it drops a float kernel (``Layer.__delattr__``): a pass
    over every object of the process, seconds each in a notebook that has imported a framework
    or two, once per projection (74 in ViT-B/16). With the objects made before the block frozen
    (``gc.freeze``) those passes see only what quantizing made; one full pass follows."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.collect()


def is_quantizable(layer):
    """Whether Keras quantizes ``layer`` itself: its own class (not a subclass, which Keras
    refuses) implements ``quantize``. Dense and EinsumDense do; no convolution does in 3.15."""
    return "quantize" in type(layer).__dict__


def layer_filter(filters=None):
    """A ``model.quantize`` filter for the quantizable layers ``filters`` also accepts.

    ``filters`` as Keras takes it: a regex on layer names, a list of them, or a callable.
    """
    def accept(layer):
        if not is_quantizable(layer):
            return False
        if filters is None:
            return True
        if callable(filters):
            return bool(filters(layer))
        patterns = [filters] if isinstance(filters, str) else list(filters)
        return any(re.search(pattern, layer.name) for pattern in patterns)

    return accept


def own_policy(layer):
    """The policy of ``layer`` itself, also when its model carries a ``DTypePolicyMap``."""
    policy = layer.dtype_policy
    if isinstance(policy, keras.dtype_policies.DTypePolicyMap):
        return policy[layer.path]
    return policy


def policy_for_config(model):
    """The ``dtype`` a model's config records: its policy, or, when layers are quantized, a
    ``DTypePolicyMap`` from their paths to their quantized policies."""
    policy = model.dtype_policy
    default = policy.default_policy if isinstance(
        policy, keras.dtype_policies.DTypePolicyMap) else policy
    quantized = {layer.path: own_policy(layer) for layer in sublayers(model, include_self=True)
                 if layer is not model and layer.quantization_mode is not None}
    if not quantized:
        return default
    return keras.dtype_policies.DTypePolicyMap(default_policy=default.name, policy_map=quantized)


def settle_policies(model):
    """Give every layer of ``model``, built under a ``DTypePolicyMap`` (a quantized model from
    its config: a loaded file, ``merge_lora``, ``resize_model``), its own policy from the map.

    Keras resolves a layer's map by the layer's path for its quantization mode and dtypes, but
    ``Dense.save_own_variables`` reads ``layer.dtype_policy.quantization_mode``, which on the map
    is its default policy's (none): the int8 kernel would be saved without its scale, and a
    loaded quantized model could not be saved again.
    """
    for layer in sublayers(model):
        policy = layer._dtype_policy
        if isinstance(policy, keras.dtype_policies.DTypePolicyMap) and layer.path:
            layer._dtype_policy = policy[layer.path]
