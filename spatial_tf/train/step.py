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

from spatial_tf import losses, metrics
from spatial_tf.annotate import split
from spatial_tf.losses import segmentation_loss  # kept importable from here

__all__ = ["make_train_step", "make_eval_step", "segmentation_loss"]


def _unpack(batch, spec):
    if spec is not None:
        batch = split(batch, spec if len(batch) == len(spec) else list(spec) + [spec[-1]])
    if len(batch) == 2:
        return batch[0], batch[1], None
    if len(batch) == 3:
        return batch
    raise ValueError(f"train step: a batch has {len(batch)} parts; expected (image, labels) or "
                     f"(image, labels, mask).")


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
    def step(batch):
        image, labels, mask = _unpack(tuple(batch), spec)
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        with tf.GradientTape() as tape:
            logits = model(image, training=True)
            loss = loss_fn(labels, logits, mask)
            scaled = loss / replicas
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        _, dice = metrics.dice_score(labels, tf.cast(logits, tf.float32), mask=mask)
        return {"loss": loss, "dice": dice}

    return step


def make_eval_step(model, spec=None):
    """``step(batch) -> per-class Dice`` (float32 vector) without training."""
    def step(batch):
        image, labels, mask = _unpack(tuple(batch), spec)
        per_class, _ = metrics.dice_score(labels, tf.cast(model(image, training=False), tf.float32),
                                          mask=mask)
        return per_class

    return step
