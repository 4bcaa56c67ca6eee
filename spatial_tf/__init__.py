"""spatial_tf: spatial partitioning for TensorFlow 2 on TPU, emulated on CPU.

Describe how each input tensor is split over the cores of a replica, apply it in a
``tf.function`` step, and run the same step on TPU or on virtual CPU cores.

>>> import spatial_tf, tensorflow as tf
>>> batch = {"image": tf.zeros([2, 64, 64, 3]), "label": tf.zeros([2])}
>>> spatial_tf.validate({"image": [1, 4, 1, 1], "label": None}, batch, 4)
{'image': Tile(1, 4, 1, 1), 'label': Replicate()}
"""

__version__ = "0.1.0"

try:
    import tensorflow as _tf  # noqa: F401
except ImportError as _e:  # pragma: no cover - exercised only without TensorFlow
    raise ImportError(
        "spatial_tf needs TensorFlow (2.16 to 2.21), which is not installed. Fix: "
        "pip install 'spatial-tf[cpu]' on a CPU machine, 'spatial-tf[gpu]' with CUDA; "
        "on a Cloud TPU VM keep its tensorflow-tpu build and install 'spatial-tf[tpu]'."
    ) from _e

from spatial_tf.annotate import annotate_tensor, split
from spatial_tf.spec import (
    Assign,
    PartialTile,
    Replicate,
    Tile,
    flatten_with_paths,
    validate,
)
from spatial_tf.summary import summary

__all__ = [
    "Tile",
    "PartialTile",
    "Replicate",
    "Assign",
    "validate",
    "split",
    "annotate_tensor",
    "summary",
    "flatten_with_paths",
]
