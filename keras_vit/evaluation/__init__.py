"""Evaluation protocols: few-shot linear evaluation of frozen features (paper Sec. 4.1), and the
raw-pixel baseline that every result is read against."""

from keras_vit.evaluation.baseline import pixel_baseline
from keras_vit.evaluation.fewshot import fewshot_linear, fewshot_linear_from_features

__all__ = ["fewshot_linear", "fewshot_linear_from_features", "pixel_baseline"]
