"""Detection train and predict steps: matching, losses and gradients inside one step.

The whole train step (model, anchor matching on device, focal and box losses, the
optimizer update) has static shapes and compiles with ``jit_compile``; under a
``TPUStrategy`` or ``spatial_tf.Emulator`` the image is split by the batch's spec and the
per-level targets are split the same way over height and width, so XLA keeps every
activation split. Post-processing (``postprocess``) is not part of it.

>>> import keras, tensorflow as tf
>>> from spatial_tf.models import RetinaNetOptions, retinanet
>>> options = RetinaNetOptions(backbone_filters=(16, 16, 16, 16), fpn_filters=8)
>>> model = retinanet((64, 64, 3), num_classes=2, options=options)
>>> step = make_detection_train_step(model, keras.optimizers.SGD(0.01))
>>> labels = {"boxes": tf.constant([[[8., 8., 40., 40.]]]), "classes": tf.constant([[1]])}
>>> sorted(step((tf.zeros([1, 64, 64, 3]), labels)))
['box_loss', 'class_loss', 'loss']
"""
import dataclasses
from typing import Any, Callable, Optional, Sequence

import tensorflow as tf

from spatial_tf.annotate import split
from spatial_tf.checks import fold_keywords
from spatial_tf.detection import boxes as box_ops
from spatial_tf.detection.anchors import AnchorConfig
from spatial_tf.detection.losses import detection_loss
from spatial_tf.detection.matching import match
from spatial_tf.spec import parse
from spatial_tf.steps import make_gradient_step

__all__ = ["make_detection_train_step", "make_detection_predict_step", "check_model",
           "DetectionLossConfig"]


def check_model(model: Any, anchors: AnchorConfig) -> int:
    """The model's class count, after checking its outputs fit ``anchors``; else a ValueError."""
    image_size = tuple(model.input_shape[1:3])
    shapes = anchors.level_shapes(image_size)
    try:
        outputs = model.output
    except (AttributeError, ValueError):   # a model not called on a Keras Input
        outputs = None
    where = f"detection step: model '{model.name}'"
    if not isinstance(outputs, dict) or sorted(outputs) != ["box_deltas", "class_logits"]:
        try:
            shown = "outputs " + ", ".join(str(tuple(t.shape)) for t in model.outputs)
        except (AttributeError, TypeError, ValueError):
            shown = "has no outputs yet"
        raise ValueError(
            f"{where} {shown}; expected a dict with 'class_logits' and 'box_deltas' (lists "
            f"per pyramid level). Fix: build it with spatial_tf.models.retinanet(...).")
    got = [tuple(t.shape[1:3]) for t in outputs["class_logits"]]
    if got != shapes or [tuple(t.shape[1:3]) for t in outputs["box_deltas"]] != shapes:
        raise ValueError(
            f"{where} has levels of (h, w) {got}; the anchors (levels {anchors.min_level}-"
            f"{anchors.max_level}) expect {shapes}. Fix: give AnchorConfig the model's levels, "
            f"e.g. AnchorConfig(max_level={3 + len(got) - 1}).")
    a = anchors.num_anchors
    channels = outputs["class_logits"][0].shape[-1]
    if channels % a or outputs["box_deltas"][0].shape[-1] != 4 * a:
        raise ValueError(
            f"{where} has {channels} class and {outputs['box_deltas'][0].shape[-1]} box "
            f"channels per position; expected multiples of the anchors per position ({a}: "
            f"num_classes * {a} and 4 * {a}). Fix: build the model with "
            f"options=RetinaNetOptions(num_anchors={a}).")
    return channels // a


def _image_leaf(batch, spec):
    if spec is None:
        return None
    leaves = parse(batch, spec)
    return leaves[0] if isinstance(batch, (tuple, list)) else leaves


def _split_like_image(tensor, leaf):
    """Split ``[B, h, w, ...]`` as the image's leaf splits ``[B, H, W, C]``, when it divides."""
    dims = getattr(leaf, "dims", None)
    if dims is None or len(dims) != 4 or dims[0] != 1 or dims[3] != 1:
        return tensor
    sy, sx = dims[1], dims[2]
    if tensor.shape[1] % sy or tensor.shape[2] % sx:
        return tensor   # a level too small to split evenly: XLA chooses
    return split(tensor, type(leaf)(1, sy, sx, *([1] * (tensor.shape.rank - 3))))


