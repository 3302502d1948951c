"""What every keras_vit model shares: its dtype policy, quantization, the class layer, and a
config that is its description.

A model is described by one frozen description (``keras_vit.models.description``: a
``ViTConfig``, a ``ResNetConfig``): ``DescribedModel`` keeps it as ``model.config`` and returns
it from ``get_config``, so ``from_config(get_config())`` rebuilds the same architecture and
``.keras`` files round-trip.
"""

import keras

from keras_vit.models import quantization, upgrade
from keras_vit.models.description import MODEL_KEYWORDS, model_keywords

__all__ = ["MODEL_KEYWORDS", "DescribedModel", "QuantizableModel", "class_layer", "model_keywords"]


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


class DescribedModel(QuantizableModel):
    """A functional model whose ``get_config`` is its description (``self.config``, of the
    class's ``config_class``)."""

    config_class = None  # the family's description class, set by each model class

    def __init__(self, *, inputs, outputs, name, config, dtype=None, **kwargs):
        super().__init__(inputs=inputs, outputs=outputs, name=name, dtype=dtype, **kwargs)
        self.config = config

    @classmethod
    def describe(cls, config=None, keywords=None):
        """The description of a ``config`` (object or its ``to_dict``) and/or flat keywords."""
        keywords = dict(keywords or {})
        description = cls.config_class
        if config is None:
            return description.from_keywords(**keywords)
        if not isinstance(config, (description, dict)):
            raise TypeError(f"config must be a {description.__name__} or its to_dict() dict, got "
                            f"{config!r}.")
        config = description.from_dict(config)
        return config.replace(**keywords) if keywords else config

    def get_config(self):
        return {**self.base_config(), "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        config = cls.with_policy(config)
        return cls(config=cls.config_class.from_dict(config.pop("config")), **config)

    def load_weights(self, filepath, *args, **kwargs):
        """``keras.Model.load_weights``; a file of an earlier keras_vit layout is refused with
        the name of its converter (``keras_vit.models.upgrade``)."""
        try:
            return super().load_weights(filepath, *args, **kwargs)
        except ValueError:
            if str(filepath).endswith(".weights.h5"):
                upgrade.check_earlier_layout(self, filepath)
            raise

    def graph_layer(self, name):
        """The layer of this model's own graph named ``name`` (not one inside it: ``get_layer``
        also reaches a backbone's or an encoder's own layers by their official names)."""
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise ValueError(f"{self.name} has no layer {name!r} in its graph.")

    def call(self, inputs, training=None, mask=None):
        if self.config.image_size is None:  # checked whenever the shape is known when traced
            self.config.check_input(tuple(inputs.shape)[1:3])
        return super().call(inputs, training=training, mask=mask)
