"""Input data: named datasets, Fashion-MNIST and digits in memory, the official preprocessing.

In-memory data needs only numpy; the tensorflow-datasets datasets need TensorFlow, imported
when one is loaded.

Example:
>>> from keras_vit import data
>>> data.dataset_info("fashion_mnist").num_classes
10
"""

from keras_vit import _submodules
from keras_vit.data.arrays import Batches, Examples, from_arrays, shared_images
from keras_vit.data.class_names import imagenet2012_class_names
from keras_vit.data.datasets import (
    DATASETS,
    DatasetInfo,
    as_arrays,
    dataset_info,
    load,
    load_examples,
    pipeline,
    resolution,
    take_per_class,
)
from keras_vit.data.offline import fashion_mnist_dir, load_digits, load_fashion_mnist
from keras_vit.data.preprocessing import bit_resolution, mixup, preprocess, to_unit_range

# Modules not imported above are imported when first reached as attributes.
__getattr__, __dir__ = _submodules.attribute_hook(__name__)

__all__ = [
    "DATASETS",
    "Batches",
    "Examples",
    "DatasetInfo",
    "as_arrays",
    "bit_resolution",
    "dataset_info",
    "fashion_mnist_dir",
    "from_arrays",
    "imagenet2012_class_names",
    "load",
    "load_digits",
    "load_examples",
    "load_fashion_mnist",
    "mixup",
    "pipeline",
    "preprocess",
    "resolution",
    "shared_images",
    "take_per_class",
    "to_unit_range",
]
