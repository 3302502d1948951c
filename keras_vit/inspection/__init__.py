"""Inspecting a Vision Transformer (paper Sec. 4.5 and Appendix D.7-D.8; Figs. 6, 7, 10, 11).

Beyond the paper: gradient-weighted relevancy (``relevancy``, Chefer et al., ICCV 2021) and the
perturbation test of which explanation is faithful (``perturbation_curves``, Chefer et al.,
CVPR 2021).

The computations take a ``ViTImageClassifier`` or a ``ViTBackbone`` and read the backbone
(what its own forward records (``record``), ``position_embedding_layer(block)`` and the patch
embedding; relevancy runs the classifier's ``record`` with attention gates); they
return numpy arrays, which the ``plot_*`` helpers draw as the paper does
(``plot_largest_batch`` draws Fig. 12 right from ``keras_vit.costs.batches.figure_12``,
``plot_speed_by_size`` Fig. 12 left from ``keras_vit.evaluation.speed_by_size``).

Example:
>>> import numpy as np
>>> from keras_vit import ViTImageClassifier
>>> from keras_vit.inspection import attention_rollout, mean_attention_distance
>>> model = ViTImageClassifier(image_size=8, patch_size=4, hidden_size=8, num_layers=2,
...                            num_heads=2, mlp_dim=16, num_classes=3)
>>> images = np.zeros((1, 8, 8, 3), "float32")
>>> attention_rollout(model, images).shape, mean_attention_distance(model, images).shape
((1, 2, 2), (2, 2))
"""

from keras_vit import _submodules
from keras_vit.inspection.attention import (
    attention_maps,
    attention_rollout,
    attention_weights,
    effective_patch_count,
    mean_attention_distance,
    patch_centres,
    rollout_object_share,
    rollout_to_image,
    uniform_attention_distance,
)
from keras_vit.inspection.embeddings import (
    FilterComponents,
    embedding_filter_components,
    position_embedding_similarity,
    position_similarity_by_distance,
    position_similarity_by_offset,
    position_similarity_summary,
)
from keras_vit.inspection.faithfulness import PerturbationCurves, perturbation_curves
from keras_vit.inspection.gradients import relevancy
from keras_vit.inspection.plots import (
    plot_attention_maps,
    plot_attention_matrix,
    plot_attention_rollout,
    plot_distance_from_uniform,
    plot_embedding_filters,
    plot_largest_batch,
    plot_mean_attention_distance,
    plot_position_embedding_similarity,
    plot_relevancy,
    plot_speed_by_size,
)
from keras_vit.inspection.shipped import FASHION_MNIST_VIT, fashion_mnist_vit

# Modules not imported above are imported when first reached as attributes.
__getattr__, __dir__ = _submodules.attribute_hook(__name__)

__all__ = [
    "FASHION_MNIST_VIT",
    "FilterComponents",
    "PerturbationCurves",
    "attention_maps",
    "attention_rollout",
    "attention_weights",
    "effective_patch_count",
    "embedding_filter_components",
    "fashion_mnist_vit",
    "mean_attention_distance",
    "patch_centres",
    "perturbation_curves",
    "plot_attention_maps",
    "plot_attention_matrix",
    "plot_attention_rollout",
    "plot_distance_from_uniform",
    "plot_embedding_filters",
    "plot_largest_batch",
    "plot_mean_attention_distance",
    "plot_position_embedding_similarity",
    "plot_relevancy",
    "plot_speed_by_size",
    "position_embedding_similarity",
    "position_similarity_by_distance",
    "position_similarity_by_offset",
    "position_similarity_summary",
    "relevancy",
    "rollout_object_share",
    "rollout_to_image",
    "uniform_attention_distance",
]
