"""A segmentation train step built from spatial_tf's partition-friendly losses.

>>> import keras, tensorflow as tf
>>> from spatial_tf.models import unet3d
>>> model = unet3d((8, 8, 8, 1), num_classes=2, depth=2, base_filters=2)
>>> step = make_train_step(model, keras.optimizers.SGD(0.1), spec=[[1, 2, 1, 1, 1], [1, 2, 1, 1]])
>>> out = step((tf.zeros([1, 8, 8, 8, 1]), tf.zeros([1, 8, 8, 8], tf.int32)))
>>> sorted(out)
['dice', 'loss']
"""
import tensorflow as tf

from spatial_tf import metrics
from spatial_tf.losses import segmentation_loss  # kept importable from here
from spatial_tf.steps import (make_gradient_step, run_model, segmentation_losses,
                              split_segmentation_batch)

__all__ = ["make_train_step", "make_eval_step", "segmentation_loss"]


def make_train_step(model, optimizer, spec=None, loss_fn=segmentation_loss):
    """``step(batch) -> {"loss", "dice"}`` for ``strategy.run``.

    Args:
      model: a Keras model giving per-voxel logits.
      optimizer: a Keras optimizer (built in the strategy's scope with the model).
      spec: the spec of ``(image, labels[, mask])``, e.g. ``[[1, 2, 2, 2, 1], [1, 2, 2, 2]]``
        (the mask takes the labels' spec when not given); None leaves the batch as is.
      loss_fn: ``loss_fn(labels, logits, mask)``, by default cross-entropy + soft Dice.

    The loss is divided by ``num_replicas_in_sync`` before gradients are taken, so summing
    gradients over replicas gives the gradient of the mean; the returned ``loss`` is this
    replica's unscaled mean, ``dice`` its mean hard Dice.
    """
    return make_gradient_step(model, optimizer, segmentation_losses(model, loss_fn, spec))


def make_eval_step(model, spec=None):
    """``step(batch) -> per-class Dice`` (float32 vector) without training."""
    def step(batch):
        image, labels, mask = split_segmentation_batch(tuple(batch), spec)
        logits = run_model(model, image, mask, training=False)
        per_class, _ = metrics.dice_score(labels, tf.cast(logits, tf.float32), mask=mask)
        return per_class

    return step
