"""A split axis folded into the batch, or taken one frame at a time: how 2D layers run
on clips ``(batch, frames, height, width, channels)``, and the fix for the gather.

A clip split along its frames loses the split where the frames are folded into the
batch (``tf.reshape(x, [-1, h, w, c])``, einops' ``"b t h w c -> (b t) h w c"``): a
split survives a reshape only on the outermost merged axis, so XLA gathers the clip on
every core. Keras' ``TimeDistributed`` takes the frames one at a time (``x[:, i]``
after a transpose) instead, and XLA sends each frame from its core to every core (an
all-reduce, or collective-permutes). Either way the fix is a layer that keeps the 5-D
shape (``spatial_tf.layers.FrameConv2D`` and its kin), or another axis split.

>>> fold_axes([2, 4, 16, 16, 3], [8, 16, 16, 3])
[0, 1]
>>> other_split([2, 4, 16, 16, 3], [0, 1], 2)
[1, 1, 2, 1, 1]
"""
import math
from typing import List, Optional, Sequence

__all__ = ["FRAME_KINDS", "fold_axes", "other_split", "fold_remedy", "takes_frame",
           "frame_remedy", "per_frame_layer"]

FRAME_KINDS = ("all-reduce", "collective-permute")
"""The collectives by which XLA sends a frame taken from a split axis to other cores."""

_FOLD = (
    "this reshape folds the split axis {axes} of a {shape} tensor into the batch (to "
    "{after}), and a split survives a reshape only on the outermost merged axis, here "
    "the batch, so XLA gathers the whole tensor on every core. Fix: {fix}"
)

_FRAME = (
    "this op takes one frame at a time along the split axis {axis} of a {shape} tensor "
    "(a per-frame loop, as Keras' TimeDistributed runs), so XLA sends each frame from "
    "the core that holds it to every core, and every core computes every frame. Fix: {fix}"
)

_LAYERS = (
    (("Conv2D",), "spatial_tf.layers.FrameConv2D (FrameConv2D.from_conv2d(conv) converts "
                  "a keras.layers.Conv2D, weights included)"),
    (("MaxPool", "MaxPoolV2"), "spatial_tf.layers.FrameMaxPooling2D"),
    (("AvgPool",), "spatial_tf.layers.FrameAveragePooling2D"),
    (("ResizeBilinear", "ResizeNearestNeighbor", "ResizeBicubic", "ResizeArea",
      "ScaleAndTranslate"), "spatial_tf.layers.FrameResizing"),
)
_ANY_LAYER = ("a per-frame layer of spatial_tf.layers (FrameConv2D, FrameMaxPooling2D, "
              "FrameAveragePooling2D, FrameResizing)")


def fold_axes(before: Sequence[int], after: Sequence[int]) -> List[int]:
    """The leading axes of ``before`` a reshape to ``after`` merges into its first axis,
    keeping every other axis (at least one besides the channels); [] for any other
    reshape.

    >>> fold_axes([2, 4, 16, 16, 3], [2, 4, 256, 3]), fold_axes([2, 16, 16, 3], [512, 3])
    ([], [])
    """
    k = len(before) - len(after) + 1
    if k < 2 or len(after) < 3 or math.prod(before[:k]) != after[0]:
        return []
    return list(range(k)) if list(after[1:]) == list(before[k:]) else []


def other_split(shape: Sequence[int], folded: Sequence[int],
                num_cores: int) -> Optional[List[int]]:
    """The spec splitting ``num_cores`` ways the first axis of ``shape`` that is neither
    the batch, nor in ``folded``, nor the channels, and divides; None when none does.

    >>> other_split([2, 4, 6, 16, 3], [0, 1], 4), other_split([2, 4, 6, 6, 3], [0, 1], 4)
    ([1, 1, 1, 4, 1], None)
    """
    for axis in range(1, len(shape) - 1):
        if axis not in folded and shape[axis] >= num_cores and shape[axis] % num_cores == 0:
            return [num_cores if a == axis else 1 for a in range(len(shape))]
    return None


