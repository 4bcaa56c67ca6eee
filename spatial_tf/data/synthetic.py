"""Synthetic, learnable datasets in the shapes of Cloud TPU's spatial partitioning guide.

``segmentation_dataset``: features ``image`` and ``image_mask``, labels ``class_label``
and ``mask``. ``moving_squares``: video clips whose class is a motion.

>>> ds = segmentation_dataset(batch_size=2, size=32)
>>> features, labels = next(iter(ds))
>>> sorted(features), sorted(labels), features["image"].shape.as_list()
(['image', 'image_mask'], ['class_label', 'mask'], [2, 32, 32, 3])
>>> clips, labels = moving_squares(4, frames=4, size=16, seed=4)
>>> clips.shape, clips.dtype, labels.tolist(), MOVING_SQUARES_CLASSES[labels[0]]
((4, 4, 16, 16, 1), dtype('float32'), [0, 1, 3, 2], 'right')
"""
from typing import Tuple

import numpy as np
import tensorflow as tf

from spatial_tf.checks import check_int

__all__ = ["segmentation_dataset", "moving_squares", "MOVING_SQUARES_CLASSES"]

MOVING_SQUARES_CLASSES = ("right", "left", "down", "up")
_MOVES = ((0, 1), (0, -1), (1, 0), (-1, 0))   # (rows, columns) per frame, by class


def segmentation_dataset(batch_size: int = 4, size: int = 64, channels: int = 3,
                         num_examples: int = 32, seed: int = 0) -> tf.data.Dataset:
    """``(features, labels)`` batches: features ``{'image', 'image_mask'}``, labels
    ``{'class_label', 'mask'}``. The target mask marks pixels whose first channel is
    positive, so a small conv net learns it within a few steps. Batches have a static
    batch size (``drop_remainder=True``) so they can be split along any axis.
    """
    rng = np.random.default_rng(seed)
    images = rng.normal(size=(num_examples, size, size, channels)).astype("float32")
    masks = (images[..., :1] > 0).astype("float32")
    valid = np.ones_like(masks)
    class_label = (masks.mean(axis=(1, 2, 3)) > 0.5).astype("int32")
    ds = tf.data.Dataset.from_tensor_slices(
        ({"image": images, "image_mask": valid}, {"class_label": class_label, "mask": masks})
    )
    return ds.repeat().batch(batch_size, drop_remainder=True)


def moving_squares(n: int, frames: int = 8, size: int = 32,
                   seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """``n`` clips ``[n, frames, size, size, 1]`` (float32) of a bright square moving
    across noise, and their labels ``[n]`` (int32): the direction it moves, an index into
    ``MOVING_SQUARES_CLASSES`` (right, left, down, up). No single frame tells the class,
    so a classifier has to combine frames. The square's side is ``size // 4``; it moves
    ``max(1, size // (2 * frames))`` pixels a frame, wrapping around.

    >>> clips, labels = moving_squares(1, frames=3, size=16, seed=1)
    >>> MOVING_SQUARES_CLASSES[labels[0]]      # the square's top-left corner, frame by frame:
    'down'
    >>> [np.argwhere(clips[0, t, :, :, 0] > 0.5).min(axis=0).tolist() for t in range(3)]
    [[5, 4], [7, 4], [9, 4]]
    """
    where = "moving_squares"
    check_int(n, "n", f"{where}(32)", where=where)
    check_int(frames, "frames", f"{where}(32, frames=8)", where=where)
    check_int(size, "size", f"{where}(32, size=32)", minimum=4,
              expected="an int >= 4 (the square's side is size // 4)", where=where)
    rng = np.random.default_rng(seed)
    clips = rng.normal(0, 0.1, (n, frames, size, size, 1)).astype(np.float32)
    labels = rng.integers(0, len(_MOVES), n).astype(np.int32)
    side, speed = size // 4, max(1, size // (2 * frames))
    for i, label in enumerate(labels):
        dy, dx = _MOVES[label]
        y, x = rng.integers(side, size - 2 * side, 2)
        for t in range(frames):
            top = (y + dy * speed * t) % (size - side)
            left = (x + dx * speed * t) % (size - side)
            clips[i, t, top:top + side, left:left + side, 0] += 1.0
    return clips, labels
