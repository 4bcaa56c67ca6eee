"""Segmentation metrics that keep split axes split.

``dice_score`` compares a hard prediction (the arg-max over the class axis, or class
indices) with integer labels, per class, using one-hot comparisons and sums only, so
under a spatial split it costs an all-reduce of per-class counts.

>>> import tensorflow as tf
>>> labels = tf.constant([[0, 1, 1, 0]])
>>> logits = tf.constant([[[3.0, 0.0], [0.0, 3.0], [3.0, 0.0], [3.0, 0.0]]])
>>> per_class, mean = dice_score(labels, logits)
>>> [round(v, 4) for v in per_class.numpy().tolist()], round(float(mean), 4)
([0.8, 0.6667], 0.7333)
"""
from typing import Optional

import tensorflow as tf

from spatial_tf.label_inputs import class_scores, mask_like, sparse_labels

__all__ = ["dice_score"]


def dice_score(y_true, y_pred, num_classes: Optional[int] = None, *, mask=None):
    """Hard Dice per class and its mean over classes: ``(per_class, mean)``.

    ``dice_c = 2 |T_c ∩ P_c| / (|T_c| + |P_c|)`` over the batch and every valid voxel,
    where ``T_c`` are the voxels labelled ``c`` and ``P_c`` those predicted ``c``. A class
    absent from both scores 1 (nothing to find, nothing found).

    Args:
      y_true: integer class indices, ``(batch, *spatial)`` (a trailing axis of size 1 is
        accepted).
      y_pred: floating class scores ``(batch, *spatial, num_classes)`` (probabilities
        or logits: the arg-max is taken), or integer class indices shaped like
        ``y_true``, then with ``num_classes``.
      num_classes: needed only when ``y_pred`` holds class indices.
      mask: optional validity mask shaped like ``y_true``; voxels where it is 0 are
        ignored (e.g. padding from ``spatial_tf.data.pad_to_multiple``).

    Returns:
      ``per_class`` (float32, shape ``(num_classes,)``) and ``mean`` (a float32 scalar).
    """
    name = "dice_score"
    y_pred = tf.convert_to_tensor(y_pred)
    if y_pred.dtype.is_floating:
        scores, count = class_scores(y_pred, name)
        if num_classes is not None and num_classes != count:
            raise ValueError(
                f"{name}: num_classes is {num_classes} but y_pred has {count} classes on its "
                f"last axis. Fix: drop num_classes or pass {count}."
            )
        num_classes = count
        predicted = _one_hot_argmax(scores)
        labels = sparse_labels(y_true, scores.shape[:-1], num_classes, name)
    elif y_pred.dtype.is_integer:
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(
                f"{name}: num_classes is {num_classes!r}; with class indices as y_pred it must "
                f"be a positive int. Fix: pass num_classes=<classes of the model>."
            )
        labels = sparse_labels(y_true, y_pred.shape, num_classes, name)
        y_pred = sparse_labels(y_pred, labels.shape, num_classes, name)
        predicted = tf.one_hot(y_pred, num_classes, dtype=tf.float32)
    else:
        raise TypeError(f"{name}: y_pred has dtype {y_pred.dtype.name}; expected class scores "
                        f"or integer class indices.")
    truth = tf.one_hot(labels, num_classes, dtype=tf.float32)
    valid = mask_like(mask, labels.shape, tf.float32, name)
    if valid is not None:
        valid = valid[..., tf.newaxis]
        truth, predicted = truth * valid, predicted * valid
    axes = list(range(truth.shape.rank - 1))
    intersection = tf.reduce_sum(truth * predicted, axis=axes)
    total = tf.reduce_sum(truth, axis=axes) + tf.reduce_sum(predicted, axis=axes)
    per_class = tf.where(total > 0, tf.math.divide_no_nan(2.0 * intersection, total), 1.0)
    return per_class, tf.reduce_mean(per_class)


def _one_hot_argmax(scores):
    """One-hot of the arg-max over the last axis, reducing over that axis only.

    Ties go to the lowest class, as ``tf.argmax``.
    """
    is_max = tf.cast(scores >= tf.reduce_max(scores, axis=-1, keepdims=True), tf.float32)
    # keep only the first maximum: a class wins if no lower class is also a maximum
    earlier = tf.math.cumsum(is_max, axis=-1, exclusive=True)
    return is_max * tf.cast(tf.equal(earlier, 0.0), tf.float32)
