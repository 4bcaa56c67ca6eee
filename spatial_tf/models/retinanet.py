"""A compact RetinaNet (Keras 3) whose outputs stay per pyramid level.

A ResNet-style backbone (basic residual blocks with batch norm, strides 2 to 32), a
feature pyramid P3-P5 by default (up to P7), and class and box heads shared across the
levels. The outputs are per level and keep the image's spatial axes,
``{"class_logits": [[B, h, w, A * num_classes], ...], "box_deltas": [[B, h, w, A * 4], ...]}``,
so a split of the height and width survives into the losses
(``spatial_tf.detection.detection_loss``).

Why P3-P5 by default: P6 and P7 are 1/64 and 1/128 of the image, 8x8 and 4x4 at 512²,
so split 4 or 8 ways they hold one or two rows per core (mostly halo) or cannot be split
evenly at all; they also add few anchors. ``RetinaNetOptions(max_level=7)`` adds them for
large images.

>>> options = RetinaNetOptions(backbone_filters=(16, 16, 16, 16), fpn_filters=8)
>>> model = retinanet((64, 64, 3), num_classes=2, options=options)
>>> outputs = model(keras.ops.zeros((1, 64, 64, 3)))
>>> [tuple(t.shape) for t in outputs["class_logits"]]
[(1, 8, 8, 18), (1, 4, 4, 18), (1, 2, 2, 18)]
>>> [tuple(t.shape) for t in outputs["box_deltas"]]
[(1, 8, 8, 36), (1, 4, 4, 36), (1, 2, 2, 36)]
"""
import dataclasses
import math
import numbers
from typing import Any, Optional, Sequence, Tuple

import keras

from spatial_tf.checks import check_int, fold_keywords
from spatial_tf.models._option_checks import check_fraction, check_options_type, check_stage_ints

__all__ = ["retinanet", "RetinaNetOptions"]


def _conv_bn(x, filters, kernel, strides, name, relu=True, momentum=0.99):
    x = keras.layers.Conv2D(filters, kernel, strides=strides, padding="same", use_bias=False,
                            name=f"{name}_conv")(x)
    x = keras.layers.BatchNormalization(momentum=momentum, name=f"{name}_bn")(x)
    return keras.layers.ReLU(name=f"{name}_relu")(x) if relu else x


def _block(x, filters, strides, name, momentum):
    shortcut = x
    if strides != 1 or x.shape[-1] != filters:
        shortcut = _conv_bn(x, filters, 1, strides, f"{name}_shortcut", False, momentum)
    x = _conv_bn(x, filters, 3, strides, f"{name}_a", True, momentum)
    x = _conv_bn(x, filters, 3, 1, f"{name}_b", False, momentum)
    return keras.layers.ReLU(name=f"{name}_out")(keras.layers.Add(name=f"{name}_add")([shortcut, x]))


