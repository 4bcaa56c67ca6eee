"""A small (2+1)D video classifier (Keras 3) for clips ``[batch, frames, height, width,
channels]``.

Per stage, a 1×3×3 convolution over each frame's pixels and a 3×1×1 one over the frames,
each with batch norm and ReLU, then 2×2 average pooling in space (never in time); global
average pooling and a dense head of logits. With ``spec``, a ``spatial_tf.layers.Split``
after the input splits the clip (``[1,1,2,2,1]`` in space, ``[1,4,1,1,1]`` in time);
``partition_friendly`` then gives its convolutions the halo form. The layers are named
``stage{i}_space_conv``, ``stage{i}_time_bn`` and so on, so a report's lines name them.

>>> model = video_classifier((8, 32, 32, 1), filters=(8, 16))
>>> model.output_shape, model.count_params()
((None, 4), 2444)
>>> [layer.name for layer in model.layers][1:5]
['stage1_space_conv', 'stage1_space_bn', 'stage1_space_relu', 'stage1_time_conv']
>>> video_classifier((8, 2, 2, 1), filters=(8, 16))
Traceback (most recent call last):
...
ValueError: video_classifier: input_shape is (8, 2, 2, 1): height and width 2 x 2 leave 1 x 1 pixels for the last of 2 stages (each pools 2x2); expected at least 2 x 2 there. Fix: clips of at least 4 x 4 pixels, or fewer stages, e.g. filters=(8,).
"""
import numbers
from typing import Optional, Sequence, Union

import keras

from spatial_tf.checks import check_int
from spatial_tf.layers import Split
from spatial_tf.models._option_checks import check_fraction
from spatial_tf.models.precision import output_dtype, resolve_dtype_policy
from spatial_tf.table import plural

__all__ = ["video_classifier"]

_WHERE = "video_classifier"


def video_classifier(input_shape: Sequence[int], spec: Optional[Sequence[int]] = None,
                     classes: int = 4, filters: Sequence[int] = (16, 32, 64),
                     norm_momentum: float = 0.99,
                     dtype_policy: Optional[Union[str, keras.DTypePolicy]] = None,
                     name: str = "video_classifier") -> keras.Model:
    """The (2+1)D classifier for clips of ``input_shape`` ``(frames, height, width,
    channels)``: ``classes`` logits per clip.

    Args:
      spec: the clip's split (five counts, batch first), or None for no ``Split`` layer
        (a step that splits its inputs itself, e.g. one the planner compiles).
      filters: the convolutions' filters, one stage each; each stage halves height and
        width.
      norm_momentum: of the batch norms' moving statistics (e.g. 0.9 for short runs that
        evaluate in inference mode).
      dtype_policy: as the other models' (``spatial_tf.models.precision``): None is
        ``"mixed_bfloat16"`` under a ``TPUStrategy``, Keras' global policy elsewhere; the
        logits stay float32.
    """
    shape = _check_shape(input_shape, filters)
    check_int(classes, "classes", f"{_WHERE}(..., classes=4)", where=_WHERE)
    check_fraction(norm_momentum, _WHERE, "norm_momentum", "e.g. norm_momentum=0.99")
    policy = resolve_dtype_policy(dtype_policy, _WHERE)
    inputs = keras.Input(shape, dtype=policy.variable_dtype, name="clips")
    x = Split(spec, dtype=policy, name="split")(inputs) if spec is not None else inputs
    for stage, count in enumerate(filters, start=1):
        for part, kernel in (("space", (1, 3, 3)), ("time", (3, 1, 1))):
            prefix = f"stage{stage}_{part}"
            x = keras.layers.Conv3D(count, kernel, padding="same", use_bias=False,
                                    dtype=policy, name=f"{prefix}_conv")(x)
            x = keras.layers.BatchNormalization(momentum=norm_momentum, dtype=policy,
                                                name=f"{prefix}_bn")(x)
            x = keras.layers.Activation("relu", dtype=policy, name=f"{prefix}_relu")(x)
        x = keras.layers.AveragePooling3D((1, 2, 2), dtype=policy, name=f"stage{stage}_pool")(x)
    x = keras.layers.GlobalAveragePooling3D(dtype=policy, name="pool")(x)
    logits = keras.layers.Dense(classes, dtype=output_dtype(policy), name="logits")(x)
    return keras.Model(inputs, logits, name=name)


def _check_shape(input_shape, filters):
    """``input_shape`` as a tuple of 4 positive ints whose height and width survive every
    stage's 2×2 pooling, ``filters`` a non-empty sequence of positive ints."""
    try:
        shape = tuple(input_shape)
    except TypeError:
        shape = ()
    if len(shape) != 4 or not all(isinstance(s, numbers.Integral) and not isinstance(s, bool)
                                  and s > 0 for s in shape):
        raise ValueError(
            f"video_classifier: input_shape is {input_shape!r}; expected 4 positive sizes "
            f"(frames, height, width, channels), without the batch axis. Fix: e.g. "
            f"video_classifier((8, 32, 32, 3)).")
    try:
        counts = tuple(filters)
    except TypeError:
        counts = ()
    if not counts or not all(isinstance(f, numbers.Integral) and not isinstance(f, bool)
                             and f > 0 for f in counts):
        raise ValueError(
            f"video_classifier: filters is {filters!r}; expected one positive int per "
            f"stage. Fix: e.g. filters=(16, 32, 64).")
    frames, height, width, channels = (int(s) for s in shape)
    stages = len(counts)
    last = (height >> (stages - 1), width >> (stages - 1))
    if min(last) < 2:
        fewer = f", or fewer stages, e.g. filters={counts[:-1]}" if stages > 1 else ""
        raise ValueError(
            f"video_classifier: input_shape is {shape}: height and width {height} x "
            f"{width} leave {last[0]} x {last[1]} pixels for the last of "
            f"{plural(stages, 'stage')} (each pools 2x2); expected at least 2 x 2 there. Fix: "
            f"clips of at least {2 ** stages} x {2 ** stages} pixels{fewer}.")
    return frames, height, width, channels
