"""Checked inputs of the segmentation losses and metrics: scores, labels and masks.

``spatial_tf.losses`` and ``spatial_tf.metrics`` take ``y_true``, ``y_pred`` and ``mask``
by the same conventions (classes on ``y_pred``'s last axis, labels and mask with
``y_pred``'s shape without it); these functions check and convert them, naming the
calling function in every error.

>>> import tensorflow as tf
>>> scores, num_classes = class_scores(tf.zeros([1, 4, 3], tf.bfloat16), "dice_loss")
>>> scores.dtype.name, num_classes
('float32', 3)
>>> sparse_labels(tf.constant([[0.0, 2.0, 1.0, 1.0]]), scores.shape[:-1], 3, "dice_loss")
<tf.Tensor: shape=(1, 4), dtype=int32, numpy=array([[0, 2, 1, 1]], dtype=int32)>
"""
from typing import Optional

import numpy as np
import tensorflow as tf

__all__ = ["class_scores", "sparse_labels", "mask_like"]


def class_scores(y_pred, name: str) -> tuple:
    """``(y_pred as a float tensor, number of classes)``; half precision as float32."""
    y_pred = tf.convert_to_tensor(y_pred)
    if not y_pred.dtype.is_floating:
        raise TypeError(
            f"{name}: y_pred has dtype {y_pred.dtype.name}; expected floating class scores "
            f"(probabilities or logits) with the classes on the last axis."
        )
    if y_pred.shape.rank is None or y_pred.shape.rank < 1 or y_pred.shape[-1] is None:
        raise ValueError(
            f"{name}: y_pred has shape {y_pred.shape}; expected a known rank and a static "
            f"number of classes on the last axis, e.g. (batch, depth, height, width, classes)."
        )
    if y_pred.dtype in (tf.bfloat16, tf.float16):
        y_pred = tf.cast(y_pred, tf.float32)
    return y_pred, int(y_pred.shape[-1])


def sparse_labels(y_true, spatial, num_classes: int, name: str) -> tf.Tensor:
    """Integer labels checked against ``spatial`` (y_pred's shape without classes)."""
    y_true = tf.convert_to_tensor(y_true)
    if y_true.dtype.is_floating:
        # Keras' compile() hands a loss function its labels as floats: whole numbers are
        # class indices (as for Keras' own sparse cross-entropy), anything else is refused
        if tf.executing_eagerly() and not np.all(np.mod(y_true.numpy(), 1) == 0):
            raise TypeError(
                f"{name}: y_true has dtype {y_true.dtype.name} and values that are not whole "
                f"numbers; expected integer class indices. Fix: pass class indices, or use "
                f"categorical_crossentropy for one-hot or soft labels."
            )
        y_true = tf.cast(y_true, tf.int32)
    if not y_true.dtype.is_integer:
        raise TypeError(
            f"{name}: y_true has dtype {y_true.dtype.name}; expected integer class indices. "
            f"Fix: cast the labels (tf.cast(labels, tf.int32)), or use "
            f"categorical_crossentropy for one-hot labels."
        )
    if y_true.shape.rank == spatial.rank + 1 and y_true.shape[-1] == 1:
        y_true = y_true[..., 0]  # drops a trailing size-1 axis: no data moves
    if not y_true.shape.is_compatible_with(spatial):
        raise ValueError(
            f"{name}: y_true has shape {y_true.shape}; expected y_pred's shape without the "
            f"class axis, {spatial} (a trailing axis of size 1 is accepted)."
        )
    if tf.executing_eagerly():
        values = y_true.numpy()
        low, high = (int(values.min()), int(values.max())) if values.size else (0, 0)
        bad = low if low < 0 else high if high >= num_classes else None
        if bad is not None:
            raise ValueError(
                f"{name}: y_true holds class {bad}; expected classes in [0, {num_classes}) "
                f"for y_pred's {num_classes} classes. Fix: remap the labels or build the "
                f"model with num_classes={max(high + 1, num_classes)}."
            )
    return y_true


def mask_like(mask, spatial, dtype, name: str) -> Optional[tf.Tensor]:
    """``mask`` as ``dtype``, checked against ``spatial`` (y_pred's shape without classes)."""
    if mask is None:
        return None
    mask = tf.convert_to_tensor(mask)
    if mask.shape.rank == spatial.rank + 1 and mask.shape[-1] == 1:
        mask = mask[..., 0]
    if not mask.shape.is_compatible_with(spatial):
        raise ValueError(
            f"{name}: mask has shape {mask.shape}; expected y_pred's shape without the class "
            f"axis, {spatial} (a trailing axis of size 1 is accepted)."
        )
    return tf.cast(mask, dtype)
