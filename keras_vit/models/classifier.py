"""The classifier of every family: a head (paper Sec. 3.1) on a backbone, its sibling.

``ImageClassifier`` is written once; a family's classifier class only names its backbone class
(``backbone_cls``, keras-hub's name). Its description is the backbone's plus a ``Head``
(``keras_vit.models.description``): the optional ``pre_logits`` layer (Dense + tanh, the
pre-training head's hidden layer of Appendix D.3, transformers' pooler) on the backbone's
``"pooled"`` output, then the class layer ``head`` (zero-initialised, Sec. 3.2), or the
pre-logits layer alone for the features of a checkpoint saved without its classes.

One rule builds it: ``Classifier(backbone, num_classes=K)`` puts a new head on a backbone that
exists (shared, not copied: a new task, Sec. 3.2); ``Classifier(config=..., **settings)`` (or
the settings alone) builds the backbone too.
"""

import keras

from keras_vit.models.base import DescribedModel, class_layer
from keras_vit.models.description import Head
from keras_vit.models.habits import Task

__all__ = ["ImageClassifier"]


class ImageClassifier(Task, DescribedModel):
    """A head on a backbone: logits (batch, num_classes), float32 under a mixed policy; the
    pre-logits features (batch, representation_size) for a head without classes.

    Args:
        backbone: the backbone to put the head on (an instance of the class's
            ``backbone_cls``, shared, not copied); or leave it out and describe the whole model
            with ``config`` and/or keywords.
        config: the family's description or its ``to_dict()`` (with a backbone: only its head
            is read).
        **keywords: flat settings as the description's ``from_keywords`` takes them (with a
            backbone, only the head's: ``num_classes``, ``representation_size``,
            ``head_kernel_initializer``, ``head_bias_init``).
        preprocessor: None (inputs already in [-1, 1] at the model's size), or an
            ``ImagePreprocessor`` that ``predict``/``fit``/``evaluate`` run on raw images
            (``keras_vit.models.habits``; ``from_preset`` attaches one).
    """

    backbone_cls = None  # set by each family's classifier
    default_name = "classifier"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.backbone_cls is not None:
            cls.config_class = cls.backbone_cls.config_class

    def __init__(self, backbone=None, *, config=None, name=None, dtype=None, trainable=True,
                 preprocessor=None, **keywords):
        if backbone is None:
            config = self.describe(config, keywords)
            backbone = self.backbone_cls(config.backbone(), dtype=dtype, name="backbone")
        else:
            config = self._head_on(backbone, config, keywords)
        if config.head is None:
            raise ValueError(
                f"A {type(self).__name__} needs a head (num_classes, or representation_size for "
                f"the pre-logits layer alone); for the features alone use the "
                f"{self.backbone_cls.__name__}.")
        inputs = keras.Input(backbone.input.shape[1:], name="images")
        head = head_layers(config.head, dtype)
        super().__init__(inputs=inputs, outputs=head(backbone(inputs)["pooled"]),
                         name=name or self.default_name, config=config, dtype=dtype,
                         trainable=trainable)
        self.backbone = backbone
        self.preprocessor = preprocessor
        self._head = head  # the graph's head, for a family's forward that records

    @classmethod
    def describe(cls, config=None, keywords=None):
        return cls.backbone_cls.describe(config, keywords)

    @classmethod
    def _head_on(cls, backbone, config, keywords):
        """The description of a head (``keywords``/``config``'s) on the built ``backbone``."""
        expected = cls.backbone_cls
        if not isinstance(backbone, expected):
            raise TypeError(
                f"A {cls.__name__} goes on a {expected.__name__}, got a "
                f"{type(backbone).__name__}: a head is made for one family and width. Use that "
                f"family's classifier, e.g. {type(backbone).__name__.replace('Backbone', '')}"
                "ImageClassifier(backbone, num_classes=K).")
        owner = expected.config_class._owner
        foreign = sorted(k for k in keywords if k != "head" and owner(k)[0] != "head")
        if foreign:
            raise TypeError(
                f"{', '.join(foreign)} describe the backbone, which is already built; give a "
                f"{cls.__name__} built on a backbone only head settings (num_classes, "
                "representation_size, head_kernel_initializer, head_bias_init), or build a new "
                f"{expected.__name__} with those settings.")
        head = Head()
        if config is not None:
            config = cls.describe(config)
            if config.backbone() != backbone.config:
                raise ValueError(
                    f"The config describes another backbone than the one given "
                    f"({_difference(config.backbone(), backbone.config)}): a head is made for "
                    "one backbone. Pass only the head's settings (num_classes=...) with a "
                    "backbone.")
            head = config.head
        return backbone.config.replace(head=head, **keywords)

    def get_layer(self, name=None, index=None):
        """A layer by name: the head's (``head``, ``pre_logits``) or the backbone's, its inner
        layers included (``embedding``, ``encoderblock_3``, ``block2``...)."""
        if name is not None and index is None and name not in ("head", "pre_logits"):
            if name == self.backbone.name:
                return self.backbone
            return self.backbone.get_layer(name)
        return super().get_layer(name, index)

    def feature_extractor(self):
        """A model from images to the class layer's input (the ``pre_logits`` features, or the
        backbone's pooled output), sharing this model's weights."""
        if self.config.head.representation_size is None:
            return keras.Model(self.backbone.input, self.backbone.output["pooled"],
                               name=f"{self.name}_features")
        return keras.Model(self.input, self.graph_layer("pre_logits").output,
                           name=f"{self.name}_features")


def head_layers(head, dtype):
    """The function from pooled features to the head's output: (``pre_logits``), (``head``);
    given a dict ``out``, it records ``"pre_logits"`` (when the head has them) and
    ``"logits"``."""
    layers = []
    if head.representation_size is not None:
        layers.append(keras.layers.Dense(head.representation_size, activation="tanh",
                                         dtype=dtype, name="pre_logits"))
    if head.num_classes is not None:
        layers.append(class_layer(head.num_classes, head.kernel_initializer, head.bias_init,
                                  dtype))

    def apply(x, out=None):
        for layer in layers:
            x = layer(x)
            if out is not None:
                out["logits" if layer.name == "head" else layer.name] = x
        return x
    return apply


def _difference(given, built):
    """The settings where two descriptions differ, e.g. ``hidden_size 384 against 768``."""
    given, built = given.flat(), built.flat()
    keys = [k for k in {**given, **built} if given.get(k) != built.get(k)]
    return "; ".join(f"{k.rpartition('.')[2]} {given.get(k)} against {built.get(k)}"
                     for k in keys[:3])
