"""What every keras_vit model shares: its dtype policy, quantization, the class layer, and a
config that is its arguments.

A model's constructor arguments are its configuration (docs/architecture.md): ``ConfiguredModel``
keeps the normalised arguments a subclass hands it and returns exactly them from ``get_config``,
so ``from_config(get_config())`` rebuilds the same architecture and ``.keras`` files round-trip.
"""

import keras

from keras_vit.models import quantization

# The keywords every model takes besides its description, the common part of its get_config
# (``QuantizableModel.base_config``); any other keyword is a setting of the description.
MODEL_KEYWORDS = ("name", "trainable", "dtype")


def model_keywords(keywords):
    """Take the model's own keywords (``MODEL_KEYWORDS``) out of the dict ``keywords`` and
    return them; what stays is the description's."""
    return {key: keywords.pop(key) for key in MODEL_KEYWORDS if key in keywords}


def float32_output_dtype(dtype):
    """The dtype for a model's last layer: float32 under a mixed policy, else ``dtype``.

    Under ``mixed_float16``/``mixed_bfloat16`` the logits feed the loss in float32 (the Keras
    mixed-precision guidance); the head's weights are float32 already, so this costs nothing.
    """
    policy = keras.dtype_policies.get(dtype) if dtype is not None else keras.config.dtype_policy()
    if policy.quantization_mode is None and policy.compute_dtype != policy.variable_dtype:
        if isinstance(policy, keras.dtype_policies.DTypePolicyMap):  # a quantized model's
            return keras.dtype_policies.DTypePolicyMap(
                policy.variable_dtype, {path: policy[path] for path in policy})
        return policy.variable_dtype
    return dtype


def class_layer(num_classes, kernel_initializer, bias_init, dtype):
    """The class layer of a head (paper Sec. 3.1): Dense(num_classes) named ``head``, as the
    official code names it, with a constant bias (zero kernel by default, Sec. 3.2); its
    ``dtype`` is float32 under a mixed policy (``float32_output_dtype``)."""
    return keras.layers.Dense(
        num_classes,
        kernel_initializer=kernel_initializer,
        bias_initializer=keras.initializers.Constant(bias_init),
        dtype=float32_output_dtype(dtype),
        name="head",
    )


class QuantizableModel(keras.Model):
    """What keras_vit's functional models share: the dtype policy they were given, ``quantize``
    on every projection with keras_vit's checks first, and the common part of the config."""

    def __init__(self, *, inputs, outputs, name, dtype=None, **kwargs):
        super().__init__(inputs=inputs, outputs=outputs, name=name, **kwargs)
        if dtype is not None:  # a functional Model ignores the dtype argument
            self.dtype_policy = dtype
        quantization.settle_policies(self)
        # Keras wraps quantize in checks of its own, whose errors send an image model towards
        # a text calibration: keras_vit's checks go first.
        self.quantize = quantization.checked(self, self.quantize)

    def quantize(self, mode=None, config=None, filters=None, **kwargs):
        """``keras.Model.quantize`` on the layers Keras can quantize: every projection.

        ``mode`` is ``"int8"``, ``"int4"`` or ``"float8"`` (``keras_vit.models.quantization``
        says what each does and why ``"gptq"``/``"awq"`` are refused); ``filters`` narrows the
        layers further. Layers Keras cannot quantize (norms, convolutions, embeddings added to
        the tokens) are left as they are, without a warning each.
        """
        super().quantize(mode, config=config, filters=quantization.layer_filter(filters),
                         **kwargs)

    def base_config(self):
        """``MODEL_KEYWORDS``: the name, trainability and dtype policy (a quantized model's map
        included)."""
        return {"name": self.name, "trainable": self.trainable,
                "dtype": keras.dtype_policies.serialize(quantization.policy_for_config(self))}

    @staticmethod
    def with_policy(config):
        """A copy of a saved config with its dtype policy deserialised."""
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return config


class ConfiguredModel(QuantizableModel):
    """A functional model whose config is the normalised constructor arguments.

    A subclass builds its graph, calls ``super().__init__(inputs=..., outputs=..., name=...,
    arguments=...)`` with the dict of its own (normalised) arguments; each becomes an attribute
    of the same name and the whole dict is ``get_config``.
    """

    def __init__(self, *, inputs, outputs, name, arguments, dtype=None, **kwargs):
        super().__init__(inputs=inputs, outputs=outputs, name=name, dtype=dtype, **kwargs)
        self._arguments = dict(arguments)
        for key, value in self._arguments.items():
            setattr(self, key, value)

    def get_config(self):
        config = self.base_config()
        for key, value in self._arguments.items():
            config[key] = list(value) if isinstance(value, tuple) else value
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**cls.with_policy(config))
