"""Training recipes: masked patch prediction and distribution helpers."""

from keras_vit.training.distribution import check_batch_size, layout_map, num_replicas, strategy
from keras_vit.training.mpp import MaskedPatchPrediction

__all__ = ["MaskedPatchPrediction", "check_batch_size", "layout_map", "num_replicas", "strategy"]
