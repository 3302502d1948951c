"""Distribution helpers, public home: ``keras_vit.distribution.layout_map`` and friends.

The implementation lives in ``keras_vit.training.distribution``; see its docstring.
"""

from keras_vit.training.distribution import check_batch_size, layout_map, num_replicas, strategy

__all__ = ["check_batch_size", "layout_map", "num_replicas", "strategy"]