@dataclasses.dataclass(frozen=True)
class DetectionLossConfig:
    """How the detection train step matches anchors and weighs its losses.

    Attributes:
      positive_iou, negative_iou: matching thresholds (positive >= 0.5, background < 0.4,
        ignored in between).
      alpha, gamma: the focal loss's; huber_delta, box_weight: the box loss and its weight.
      variances: the box coding's scale per coordinate.
    """

    positive_iou: float = 0.5
    negative_iou: float = 0.4
    alpha: float = 0.25
    gamma: float = 2.0
    huber_delta: float = 0.1
    box_weight: float = 50.0
    variances: Sequence[float] = box_ops.VARIANCES


def make_detection_train_step(model: Any, optimizer: Any, spec: Any = None,
                              anchors: Optional[AnchorConfig] = None, *,
                              loss: Optional[DetectionLossConfig] = None,
                              **deprecated: Any) -> Callable:
    """``step((image, labels)) -> {"loss", "class_loss", "box_loss"}`` for ``strategy.run``.

    Args:
      model: ``spatial_tf.models.retinanet(...)`` (or any model with its outputs).
      optimizer: a Keras optimizer, built in the strategy's scope with the model.
      spec: the batch's spec, e.g. ``[[1, 2, 2, 1], {"boxes": None, "classes": None}]``;
        None leaves the batch as it is.
      anchors: the model's anchors (``AnchorConfig()``: P3-P5, 9 per position).
      loss: matching thresholds and loss weights (``DetectionLossConfig()``).
      deprecated: ``positive_iou=`` and the other fields of ``DetectionLossConfig`` as
        keywords, as earlier releases took them (with a ``DeprecationWarning``).

    ``labels = {"boxes": [B, M, 4] (ymin, xmin, ymax, xmax) pixels, "classes": int [B, M]}``
    with class -1 on padding. The loss used for the gradients is divided by
    ``num_replicas_in_sync``; the returned values are this replica's unscaled losses.
    """
    loss = fold_keywords("make_detection_train_step", deprecated,
                         {"loss": (DetectionLossConfig, loss)})["loss"]
    anchors = anchors or AnchorConfig()
    num_classes = check_model(model, anchors)
    grids = anchors.grids(tuple(model.input_shape[1:3]))

    def compute_losses(batch):
        leaf = _image_leaf(batch, spec)
        image, labels = split(batch, spec) if spec is not None else batch
        outputs = model(image, training=True)
        dtype = outputs["box_deltas"][0].dtype
        labels = {"boxes": tf.cast(labels["boxes"], dtype), "classes": labels["classes"]}
        targets = match([g.astype(dtype.as_numpy_dtype) for g in grids], labels,
                        positive_iou=loss.positive_iou, negative_iou=loss.negative_iou,
                        variances=loss.variances)
        targets = [{k: _split_like_image(v, leaf) for k, v in t.items()} for t in targets]
        losses = detection_loss(outputs["class_logits"], outputs["box_deltas"], targets,
                                num_classes, alpha=loss.alpha, gamma=loss.gamma,
                                huber_delta=loss.huber_delta, box_weight=loss.box_weight)
        return {k: losses[k] for k in ("loss", "class_loss", "box_loss")}

    # gradients whole on every core under a spec, like the weights (see make_gradient_step)
    return make_gradient_step(model, optimizer, compute_losses, whole_gradients=spec is not None)


def make_detection_predict_step(model: Any, spec: Any = None) -> Callable:
    """``step(batch) -> {"class_logits": [...], "box_deltas": [...]}``, the raw head outputs.

    ``batch`` is an image batch or ``(image, labels)``; ``spec`` is the spec of that same
    batch. Runs the model in inference mode, partitioned like the train step; turn the
    outputs into boxes with ``postprocess`` afterwards (unpartitioned).
    """
    def step(batch):
        if spec is not None:
            batch = split(batch, spec)
        image = batch[0] if isinstance(batch, (tuple, list)) else batch
        return model(image, training=False)

    return step
