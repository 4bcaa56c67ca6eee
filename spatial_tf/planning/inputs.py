"""The planner's inputs: shapes, ``tf.TensorSpec`` s or tensors, as TensorSpec trees.

Nothing of the planned size is allocated: the emulator compiles for ``TensorSpec``
arguments.

>>> specs = input_specs((1, 16, 16, 16, 1), is_model=True)
>>> [tuple(s.shape) for s in specs], specs[1].dtype.name
([(1, 16, 16, 16, 1), (1, 16, 16, 16)], 'int32')
>>> leaf_spec(specs[1], specs[0], (1, 2, 2, 1, 1), 4)
[1, 2, 2, 1]
"""
import math
import numbers

import numpy as np
import tensorflow as tf

__all__ = ["input_specs", "volume_of", "leaf_spec", "resized"]


def _is_shape(x):
    return (isinstance(x, (tuple, list)) and len(x) > 0
            and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in x))


def _to_spec(leaf, dtype=tf.float32):
    if isinstance(leaf, tf.TensorSpec):
        return leaf
    if _is_shape(leaf):
        return tf.TensorSpec(tuple(int(v) for v in leaf), dtype)
    if tf.is_tensor(leaf) or isinstance(leaf, np.ndarray):
        return tf.TensorSpec(tuple(leaf.shape), tf.as_dtype(leaf.dtype))
    raise TypeError(
        f"plan: an input is {type(leaf).__name__} ({leaf!r:.60}); expected a shape (tuple "
        f"of ints), a tf.TensorSpec, a tensor or an array. Fix: e.g. inputs=(1, 128, 128, "
        f"128, 1) or tf.TensorSpec((1, 128, 128, 128, 1))."
    )


def _is_leaf(x):
    return (_is_shape(x) or isinstance(x, (tf.TensorSpec, np.ndarray)) or tf.is_tensor(x))


def _convert(x):
    if _is_leaf(x):
        return _to_spec(x)
    if isinstance(x, (tuple, list)):
        return tuple(_convert(v) for v in x)
    if isinstance(x, dict):
        return {k: _convert(v) for k, v in x.items()}
    return _to_spec(x)  # raises, naming the type


def input_specs(inputs, is_model):
    """The positional arguments as a tuple of TensorSpec trees; a model given one input
    gets sparse int32 labels of the volume's shape without channels."""
    if _is_leaf(inputs):
        volume = _to_spec(inputs)
        return (volume, tf.TensorSpec(volume.shape[:-1], tf.int32)) if is_model else (volume,)
    if isinstance(inputs, dict):
        return (_convert(inputs),)
    return _convert(inputs)


def volume_of(specs):
    for s in tf.nest.flatten(specs):
        if s.shape.rank is not None and s.shape.rank >= 3:
            return s
    raise ValueError(
        f"plan: no input of rank 3 or more among {[list(s.shape) for s in tf.nest.flatten(specs)]}; "
        f"expected a volume or image (batch, *spatial, channels) to split. Fix: give its full "
        f"shape, e.g. (1, 128, 128, 128, 1)."
    )


def leaf_spec(leaf, volume, spec, num_cores):
    """The candidate spec for another input: the volume's counts on the leading axes it
    shares with the volume, else replicated (None)."""
    dims = list(leaf.shape)
    out = [spec[i] if i < len(volume.shape) - 1 and i < len(dims) and dims[i] == volume.shape[i]
           else 1 for i in range(len(dims))]
    return out if math.prod(out) == num_cores else None


def resized(specs, volume, edge):
    spatial = range(1, len(volume.shape) - 1)

    def resize(s):
        dims = list(s.shape)
        for i in spatial:
            if i < len(dims) and dims[i] == volume.shape[i]:
                dims[i] = edge
        return tf.TensorSpec(dims, s.dtype)

    return tf.nest.map_structure(resize, specs)


