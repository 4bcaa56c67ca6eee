"""Fit volumes of any size to one static shape, with a mask of the real voxels.

XLA compiles one program per shape and a split needs sizes that divide, but scans come
at any size (50 x 59 x 48, 512 x 512 x 137). ``fit_shape`` gives the smallest shape that
holds given sizes and divides by given multiples (e.g. a split count times
``2 ** (depth - 1)`` for a U-Net's poolings); ``pad_to_shape`` pads a volume **at the
end of each axis** up to a shape and returns the mask (1 on the volume's voxels, 0 on
the padding) that ``spatial_tf.losses`` and ``spatial_tf.metrics`` take as ``mask=``;
``crop_or_pad`` brings an ``(image, labels)`` example to a training shape by the rule
MONAI users know: per axis, a random window when the volume is longer (uniform offset
from a stateless seed), padding at the end when it is shorter. ``split_multiples`` says
what a spec and a U-Net's depth need each axis to divide by, and ``fit_examples`` maps a
whole dataset of volumes of any size to ``(image, labels, mask)`` of one shape, ready for
``distribute`` and ``spatial_tf.train.train``.

>>> import numpy as np
>>> fit_shape((50, 59, 48), (8, 8, 8))
(56, 64, 48)
>>> padded, mask = pad_to_shape(np.ones((5, 3, 1), np.float32), (8, 4))
>>> padded.shape.as_list(), int(mask.numpy().sum())
([8, 4, 1], 15)
"""
from typing import Any, Optional, Sequence, Tuple
import numbers

import tensorflow as tf

from spatial_tf.checks import check_int

__all__ = ["fit_shape", "pad_to_shape", "crop_or_pad", "split_multiples", "fit_examples"]


def _check_ints(values, name, where, low=1):
    values = tuple(values)
    if not values or any(isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < low
                         for v in values):
        raise ValueError(f"{where}: {name} is {values}; expected ints >= {low}, one per "
                         f"spatial axis, e.g. (64, 64, 64).")
    return tuple(int(v) for v in values)