@dataclasses.dataclass(frozen=True)
class RetinaNetOptions:
    """The architecture of ``retinanet`` besides the image shape and the classes.

    Attributes:
      backbone_filters, blocks: filters and residual blocks of the four backbone stages
        (strides 4, 8, 16, 32: C2-C5). Keep 16 or more filters: TensorFlow's CPU kernel
        for the gradient of a strided 1x1 convolution (the shortcuts) with fewer input
        channels can crash outside XLA (docs/troubleshooting.md, "The most common ones").
      fpn_filters: channels of the pyramid and of the heads' hidden convolutions.
      head_convs: 3x3 convolutions (+ ReLU) in each head before its output convolution.
      num_anchors: anchors per position (``AnchorConfig().num_anchors``, 9 by default).
      max_level: 5, 6 or 7 (P6 from C5 by a stride-2 conv, P7 from ReLU(P6)).
      prior_probability: initial foreground probability of the class outputs.
      batch_norm_momentum: of the backbone's batch norm moving statistics (lower, e.g.
        0.9, for short runs evaluated in inference mode).

    >>> RetinaNetOptions(fpn_filters=32, max_level=6).blocks
    (1, 1, 1, 1)
    >>> RetinaNetOptions(max_level=4)
    Traceback (most recent call last):
    ...
    ValueError: RetinaNetOptions: max_level is 4; expected 5, 6 or 7, the top pyramid level. Fix: e.g. RetinaNetOptions(max_level=5) (6 or 7 add P6 and P7 for large images).
    """

    backbone_filters: Sequence[int] = (16, 32, 64, 128)
    blocks: Sequence[int] = (1, 1, 1, 1)
    fpn_filters: int = 64
    head_convs: int = 2
    num_anchors: int = 9
    max_level: int = 5
    prior_probability: float = 0.01
    batch_norm_momentum: float = 0.99

    def __post_init__(self):
        where = "RetinaNetOptions"
        for field, example in (("backbone_filters", (16, 32, 64, 128)), ("blocks", (1, 1, 1, 1))):
            object.__setattr__(self, field,
                               check_stage_ints(getattr(self, field), where, field, example))
        for field, example, minimum in (("fpn_filters", 64, 1), ("head_convs", 2, 0),
                                        ("num_anchors", 9, 1)):
            check_int(getattr(self, field), field, f"{where}({field}={example})",
                      minimum=minimum, where=where)
        if isinstance(self.max_level, bool) or not isinstance(self.max_level, numbers.Integral) \
                or self.max_level not in (5, 6, 7):
            raise ValueError(
                f"RetinaNetOptions: max_level is {self.max_level!r}; expected 5, 6 or 7, the "
                f"top pyramid level. Fix: e.g. RetinaNetOptions(max_level=5) (6 or 7 add P6 "
                f"and P7 for large images).")
        p = self.prior_probability
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 < p < 1:
            raise ValueError(
                f"RetinaNetOptions: prior_probability is {p!r}; expected a number in (0, 1), "
                f"the class outputs' initial foreground probability. Fix: e.g. "
                f"RetinaNetOptions(prior_probability=0.01).")
        check_fraction(self.batch_norm_momentum, where, "batch_norm_momentum",
                       "e.g. RetinaNetOptions(batch_norm_momentum=0.99) (Keras' default), or "
                       "0.9 for short runs")


def retinanet(image_shape: Sequence[int] = (512, 512, 3), num_classes: int = 3, *,
              options: Optional[RetinaNetOptions] = None, name: str = "retinanet",
              **deprecated: Any) -> keras.Model:
    """A RetinaNet with per-level outputs (levels 3 to ``options.max_level``).

    Args:
      image_shape: ``(height, width, channels)``; height and width multiples of
        ``2 ** max_level``.
      num_classes: object classes (sigmoid outputs, no background class).
      options: the backbone, pyramid and heads (``RetinaNetOptions()``: P3-P5, 9 anchors).
      deprecated: ``fpn_filters=`` and the other fields of ``RetinaNetOptions`` as
        keywords, as earlier releases took them (each warns with a ``DeprecationWarning``).

    >>> model = retinanet((128, 128, 3), 2, options=RetinaNetOptions(max_level=7))
    >>> [tuple(t.shape[1:3]) for t in model.output["box_deltas"]]   # P3-P7
    [(16, 16), (8, 8), (4, 4), (2, 2), (1, 1)]
    """
    check_options_type(options, RetinaNetOptions, "retinanet",
                       "retinanet(..., options=RetinaNetOptions(...))")
    options = fold_keywords("retinanet", deprecated,
                            {"options": (RetinaNetOptions, options)})["options"]
    shape, num_classes = _check_arguments(image_shape, num_classes, options.max_level)
    inputs = keras.Input(shape, name="image")
    c3, c4, c5 = _backbone(inputs, options.backbone_filters, options.blocks,
                           options.batch_norm_momentum)
    pyramid = _pyramid(c3, c4, c5, options.fpn_filters, options.max_level)
    prior = -math.log((1 - options.prior_probability) / options.prior_probability)
    heads = dict(fpn_filters=options.fpn_filters, head_convs=options.head_convs)
    outputs = {
        "class_logits": _head(pyramid, "class", options.num_anchors * num_classes, prior,
                              **heads),
        "box_deltas": _head(pyramid, "box", options.num_anchors * 4, 0.0, **heads)}
    return keras.Model(inputs, outputs, name=name)


