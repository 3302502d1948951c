"""Evaluation protocols: few-shot linear evaluation of frozen features (paper Sec. 4.1), the
raw-pixel baseline that every result is read against, and inference speed side by side."""

from keras_vit import _submodules
from keras_vit.evaluation.baseline import pixel_baseline
from keras_vit.evaluation.fewshot import fewshot_linear, fewshot_linear_from_features
from keras_vit.evaluation.speed import inference_speed, speed_by_size

# Modules not imported above are imported when first reached as attributes.
__getattr__, __dir__ = _submodules.attribute_hook(__name__)

__all__ = ["fewshot_linear", "fewshot_linear_from_features", "inference_speed", "pixel_baseline",
           "speed_by_size"]