def fit_shape(sizes: Sequence[int], multiples: Sequence[int]) -> Tuple[int, ...]:
    """The smallest shape at least ``sizes`` whose axes divide by ``multiples``.

    >>> fit_shape((13, 10, 9), (4, 2, 1))
    (16, 10, 9)
    """
    sizes = _check_ints(sizes, "sizes", "fit_shape")
    multiples = _check_ints(multiples, "multiples", "fit_shape")
    if len(sizes) != len(multiples):
        raise ValueError(f"fit_shape: sizes {sizes} and multiples {multiples} differ in length; "
                         f"expected one multiple per axis.")
    return tuple(-(-s // m) * m for s, m in zip(sizes, multiples))


def pad_to_shape(volume: Any, shape: Sequence[int], *, value: float = 0,
                 channel_axis: Optional[int] = -1) -> Tuple[tf.Tensor, tf.Tensor]:
    """Pad ``volume`` at the end of each spatial axis up to ``shape``.

    Args:
      volume: ``(*spatial, channels)`` (or ``(*spatial)`` with ``channel_axis=None``);
        sizes may be unknown (inside a ``tf.data`` map).
      shape: the spatial sizes to pad to, none smaller than the volume's.
      value: what padded voxels hold (0 after windowing to [0, 1], 0 for labels).
      channel_axis: -1 (the last axis holds channels, not padded) or None.

    Returns:
      ``(padded, mask)``: ``mask`` is float32, shaped ``shape``, 1 on the volume's voxels.

    Raises:
      ValueError: ``shape`` has the wrong length, or a known size exceeds it (an unknown
        one that does fails when the map runs).

    >>> labels, mask = pad_to_shape(tf.ones([2, 3], tf.int32), (3, 3), channel_axis=None)
    >>> labels.numpy().tolist(), mask.numpy().tolist()
    ([[1, 1, 1], [1, 1, 1], [0, 0, 0]], [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    """
    volume = tf.convert_to_tensor(volume)
    if channel_axis not in (-1, None):
        raise ValueError(f"pad_to_shape: channel_axis is {channel_axis!r}; expected -1 (channels "
                         f"last) or None (no channel axis).")
    spatial = (volume.shape.rank or 0) - (channel_axis is not None)
    shape = _check_ints(shape, "shape", "pad_to_shape")
    if len(shape) != spatial:
        raise ValueError(f"pad_to_shape: shape is {shape}; expected {spatial} sizes, one per "
                         f"spatial axis of the volume of shape {volume.shape}.")
    for axis, (size, target) in enumerate(zip(volume.shape[:spatial], shape)):
        if size is not None and size > target:
            raise ValueError(f"pad_to_shape: axis {axis} of the volume has size {size}, larger "
                             f"than {target}; expected sizes up to shape {shape}. Fix: crop it "
                             f"(crop_or_pad) or pad to a larger shape.")
    sizes = tf.shape(volume)[:spatial]
    target = tf.constant(shape, tf.int32)
    fits = tf.debugging.assert_less_equal(
        sizes, target, message=f"pad_to_shape: a volume is larger than shape {shape}")
    with tf.control_dependencies([fits]):
        pads = tf.stack([tf.zeros_like(sizes), target - sizes], axis=1)
    full = tf.concat([pads, [[0, 0]]], 0) if channel_axis is not None else pads
    padded = tf.pad(volume, full, constant_values=tf.cast(value, volume.dtype))
    mask = tf.pad(tf.ones(sizes, tf.float32), pads)
    padded.set_shape(list(shape) + list(volume.shape[spatial:]))
    mask.set_shape(shape)
    return padded, mask


def crop_or_pad(image: Any, labels: Any, shape: Sequence[int],
                seed: Any) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """``(image, labels, mask)`` of exactly ``shape``: a random window of each axis longer
    than ``shape`` (offset uniform over the positions that fit), padding at the end of
    each shorter one (image and labels 0, mask 0).

    Args:
      image: ``(*spatial, channels)``; labels: ``(*spatial)``, the same spatial sizes.
      shape: the spatial sizes of the result.
      seed: a stateless seed, two ints (e.g. ``(0, example_index)``): the same seed
        gives the same window.

    >>> import numpy as np
    >>> image, labels, mask = crop_or_pad(np.ones((9, 2, 1), np.float32),
    ...                                   np.ones((9, 2), np.int32), (4, 3), seed=(0, 1))
    >>> image.shape.as_list(), labels.numpy().sum(axis=0).tolist(), float(mask.numpy().sum())
    ([4, 3, 1], [4, 4, 0], 8.0)
    """
    image, labels = tf.convert_to_tensor(image), tf.convert_to_tensor(labels)
    shape = _check_ints(shape, "shape", "crop_or_pad")
    if labels.shape.rank != len(shape) or image.shape.rank != len(shape) + 1:
        raise ValueError(f"crop_or_pad: image has shape {image.shape} and labels "
                         f"{labels.shape}; expected (*spatial, channels) and (*spatial) with "
                         f"{len(shape)} spatial axes, as shape {shape}.")
    sizes = tf.shape(labels)
    target = tf.constant(shape, tf.int32)
    room = tf.maximum(sizes - target, 0)
    draw = tf.random.stateless_uniform([len(shape)], seed=seed, dtype=tf.float32)
    offsets = tf.minimum(tf.cast(tf.floor(draw * tf.cast(room + 1, tf.float32)), tf.int32), room)
    extent = tf.minimum(sizes, target)
    channels = image.shape[-1]
    image = tf.slice(image, tf.concat([offsets, [0]], 0), tf.concat([extent, [-1]], 0))
    image.set_shape([None] * len(shape) + [channels])
    labels = tf.slice(labels, offsets, extent)
    return _pad_example(image, labels, shape)


def _pad_example(image, labels, shape):
    """``(image, labels, mask)`` padded at the end of each axis up to ``shape``."""
    image, mask = pad_to_shape(image, shape)
    labels, _ = pad_to_shape(labels, shape, channel_axis=None)
    return image, labels, mask


def split_multiples(spec: Sequence[int], depth: int = 1) -> Tuple[int, ...]:
    """What each spatial axis of an image split by ``spec`` must divide by: its split
    count times ``2 ** (depth - 1)`` for a U-Net of ``depth`` levels, so that every core's
    piece survives the poolings.

    Args:
      spec: the image's partition dims, ``[batch, *spatial, channels]``.
      depth: the U-Net's resolution levels (1: no pooling).

    >>> split_multiples([1, 2, 2, 1, 1], depth=3)
    (8, 8, 4)
    >>> fit_shape((50, 59, 48), split_multiples([1, 2, 2, 1, 1], depth=3))
    (56, 64, 48)
    """
    if len(spec) < 3 or any(isinstance(c, bool) or not isinstance(c, numbers.Integral) or c < 1
                            for c in spec):
        raise ValueError(f"split_multiples: spec is {list(spec)}; expected the image's partition "
                         f"dims [batch, *spatial, channels], positive ints, e.g. "
                         f"[1, 2, 2, 2, 1].")
    check_int(depth, "depth", "depth=3", where="split_multiples")
    return tuple(count * 2 ** (depth - 1) for count in spec[1:-1])


def fit_examples(dataset: tf.data.Dataset, shape: Sequence[int], *, crop: bool = True,
                 seed: int = 0, first: int = 0) -> tf.data.Dataset:
    """``(image, labels)`` examples of any size as ``(image, labels, mask)`` of ``shape``.

    Each example is padded at the end of each axis shorter than ``shape`` (mask 0 there,
    so ``spatial_tf.losses``, ``metrics`` and the default train step leave the padding
    out). On an axis longer than ``shape``, ``crop=True`` takes a random window
    (``crop_or_pad``, seed ``(seed, i)`` for example ``i`` of the stream counted from
    ``first``, so a run resumed at example ``first`` crops as an uninterrupted one);
    ``crop=False`` fails there instead (for evaluation, where every voxel counts: pick
    ``shape`` from the largest volume, ``fit_shape``); ``seed`` and ``first`` are then
    unused.

    Args:
      dataset: unbatched ``(image, labels)``: image ``(*spatial, channels)``, labels
        ``(*spatial)``; sizes may differ between examples (``volume_dataset(...,
        same_shape=False)``).
      shape: the spatial sizes of every result, e.g. ``fit_shape(sizes,
        split_multiples(spec, depth))``.

    >>> import numpy as np
    >>> volumes = tf.data.Dataset.from_generator(
    ...     lambda: ((np.ones((n, 4, 1), np.float32), np.ones((n, 4), np.int32)) for n in (3, 6)),
    ...     output_signature=(tf.TensorSpec([None, 4, 1]), tf.TensorSpec([None, 4], tf.int32)))
    >>> [(image.shape.as_list(), int(mask.numpy().sum()))
    ...  for image, labels, mask in fit_examples(volumes, (4, 4))]
    [([4, 4, 1], 12), ([4, 4, 1], 16)]
    """
    shape = _check_ints(shape, "shape", "fit_examples")
    spec = dataset.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2):
        raise ValueError(f"fit_examples: the dataset's elements are {spec}; expected unbatched "
                         f"(image, labels) pairs. Fix: map it to (image, labels) before, e.g. "
                         f"volume_dataset(pairs, num_classes, same_shape=False).")
    if crop:
        def fit(index, example):
            image, labels = example
            return crop_or_pad(image, labels, shape,
                               seed=tf.stack([tf.constant(seed, tf.int64), index]))
        return dataset.enumerate(start=first).map(fit)

    return dataset.map(lambda image, labels: _pad_example(image, labels, shape))
