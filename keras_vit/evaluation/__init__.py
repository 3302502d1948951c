"""Evaluation protocols: few-shot linear evaluation of frozen features (paper Sec. 4.1)."""

from keras_vit.evaluation.fewshot import fewshot_linear, fewshot_linear_from_features

__all__ = ["fewshot_linear", "fewshot_linear_from_features"]
