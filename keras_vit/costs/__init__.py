"""What a model costs, counted from its architecture without running it: FLOPs (paper Fig. 5,
Table 6), device memory and the largest batch (Fig. 12), the devices' memory, Table 6 as data.

It reads the models' descriptions (a ViT's ``ViTConfig``: a built model's, a registered name's or
one given, the last two counted with nothing built) and sits below training and the
application, which plan batches with it.
"""

from keras_vit import _submodules

# Each module is imported when it is first reached as keras_vit.costs.<module>.
__getattr__, __dir__ = _submodules.attribute_hook(__name__)