def _check_arguments(image_shape: Sequence[int], num_classes: int,
                     max_level: int) -> Tuple[Tuple[int, ...], int]:
    """``(image shape, num_classes)`` checked."""
    num_classes = check_int(num_classes, "num_classes", "num_classes=3", as_argument=True,
                            where="retinanet")
    shape = tuple(image_shape)
    stride = 2 ** max_level
    if len(shape) != 3 or any(not isinstance(s, int) or s <= 0 for s in shape) or \
            shape[0] % stride or shape[1] % stride:
        raise ValueError(
            f"retinanet: image_shape={shape}; expected (height, width, channels) with height "
            f"and width multiples of {stride} (2 ** max_level). Fix: pad or resize the images, "
            f"e.g. image_shape=({stride * 16}, {stride * 16}, 3).")
    return shape, num_classes


def _backbone(inputs, backbone_filters, blocks, batch_norm_momentum):
    """C3, C4 and C5 of the residual backbone (strides 8, 16, 32)."""
    x = _conv_bn(inputs, backbone_filters[0], 3, 2, "stem", True, batch_norm_momentum)                    # /2
    features = []
    for stage, (filters, count) in enumerate(zip(backbone_filters, blocks)):
        for i in range(count):
            x = _block(x, filters, 2 if i == 0 else 1, f"c{stage + 2}_block{i}", batch_norm_momentum)
        features.append(x)                                                     # C2..C5
    return features[1:]


def _pyramid(c3, c4, c5, fpn_filters, max_level):
    """P3 to P``max_level``: lateral 1x1 convolutions, top-down sums, 3x3 smoothing."""
    pyramid = [keras.layers.Conv2D(fpn_filters, 1, name=f"p{k}_lateral")(c)
               for k, c in zip((3, 4, 5), (c3, c4, c5))]
    for k in (1, 0):   # top-down: P4 += up(P5), P3 += up(P4)
        up = keras.layers.UpSampling2D(2, interpolation="nearest", name=f"p{k + 3}_up")(pyramid[k + 1])
        pyramid[k] = keras.layers.Add(name=f"p{k + 3}_merge")([pyramid[k], up])
    pyramid = [keras.layers.Conv2D(fpn_filters, 3, padding="same", name=f"p{k}")(p)
               for k, p in zip((3, 4, 5), pyramid)]
    if max_level >= 6:
        pyramid.append(keras.layers.Conv2D(fpn_filters, 3, strides=2, padding="same", name="p6")(c5))
    if max_level >= 7:
        p7_in = keras.layers.ReLU(name="p6_relu")(pyramid[-1])
        pyramid.append(keras.layers.Conv2D(fpn_filters, 3, strides=2, padding="same", name="p7")(p7_in))
    return pyramid


def _head(pyramid, kind, outputs, bias, fpn_filters, head_convs):
    """One head's output per level, its convolutions shared across levels."""
    convs = [keras.layers.Conv2D(fpn_filters, 3, padding="same", activation="relu",
                                 kernel_initializer=keras.initializers.RandomNormal(stddev=0.01),
                                 name=f"{kind}_head_{i}") for i in range(head_convs)]
    last = keras.layers.Conv2D(outputs, 3, padding="same", name=f"{kind}_output",
                               kernel_initializer=keras.initializers.RandomNormal(stddev=0.01),
                               bias_initializer=keras.initializers.Constant(bias))
    results = []
    for p in pyramid:
        for conv in convs:
            p = conv(p)
        results.append(last(p))
    return results
