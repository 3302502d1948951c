"""Training recipes: masked patch prediction."""

from keras_vit.training.mpp import MaskedPatchPrediction

__all__ = ["MaskedPatchPrediction"]
