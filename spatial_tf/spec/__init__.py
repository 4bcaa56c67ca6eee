"""Partition specs: leaf kinds, the spec tree, TPUEstimator forms, validation.

>>> import tensorflow as tf
>>> validate({"image": tf.zeros([2, 8, 8, 3]), "label": tf.zeros([2])},
...          {"image": [1, 2, 2, 1], "label": None}, 4)
{'image': Tile(1, 2, 2, 1), 'label': Replicate()}
"""
from spatial_tf.spec.leaves import Assign, PartialTile, Replicate, Tile
from spatial_tf.spec.paths import flatten_with_paths
from spatial_tf.spec.validation import (
    MAX_CORES_PER_REPLICA,
    VALID_CORES_PER_REPLICA,
    check_cores,
    check_num_cores_per_replica,
    check_order,
    infer_num_cores,
    looks_like_spec,
    parse,
    validate,
)

__all__ = [
    "Tile",
    "PartialTile",
    "Replicate",
    "Assign",
    "validate",
    "parse",
    "check_cores",
    "infer_num_cores",
    "check_order",
    "flatten_with_paths",
    "check_num_cores_per_replica",
    "VALID_CORES_PER_REPLICA",
    "MAX_CORES_PER_REPLICA",
    "looks_like_spec",
]
