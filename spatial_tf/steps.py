"""The one train-step builder under every training loop of spatial_tf.

``make_gradient_step(model, optimizer, compute_losses)`` is the part the segmentation
step (``spatial_tf.train.make_train_step``), the detection step
(``spatial_tf.detection.make_detection_train_step``) and the planner share: inside a
``GradientTape`` it calls ``compute_losses(batch)`` (which runs the model, splits what
it needs and returns a dict with ``"loss"``, this replica's mean), divides the loss by
``num_replicas_in_sync`` so the optimizer's sum over replicas is the gradient of the
global mean, optionally keeps the gradients whole on every core (as the weights are),
applies them and returns the dict. ``segmentation_losses`` is the segmentation step's
``compute_losses``, so the planner measures the program ``train`` runs.

>>> import keras, tensorflow as tf
>>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
>>> optimizer = keras.optimizers.SGD(0.1)
>>> step = make_gradient_step(model, optimizer, lambda batch: {
...     "loss": tf.reduce_mean((model(batch[0], training=True)[:, 0] - batch[1]) ** 2)})
>>> sorted(step((tf.ones([2, 4]), tf.zeros([2]))))
['loss']
"""
from typing import Any, Callable, Dict, Optional

import tensorflow as tf

from spatial_tf import metrics
from spatial_tf.annotate import split

__all__ = ["make_gradient_step", "segmentation_losses", "split_segmentation_batch",
           "takes_mask", "run_model"]


def make_gradient_step(model: Any, optimizer: Any,
                       compute_losses: Callable[[Any], Dict[str, tf.Tensor]], *,
                       whole_gradients: bool = False) -> Callable:
    """``step(batch) -> compute_losses(batch)`` after one optimizer update.

    Args:
      model: the Keras model whose ``trainable_variables`` are trained.
      optimizer: a Keras optimizer, built in the strategy's scope with the model.
      compute_losses: ``batch -> {"loss": this replica's mean, ...}``, called inside the
        tape (it runs the model with ``training=True``).
      whole_gradients: annotate every gradient as whole on every core before the update
        (otherwise XLA may tile a small kernel's gradient, and so the weight, unevenly).
    """
    def step(batch):
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        variables = model.trainable_variables
        with tf.GradientTape() as tape:
            values = compute_losses(batch)
            scaled = values["loss"] / replicas
        grads = tape.gradient(scaled, variables)
        if whole_gradients:
            grads = split(grads, [None] * len(grads))
        optimizer.apply_gradients(zip(grads, variables))
        return values

    return step


def segmentation_losses(model: Any, loss_fn: Callable, spec: Optional[Any] = None) -> Callable:
    """``batch -> {"loss", "dice"}`` for ``(image, labels[, mask])`` batches split by
    ``spec`` (the mask takes the labels' spec when the spec has none for it):
    ``loss_fn(labels, logits, mask)`` and the mean hard Dice of the logits."""
    def compute(batch):
        image, labels, mask = split_segmentation_batch(tuple(batch), spec)
        logits = run_model(model, image, mask, training=True)
        loss = loss_fn(labels, logits, mask)
        _, dice = metrics.dice_score(labels, tf.cast(logits, tf.float32), mask=mask)
        return {"loss": loss, "dice": dice}

    return compute


def split_segmentation_batch(batch: tuple, spec: Optional[Any]) -> tuple:
    """``(image, labels, mask or None)`` of an ``(image, labels[, mask])`` batch, split by
    ``spec`` (the mask takes the labels' spec when the spec has none for it)."""
    if spec is not None:
        batch = split(batch, spec if len(batch) == len(spec) else list(spec) + [spec[-1]])
    if len(batch) == 2:
        return batch[0], batch[1], None
    if len(batch) == 3:
        return batch
    raise ValueError(f"train step: a batch has {len(batch)} parts; expected (image, labels) or "
                     f"(image, labels, mask).")


def takes_mask(model: Any) -> bool:
    """True for a Keras model with a second input named ``mask`` (``(batch, *spatial)``,
    1 on real voxels), as ``unet`` builds with ``UNetOptions(masked_batch_norm=True)``:
    it leaves the padding out of its batch-norm statistics.

    >>> from spatial_tf.models import UNetOptions, unet
    >>> masked = unet((8, 8, 1), 2, 2, 2, options=UNetOptions(masked_batch_norm=True))
    >>> takes_mask(masked), takes_mask(unet((8, 8, 1), 2, 2, 2))
    (True, False)
    >>> run_model(masked, tf.ones([1, 8, 8, 1]), None, training=False).shape
    TensorShape([1, 8, 8, 2])
    """
    inputs = getattr(model, "inputs", None) or []
    return len(inputs) == 2 and inputs[1].name.split(":")[0].split("/")[-1] == "mask"


def run_model(model: Any, image: tf.Tensor, mask: Optional[tf.Tensor], *,
              training: bool) -> tf.Tensor:
    """``model(image)``, or ``model([image, mask])`` for a model that ``takes_mask`` (a
    mask of ones when ``mask`` is None: every voxel real); see ``takes_mask``."""
    if not takes_mask(model):
        return model(image, training=training)
    if mask is None:
        mask = tf.ones(tf.shape(image)[:-1], tf.float32)
    return model([image, tf.cast(mask, tf.float32)], training=training)
