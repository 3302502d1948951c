"""The paper's Table 6 (Appendix D) as data: the models of Fig. 5, their JFT-300M pre-training
(epochs, compute in exaFLOPs) and their fine-tuned transfer accuracies.

``keras_vit.costs.compute.pretraining_flops`` is our estimate of the compute column, counted
from the architectures (``tests/costs/test_compute.py`` compares the two, row by row).

Example:
>>> best = max(TABLE_6, key=lambda row: row.imagenet)
>>> best.model, best.epochs, best.exaflops, best.imagenet
('ViT-H/14', 14, 4262, 88.08)
"""

import collections

# JFT-300M (paper Sec. 4.1): 303M images in 18k classes (18,291 in the official configs).
JFT_IMAGES = 303_000_000
JFT_CLASSES = 18291
PRETRAINING_IMAGE_SIZE = 224  # every Table 6 model was pre-trained at 224 px (Sec. 4.1)

Table6Row = collections.namedtuple(
    "Table6Row",
    ["name", "model", "epochs", "exaflops", "imagenet", "imagenet_real", "cifar10", "cifar100",
     "pets", "flowers"],
)
Table6Row.__doc__ = """One row of the paper's Table 6: its ``name``, our registry name (``model``),
JFT-300M pre-training ``epochs``, the paper's pre-training compute in ``exaflops``, and the
fine-tuned transfer accuracies in per cent."""

# The paper's Table 6 (Appendix D), as printed: the data of Fig. 5.
TABLE_6 = tuple(Table6Row(*row) for row in [
    ("ViT-B/32", "ViT-B/32", 7, 55, 80.73, 86.27, 98.61, 90.49, 93.40, 99.27),
    ("ViT-B/16", "ViT-B/16", 7, 224, 84.15, 88.85, 99.00, 91.87, 95.80, 99.56),
    ("ViT-L/32", "ViT-L/32", 7, 196, 84.37, 88.28, 99.19, 92.52, 95.83, 99.45),
    ("ViT-L/16", "ViT-L/16", 7, 783, 86.30, 89.43, 99.38, 93.46, 96.81, 99.66),
    ("ViT-L/16", "ViT-L/16", 14, 1567, 87.12, 89.99, 99.38, 94.04, 97.11, 99.56),
    ("ViT-H/14", "ViT-H/14", 14, 4262, 88.08, 90.36, 99.50, 94.71, 97.11, 99.71),
    ("ResNet50x1", "BiT-R50x1", 7, 50, 77.54, 84.56, 97.67, 86.07, 91.11, 94.26),
    ("ResNet50x2", "BiT-R50x2", 7, 199, 82.12, 87.94, 98.29, 89.20, 93.43, 97.02),
    ("ResNet101x1", "BiT-R101x1", 7, 96, 80.67, 87.07, 98.48, 89.17, 94.08, 95.95),
    ("ResNet152x1", "BiT-R152x1", 7, 141, 81.88, 87.96, 98.82, 90.22, 94.17, 96.94),
    ("ResNet152x2", "BiT-R152x2", 7, 563, 84.97, 89.69, 99.06, 92.05, 95.37, 98.62),
    ("ResNet152x2", "BiT-R152x2", 14, 1126, 85.56, 89.89, 99.24, 91.92, 95.75, 98.75),
    ("ResNet200x3", "BiT-R200x3", 14, 3306, 87.22, 90.15, 99.34, 93.53, 96.32, 99.04),
    ("R50x1+ViT-B/32", "R50+ViT-B/32", 7, 106, 84.90, 89.15, 99.01, 92.24, 95.75, 99.46),
    ("R50x1+ViT-B/16", "R50+ViT-B/16", 7, 274, 85.58, 89.65, 99.14, 92.63, 96.65, 99.40),
    ("R50x1+ViT-L/32", "R50+ViT-L/32", 7, 246, 85.68, 89.04, 99.24, 92.93, 96.97, 99.43),
    ("R50x1+ViT-L/16", "R50+ViT-L/16", 7, 859, 86.60, 89.72, 99.18, 93.64, 97.03, 99.40),
    ("R50x1+ViT-L/16", "R50+ViT-L/16", 14, 1668, 87.12, 89.76, 99.31, 93.89, 97.36, 99.11),
])
