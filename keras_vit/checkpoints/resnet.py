"""Official key tables of the ResNets: the hybrid stem (vit_jax) and BiT ResNetV2 (big_transfer).

Layouts (``docs/official-checkpoints.md`` Sec. 1-2):

- hybrid: ``conv_root/kernel``, ``gn_root/{scale,bias}``, ``block{s}/unit{u}/{conv1,conv2,conv3,
  conv_proj}/kernel`` and ``.../{gn1,gn2,gn3,gn_proj}/{scale,bias}``; GroupNorm parameters are
  stored (1,1,1,C) (``(C,)`` is accepted too), units are numbered without padding.
- BiT (TF names): ``resnet/root_block/standardized_conv2d/kernel``, ``resnet/block{s}/unit{uu}/
  {a,b,c}/{group_norm/{gamma,beta},standardized_conv2d/kernel}``, ``.../a/proj/standardized_conv2d/
  kernel``, ``resnet/group_norm/{gamma,beta}`` and the 1x1-conv head ``resnet/head/conv2d/kernel``
  (1,1,C,K) + ``bias``. Units are numbered with two digits.

``keras_vit.checkpoints.official`` and ``keras_vit.checkpoints.timm`` call these functions; use
``load_checkpoint`` / ``save_checkpoint`` rather than calling them directly.
"""

from keras_vit.checkpoints.base import Entry
from keras_vit.layers.resnet import ROOT_WIDTH, hybrid_stride, plain_number
from keras_vit.models.description import Head, ResNetConfig, Stages

# BiT TF sub-module -> bit_jax name of the keras_vit PreActivationUnit sub-layer.
_BIT_UNIT = {
    "a/group_norm": "gn1",
    "a/standardized_conv2d": "conv1",
    "a/proj/standardized_conv2d": "conv_proj",
    "b/group_norm": "gn2",
    "b/standardized_conv2d": "conv2",
    "c/group_norm": "gn3",
    "c/standardized_conv2d": "conv3",
}


def _group_norm(prefix, layer, names=("scale", "bias"), file_shape=None):
    gamma, beta = names
    shape = None if file_shape is None else file_shape(layer.gamma.shape[0])
    return {
        f"{prefix}/{gamma}": Entry(layer.gamma, shape),
        f"{prefix}/{beta}": Entry(layer.beta, shape),
    }


def _flax_shape(channels):
    return (1, 1, 1, channels)


# ----------------------------------------------------------------------------- hybrid


def hybrid_stem_table(stem_layer):
    """Official key -> Entry for a ``HybridStem`` (the ``resnet`` layer of a hybrid ViT)."""
    table = {"conv_root/kernel": Entry(stem_layer.conv_root.kernel)}
    table.update(_group_norm("gn_root", stem_layer.gn_root, file_shape=_flax_shape))
    for s, stage in enumerate(stem_layer.stages, 1):
        for u, unit in enumerate(stage.units, 1):
            prefix = f"block{s}/unit{u}"
            convs = ["conv1", "conv2", "conv3"] + (["conv_proj"] if unit.has_projection else [])
            norms = ["gn1", "gn2", "gn3"] + (["gn_proj"] if unit.has_projection else [])
            for name in convs:
                table[f"{prefix}/{name}/kernel"] = Entry(getattr(unit, name).kernel)
            for name in norms:
                table.update(_group_norm(f"{prefix}/{name}", getattr(unit, name),
                                         file_shape=_flax_shape))
    return table


def _count(tensors, template):
    count = 0
    while template.format(count + 1) in tensors:
        count += 1
    return count


def hybrid_stem_config(tensors):
    """``(dict(num_layers=[...], width_factor=...), stem_stride)`` from a hybrid file's tensors."""
    width = int(tensors["conv_root/kernel"].shape[-1])
    num_stages = _count(tensors, "block{}/unit1/conv1/kernel")
    num_layers = [_count(tensors, f"block{s}/unit{{}}/conv1/kernel")
                  for s in range(1, num_stages + 1)]
    return (dict(num_layers=num_layers, width_factor=plain_number(width / ROOT_WIDTH)),
            hybrid_stride(num_layers))


# ----------------------------------------------------------------------------- BiT

_ROOT = "resnet/root_block/standardized_conv2d/kernel"
_HEAD = "resnet/head/conv2d"


def bit_config(tensors):
    """The ``ResNetConfig`` of a BiT file's tensors (its head None when the file has none).

    The image size is not recorded in BiT files; it is left open (``image_size=None``: any size).
    """
    if _ROOT not in tensors:
        raise ValueError(
            f"The checkpoint has 'resnet/...' keys but no {_ROOT!r}; it is not a complete BiT "
            "ResNetV2 checkpoint."
        )
    root = tensors[_ROOT]
    num_stages = _count(tensors, "resnet/block{}/unit01/a/standardized_conv2d/kernel")
    if num_stages == 0:
        raise ValueError(
            "The BiT checkpoint has no resnet/block1/unit01; it holds no ResNet stage."
        )
    block_units = [
        _count(tensors, f"resnet/block{s}/unit{{:02d}}/a/standardized_conv2d/kernel")
        for s in range(1, num_stages + 1)
    ]
    head = tensors.get(f"{_HEAD}/kernel")
    return ResNetConfig(
        Stages(block_units, plain_number(int(root.shape[-1]) / ROOT_WIDTH)), image_size=None,
        num_channels=int(root.shape[2]),
        head=None if head is None else Head(int(head.shape[-1])))


def bit_table(model):
    """Official key -> Entry for a ``ResNetBackbone`` or ``ResNetImageClassifier``."""
    table = {_ROOT: Entry(model.get_layer("root_block").conv_root.kernel)}
    for s in range(1, len(model.config.stages.block_units) + 1):
        for unit in model.get_layer(f"block{s}").units:
            prefix = f"resnet/block{s}/{unit.name}"
            for path, name in _BIT_UNIT.items():
                layer = getattr(unit, name)
                if layer is None:
                    continue
                if name.startswith("gn"):
                    table.update(_group_norm(f"{prefix}/{path}", layer, ("gamma", "beta")))
                else:
                    table[f"{prefix}/{path}/kernel"] = Entry(layer.kernel)
    table.update(_group_norm("resnet/group_norm", model.get_layer("norm-pre-head"),
                             ("gamma", "beta")))
    if model.config.head is not None:  # BiT's head has no pre-logits layer (capabilities)
        head = model.get_layer("head")
        table[f"{_HEAD}/kernel"] = Entry(head.kernel, (1, 1) + tuple(head.kernel.shape))
        table[f"{_HEAD}/bias"] = Entry(head.bias)
    return table
