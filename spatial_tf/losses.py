"""Segmentation losses that keep split axes split.

Named and called as Keras' losses, but each returns the **mean over valid voxels** (a
scalar) and is written so that XLA's SPMD partitioner never reassembles a split volume:
the softmax reduces over the channel axis only, the label's class is picked with a
one-hot multiply (no gather, no reshape that flattens the volume), and the mean is a sum
divided by a sum. Under a spec such as ``[1, 2, 2, 2, 1]`` the only communication these
losses add is an all-reduce of a scalar (or of a per-class vector for ``dice_loss``),
where ``tf.nn.sparse_softmax_cross_entropy_with_logits`` flattens the volume and XLA
all-gathers activation-sized tensors.

>>> import tensorflow as tf
>>> logits = tf.constant([[[2.0, 0.0], [0.0, 2.0]]])     # 1 x 2 voxels x 2 classes
>>> labels = tf.constant([[0, 0]])
>>> round(float(sparse_categorical_crossentropy(labels, logits, from_logits=True)), 4)
1.1269
>>> mask = tf.constant([[1.0, 0.0]])                      # the second voxel is padding
>>> round(float(sparse_categorical_crossentropy(labels, logits, True, mask=mask)), 4)
0.1269

Conventions shared by every function here:

- ``y_pred`` has the classes on its last axis, ``(batch, *spatial, num_classes)``.
  Half-precision inputs (``bfloat16``, ``float16``) are computed in float32.
- ``mask`` (optional) has ``y_pred``'s shape without the class axis (a trailing axis of
  size 1 is accepted); voxels where it is 0 are ignored, e.g. the padding
  ``spatial_tf.data.pad_to_multiple`` adds. If no voxel is valid the loss is 0.
- Under several data-parallel replicas each replica gets its mean; scale by
  ``1 / strategy.num_replicas_in_sync`` before summing gradients, as with Keras' losses.
"""
import numbers

import tensorflow as tf

from spatial_tf.label_inputs import class_scores, mask_like, sparse_labels

__all__ = [
    "sparse_categorical_crossentropy", "categorical_crossentropy", "dice_loss", "log_softmax",
    "segmentation_loss",
]

EPSILON = 1e-7  # Keras' default fuzz factor, used to clip probabilities


def sparse_categorical_crossentropy(y_true, y_pred, from_logits=False, *, mask=None,
                                    class_weights=None) -> tf.Tensor:
    """Cross-entropy between integer labels and predicted class scores.

    Args:
      y_true: integer class indices, ``y_pred``'s shape without the class axis (or with
        a trailing axis of size 1). Values must lie in ``[0, num_classes)``; checked when
        run eagerly (in a compiled step a label out of range contributes 0).
      y_pred: probabilities, or logits with ``from_logits=True``.
      mask: optional validity mask (see the module docstring).
      class_weights: optional sequence of ``num_classes`` weights; each voxel's loss is
        multiplied by the weight of its true class.

    Returns:
      ``sum(weight * mask * loss) / sum(mask)``, a scalar.

    >>> import tensorflow as tf
    >>> probs = tf.constant([[0.9, 0.1], [0.2, 0.8]])
    >>> round(float(sparse_categorical_crossentropy(tf.constant([0, 1]), probs)), 4)
    0.1643
    """
    y_pred, num_classes = class_scores(y_pred, "sparse_categorical_crossentropy")
    y_true = sparse_labels(y_true, y_pred.shape[:-1], num_classes, "sparse_categorical_crossentropy")
    one_hot = tf.one_hot(y_true, num_classes, dtype=y_pred.dtype)
    return _cross_entropy(one_hot, y_pred, from_logits, mask, class_weights, num_classes,
                          "sparse_categorical_crossentropy")


def categorical_crossentropy(y_true, y_pred, from_logits=False, *, mask=None,
                             class_weights=None) -> tf.Tensor:
    """Cross-entropy between one-hot (or soft) labels and predicted class scores.

    Args:
      y_true: one-hot or probability labels, the same shape as ``y_pred``.
      y_pred: probabilities, or logits with ``from_logits=True``.
      mask, class_weights: as for ``sparse_categorical_crossentropy``; a voxel's weight
        is ``sum(y_true * class_weights)`` over the class axis.

    >>> import tensorflow as tf
    >>> probs = tf.constant([[0.9, 0.1], [0.2, 0.8]])
    >>> round(float(categorical_crossentropy(tf.constant([[1.0, 0.0], [0.0, 1.0]]), probs)), 4)
    0.1643
    """
    name = "categorical_crossentropy"
    y_pred, num_classes = class_scores(y_pred, name)
    y_true = tf.convert_to_tensor(y_true)
    if not (y_true.dtype.is_floating or y_true.dtype.is_integer):
        raise TypeError(f"{name}: y_true has dtype {y_true.dtype.name}; expected one-hot numbers.")
    if not y_true.shape.is_compatible_with(y_pred.shape):
        raise ValueError(
            f"{name}: y_true has shape {y_true.shape} and y_pred {y_pred.shape}; expected "
            f"the same shape (one-hot labels). Fix: for class indices use "
            f"sparse_categorical_crossentropy."
        )
    one_hot = tf.cast(y_true, y_pred.dtype)
    return _cross_entropy(one_hot, y_pred, from_logits, mask, class_weights, num_classes, name)


