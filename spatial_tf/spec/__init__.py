"""Partition specs: leaf kinds, the spec tree, TPUEstimator forms, validation.

>>> import tensorflow as tf
>>> validate({"image": [1, 2, 2, 1], "label": None},
...          {"image": tf.zeros([2, 8, 8, 3]), "label": tf.zeros([2])}, 4)
{'image': Tile(1, 2, 2, 1), 'label': Replicate()}
"""
from spatial_tf.spec.leaves import LEAF_TYPES, Assign, PartialTile, Replicate, Tile
from spatial_tf.spec.paths import flatten_with_paths
from spatial_tf.spec.validation import (
    VALID_CORES_PER_REPLICA,
    check_num_cores_per_replica,
    validate,
)

__all__ = [
    "Tile",
    "PartialTile",
    "Replicate",
    "Assign",
    "LEAF_TYPES",
    "validate",
    "flatten_with_paths",
    "check_num_cores_per_replica",
    "VALID_CORES_PER_REPLICA",
]
