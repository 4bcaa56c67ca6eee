"""Bilinear resizes by a factor of two that keep a split: ``halve`` and ``double``.

XLA partitions TensorFlow's ``ResizeBilinear`` (``tf.image.resize``, Keras'
``Resizing``) by gathering the whole image on every core. Yet with half-pixel centres
(what both use, antialias off) a resize by exactly 2 is local: halving an axis averages
each pair of neighbours, and doubling it gives each output 0.75 of its nearest input and
0.25 of the next one on its side (the edges clamped), which under a split needs one
voxel from the neighbouring core. These compute the same values with a reshape, slices
of a zero-padded tensor and elementwise arithmetic, which XLA partitions with no gather
(a one-voxel halo exchange for ``double``); each axis is resized in turn (bilinear is
separable).

>>> import numpy as np, tensorflow as tf
>>> x = tf.constant(np.arange(16.0).reshape(1, 4, 4, 1))
>>> bool(np.allclose(halve(x), tf.image.resize(x, (2, 2))))
True
>>> bool(np.allclose(double(x), tf.image.resize(x, (8, 8))))
True
"""
from typing import Optional, Sequence

import tensorflow as tf

from spatial_tf import frames

frames.register_exclusion(__file__)

__all__ = ["halve", "double"]


def halve(x, axes: Optional[Sequence[int]] = None):
    """``x`` (batch, *spatial, channels) bilinearly halved along ``axes`` (default: every
    spatial axis), as ``tf.image.resize`` to half the size gives; each axis's size must
    be even, and a split of it must give each core an even share."""
    for axis in _axes(x, axes, "halve"):
        n = x.shape[axis]
        if n % 2:
            raise ValueError(f"halve: axis {axis} of shape {list(x.shape)} has odd size {n}; "
                             f"expected an even size. Fix: pad or crop it to {n - 1} or "
                             f"{n + 1} first, or use tf.image.resize.")
        pairs = list(x.shape[:axis]) + [n // 2, 2] + list(x.shape[axis + 1:])
        x = tf.reduce_mean(tf.reshape(x, [-1 if d is None else d for d in pairs]), axis + 1)
    return x


def double(x, axes: Optional[Sequence[int]] = None):
    """``x`` (batch, *spatial, channels) bilinearly doubled along ``axes`` (default: every
    spatial axis), as ``tf.image.resize`` to twice the size gives (half-pixel centres, the
    edges clamped)."""
    for axis in _axes(x, axes, "double"):
        n = x.shape[axis]
        padded = tf.pad(x, [[1, 1] if a == axis else [0, 0] for a in range(x.shape.rank)])
        before, after = _window(padded, axis, 0, n), _window(padded, axis, 2, n)
        position = tf.reshape(tf.range(n), [n if a == axis else 1
                                            for a in range(x.shape.rank)])
        first = tf.cast(tf.equal(position, 0), x.dtype)
        last = tf.cast(tf.equal(position, n - 1), x.dtype)
        even = 0.75 * x + 0.25 * (before + first * x)   # the edge clamped to itself
        odd = 0.75 * x + 0.25 * (after + last * x)
        both = tf.stack([even, odd], axis + 1)
        shape = list(x.shape[:axis]) + [2 * n] + list(x.shape[axis + 1:])
        x = tf.reshape(both, [-1 if d is None else d for d in shape])
    return x


def _window(x, axis, start, size):
    begin = [start if a == axis else 0 for a in range(x.shape.rank)]
    sizes = [size if a == axis else -1 for a in range(x.shape.rank)]
    return tf.slice(x, begin, sizes)


def _axes(x, axes, name):
    rank = x.shape.rank
    if rank is None or rank < 3:
        raise ValueError(f"{name}: x has shape {x.shape}; expected (batch, *spatial, "
                         f"channels), rank 3 or more. Fix: add the batch and channel axes.")
    spatial = range(1, rank - 1)
    chosen = list(spatial) if axes is None else [int(a) for a in axes]
    for axis in chosen:
        if axis not in spatial or x.shape[axis] is None:
            raise ValueError(f"{name}: axis {axis} of shape {list(x.shape)} is not a spatial "
                             f"axis of known size; expected axes among "
                             f"{list(spatial)}. Fix: axes={list(spatial)}.")
    return chosen