def dice_loss(y_true, y_pred, from_logits=False, *, mask=None, smooth=1e-5) -> tf.Tensor:
    """Soft Dice loss, ``1 - mean over classes of soft Dice``.

    For class ``c``, with probabilities ``p`` and one-hot labels ``t`` summed over the
    batch and every valid voxel: ``dice_c = (2 sum(p t) + smooth) / (sum(p) + sum(t) +
    smooth)``. Sums over the split axes become an all-reduce of per-class vectors.

    Args:
      y_true: integer class indices (``y_pred``'s shape without the class axis, or with a
        trailing 1), or floating one-hot labels of ``y_pred``'s shape.
      y_pred: probabilities, or logits with ``from_logits=True`` (softmax is applied).
      mask: optional validity mask (see the module docstring).
      smooth: added to numerator and denominator; keeps classes absent from both the
        labels and the prediction at Dice 1 instead of 0/0.

    >>> import tensorflow as tf
    >>> probs = tf.constant([[1.0, 0.0], [0.0, 1.0]])
    >>> float(dice_loss(tf.constant([0, 1]), probs, smooth=0.0))
    0.0
    """
    name = "dice_loss"
    y_pred, num_classes = class_scores(y_pred, name)
    _check_number(smooth, "smooth", name)
    _check_bool(from_logits, name)
    y_true = tf.convert_to_tensor(y_true)
    if y_true.dtype.is_integer:
        one_hot = tf.one_hot(sparse_labels(y_true, y_pred.shape[:-1], num_classes, name), num_classes,
                             dtype=y_pred.dtype)
    elif y_true.dtype.is_floating:
        if not y_true.shape.is_compatible_with(y_pred.shape):
            raise ValueError(
                f"{name}: floating y_true has shape {y_true.shape} and y_pred "
                f"{y_pred.shape}; expected one-hot labels of y_pred's shape. Fix: pass class "
                f"indices as an integer tensor."
            )
        one_hot = tf.cast(y_true, y_pred.dtype)
    else:
        raise TypeError(f"{name}: y_true has dtype {y_true.dtype.name}; expected integer "
                        f"class indices or floating one-hot labels.")
    probs = tf.nn.softmax(y_pred, axis=-1) if from_logits else y_pred
    valid = mask_like(mask, y_pred.shape[:-1], y_pred.dtype, name)
    if valid is not None:
        valid = valid[..., tf.newaxis]
        probs, one_hot = probs * valid, one_hot * valid
    axes = list(range(y_pred.shape.rank - 1))
    intersection = tf.reduce_sum(probs * one_hot, axis=axes)
    total = tf.reduce_sum(probs, axis=axes) + tf.reduce_sum(one_hot, axis=axes)
    smooth = tf.cast(smooth, y_pred.dtype)
    dice = (2.0 * intersection + smooth) / (total + smooth)
    return 1.0 - tf.reduce_mean(dice)


# ---------------------------------------------------------------------------- helpers


def segmentation_loss(labels, logits, mask=None, *, dice_weight: float = 1.0,
                      class_weights=None) -> tf.Tensor:
    """Cross-entropy plus ``dice_weight`` x soft Dice loss, both over valid voxels: the
    loss spatial_tf's segmentation training and the planner use by default.

    >>> logits = tf.constant([[[4.0, -4.0], [-4.0, 4.0]]])
    >>> round(float(segmentation_loss(tf.constant([[0, 1]]), logits)), 4)
    0.0007
    """
    loss = sparse_categorical_crossentropy(labels, logits, True, mask=mask,
                                           class_weights=class_weights)
    if dice_weight:
        loss += dice_weight * dice_loss(labels, logits, True, mask=mask)
    return loss


def _cross_entropy(one_hot, y_pred, from_logits, mask, class_weights, num_classes, name):
    _check_bool(from_logits, name)
    if from_logits:
        log_probs = log_softmax(y_pred)
    else:  # as Keras: renormalize, clip away from 0 and 1, take the log
        probs = y_pred / tf.reduce_sum(y_pred, axis=-1, keepdims=True)
        log_probs = tf.math.log(tf.clip_by_value(probs, EPSILON, 1.0 - EPSILON))
    weighted = one_hot
    if class_weights is not None:
        weighted = one_hot * _class_weights(class_weights, num_classes, y_pred.dtype, name)
    per_voxel = -tf.reduce_sum(weighted * log_probs, axis=-1)
    valid = mask_like(mask, y_pred.shape[:-1], y_pred.dtype, name)
    if valid is None:
        count = tf.cast(tf.size(per_voxel), y_pred.dtype)
        return tf.reduce_sum(per_voxel) / count
    return tf.math.divide_no_nan(tf.reduce_sum(per_voxel * valid), tf.reduce_sum(valid))


def log_softmax(logits: tf.Tensor) -> tf.Tensor:
    """``log(softmax(logits))`` over the last axis, with reductions over that axis only.

    >>> import tensorflow as tf
    >>> [round(v, 4) for v in log_softmax(tf.constant([0.0, 0.0])).numpy().tolist()]
    [-0.6931, -0.6931]
    """
    shifted = logits - tf.stop_gradient(tf.reduce_max(logits, axis=-1, keepdims=True))
    return shifted - tf.math.log(tf.reduce_sum(tf.exp(shifted), axis=-1, keepdims=True))


def _class_weights(class_weights, num_classes, dtype, name):
    weights = tf.convert_to_tensor(class_weights, dtype=dtype)
    if weights.shape != (num_classes,):
        raise ValueError(
            f"{name}: class_weights has shape {weights.shape}; expected one weight per class, "
            f"shape ({num_classes},)."
        )
    return weights


def _check_number(value, arg, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value < 0:
        raise ValueError(f"{name}: {arg} is {value!r}; expected a non-negative number.")


def _check_bool(from_logits, name):
    if not isinstance(from_logits, bool):
        raise TypeError(f"{name}: from_logits is {from_logits!r}; expected True or False.")