def fold_remedy(op, num_cores: int, gathered: Sequence[int] = (),
                gathered_axes: Sequence[int] = ()) -> Optional[str]:
    """The text for a gather at ``op``, a reshape folding a split axis into the batch,
    else None. ``gathered``: the gathered tensor's shape; where it is the reshape's
    input, ``gathered_axes`` (XLA's all-gather dimensions) are its split axes.

    >>> import tensorflow as tf
    >>> fold = tf.function(lambda x: tf.reshape(x, [-1, 8, 3]))
    >>> graph = fold.get_concrete_function(tf.TensorSpec([2, 4, 8, 3])).graph
    >>> [op] = [op for op in graph.get_operations() if op.type == "Reshape"]
    >>> fold_remedy(op, 2)[:62]
    'this reshape folds the split axis 1 of a [2, 4, 8, 3] tensor i'
    """
    before, after = _static_shape(op.inputs[0]), _static_shape(op.outputs[0])
    if before is None or after is None or before[0] <= 1:
        return None
    folded = fold_axes(before, after)
    if list(gathered) == before and gathered_axes:
        split = [a for a in gathered_axes if a in folded[1:]]
    else:  # the batch alone folds contiguously: a gather here means a later axis is split
        split = [a for a in folded[1:] if before[a] > 1]
    if not split:
        return None
    return _FOLD.format(axes=split[0] if len(split) == 1 else split, shape=before,
                        after=after, fix=_fix(before, folded, num_cores, op))


def takes_frame(op) -> Optional[int]:
    """The axis of which ``op`` takes one index (``x[:, i]``: a ``StridedSlice`` that
    drops that axis, of size > 1, and no other), else None.

    >>> import tensorflow as tf
    >>> take = tf.function(lambda x: (x[:, 1], x[:, 1:2], x[..., 0]))
    >>> graph = take.get_concrete_function(tf.TensorSpec([2, 4, 3])).graph
    >>> [takes_frame(op) for op in graph.get_operations() if op.type == "StridedSlice"]
    [1, None, None]
    """
    if getattr(op, "type", None) != "StridedSlice":
        return None
    mask = int(op.get_attr("shrink_axis_mask"))
    if op.get_attr("ellipsis_mask") or op.get_attr("new_axis_mask") or bin(mask).count("1") != 1:
        return None
    axis, shape = mask.bit_length() - 1, _static_shape(op.inputs[0])
    return axis if shape is not None and axis < len(shape) and shape[axis] > 1 else None


def frame_remedy(op, num_cores: int) -> Optional[str]:
    """The text for ``op`` taking frames one at a time from a split axis, else None; the
    axis and shape are those before a transpose feeding it (``TimeDistributed`` moves
    the frames first)."""
    axis = takes_frame(op)
    if axis is None:
        return None
    tensor = op.inputs[0]
    shape = _static_shape(tensor)
    perm = _constant(tensor.op.inputs[1]) if tensor.op.type == "Transpose" else None
    source = _static_shape(tensor.op.inputs[0]) if perm is not None else None
    if source is not None and perm is not None:
        shape, axis = source, int(perm[axis])
    return _FRAME.format(axis=axis, shape=shape, fix=_fix(shape, [0, axis], num_cores, op))


def per_frame_layer(op, depth: int = 3) -> str:
    """The per-frame layer for the first op of a known kind reading ``op``'s result
    (within ``depth`` ops), else the list of them."""
    pending: list = [op]
    seen: set = set()
    for _ in range(depth):
        pending = list({c.name: c for o in pending for t in o.outputs for c in t.consumers()
                        if c.name not in seen}.values())
        seen.update(c.name for c in pending)
        for consumer in pending:
            found = next((text for types, text in _LAYERS if consumer.type in types), None)
            if found:
                return found
    return _ANY_LAYER


def _fix(shape, folded, num_cores, op) -> str:
    spec = other_split(shape, folded, num_cores)
    split = (f"split another axis for this part: spatial_tf.split(x, {spec}) before it"
             if spec else "split another axis for this part, one not merged into the batch")
    if len(shape) != 5 or list(folded) != [0, 1]:
        return split[0].upper() + split[1:] + "."
    return (f"keep the clip 5-D with {per_frame_layer(op)}, which applies the 2D layer to "
            f"each frame, or {split}.")


def _static_shape(tensor) -> Optional[List[int]]:
    dims = tensor.shape.as_list() if tensor.shape.rank is not None else None
    return dims if dims is not None and None not in dims else None


def _constant(tensor):
    import tensorflow as tf

    value = tf.get_static_value(tensor)
    return None if value is None else [int(v) for v in value]
