"""Why an activation-sized tensor is gathered, and the fix that applies to its op.

``explain(kind, source, num_cores)`` is the text after a ``report`` warning's figures:
the reason for the gather and the concrete remedy for the TensorFlow op behind it
(``op_source.Source``): ``partition_friendly(model)`` for batch norm and stride-1
convolutions, the ``spatial_tf.losses`` function with the same call for Keras' cross
entropy, the split that keeps a reshape contiguous, what makes a resize local, a
per-frame layer or another split for frames folded into the batch (``folds``), or the
general advice.

>>> merged_axes([2, 32, 32, 4], [2, 4096])
[1, 2, 3]
>>> contiguous_spec([2, 32, 32, 4], [2, 4096], 4)
[1, 4, 1, 1]
"""
from typing import List, Optional, Sequence, Tuple

from spatial_tf import layer_kinds
from spatial_tf.emulator.diagnose import folds, op_source

__all__ = ["explain", "merged_axes", "contiguous_spec", "is_kernel_piece"]

GENERIC = {
    "all-gather": (
        "this op cannot work on the split pieces, so XLA reassembles the whole tensor on "
        "every core. Fix: avoid ops that merge or reorder split axes there (e.g. a "
        "reshape that flattens them), or split a different axis."
    ),
    "all-to-all": (
        "XLA moves this tensor's pieces from one split to another: the tensors meeting "
        "at this op (or its gradient) are split differently, e.g. one input split "
        "[1, 4, 1, 1] and another [1, 2, 2, 1], or a transpose moves a split axis. Fix: "
        "give the inputs that meet here the same spec in spatial_tf.split."
    ),
}

FUSED_BATCH_NORM = (
    "fused batch norm (FusedBatchNormV3, tf_keras' default) has no partitioned form, so XLA "
    "reassembles the whole activation on every core. Fix: "
    "spatial_tf.layers.partition_friendly(model) unfuses it (or BatchNormalization("
    "fused=False)); Keras 3's BatchNormalization is never fused."
)

_PLAIN_CONVOLUTION = (
    "the kernel gradient of this stride-1 convolution is partitioned by gathering its "
    "input (or keeping its halo from the forward pass). Fix: "
    "spatial_tf.layers.partition_friendly(model) computes it from halo exchanges of the "
    "output gradient, with the same weights and results."
)

_OTHER_CONVOLUTION = (
    "this {what} convolution's pieces per core are too small for its window or stride "
    "at this level (typically a deep, downsampled level split as many ways as the "
    "input), and partition_friendly has no halo form for it. Fix: split fewer ways, or "
    "split an axis that stays large at this level."
)

_SMALL_LEVEL = (
    "at this level the convolution's input is {shape} with a {window} window, so a piece "
    "split across the cores is smaller than the window and XLA gathers the whole level "
    "on every core (partition_friendly cannot change that). Fix: split fewer ways at "
    "this level (a spatial_tf.layers.Split with a smaller spec, or Replicate, before "
    "the layer), or split an axis that stays large here."
)

_CROSS_ENTROPY = (
    "Keras' {name} flattens the split axes into [-1, classes]. Fix: "
    "spatial_tf.losses.{name}(y_true, y_pred, from_logits=...), the same call, keeps them "
    "split."
)

_RESHAPE = (
    "this reshape merges axes {axes} of a {shape} tensor, and only a split of the "
    "outermost merged axis stays contiguous. Fix: {spec} keeps this reshape local (or "
    "reshape after the loss instead)."
)

_RESIZE = (
    "XLA has no partitioned form of TensorFlow's {op}, so it reassembles the whole image "
    "on every core{problem}. Fix: {fix}spatial_tf.layers.partition_friendly(model) "
    "computes Keras' Resizing, UpSampling2D and UpSampling3D by integer factors without "
    "the gather (the same values), and spatial_tf.resize.resize(x, size, method) does in "
    "your own code."
)

_KERNEL = (
    "this is a convolution's kernel {kernel} (or its gradient), not an activation: XLA "
    "tiled it along its window axes to match the split input, padded to the cores, and "
    "gathers it back. Fix: keep the gradients whole on every core, like the weights: "
    "grads = spatial_tf.split(grads, [None] * len(grads)) before apply_gradients, or, "
    "in a step you cannot edit (fit, a framework's trainer), "
    "spatial_tf.layers.partition_friendly(model, optimizer=optimizer)."
)

_CONCAT = (
    "this concatenation along axis {axis} ({sizes}) gives a result whose pieces, where "
    "that axis is split, fall on other cores than its inputs' pieces (a stream buffer's "
    "frames put in front of a clip split in time), so XLA moves them; if the axis is not "
    "split, the inputs are split differently. Fix: split another axis (a clip's height "
    "and width, [1, 1, 2, 2, 1]), or give the inputs the same spec in spatial_tf.split."
)

_CUMULATIVE = (
    "a cumulative {what} along axis {axis} needs every earlier piece of that axis, so "
    "where it is split XLA gathers the whole axis on every core (a running average over "
    "frames with the clip split in time). Fix: split another axis, or compute it per "
    "piece and add the earlier pieces' totals."
)

_RESHAPE_BATCH = (
    "this reshape merges the batch with the split axes {axes} of a {shape} tensor, so no "
    "spatial split keeps it local. Fix: keep the spatial axes until they are reduced "
    "(per-pixel losses and metrics as spatial_tf.losses computes them), or reshape "
    "after reducing them."
)


def explain(kind: str, source, num_cores: int, op_name: str = "",
            shape: Sequence[int] = (), variables: Sequence[Sequence[int]] = (),
            gathered_axes: Sequence[int] = ()) -> str:
    """The reason and fix for a ``kind`` collective of a ``shape`` tensor at ``source``
    (None: unknown op); ``variables``: the shapes of the step's variables;
    ``gathered_axes``: the axes an all-gather gathers (XLA's ``dimensions``)."""
    kernel = next((v for v in variables if len(v) >= 3 and is_kernel_piece(shape, v, num_cores)
                   and _may_hold(source, v)), None)
    if kernel is not None:
        return _KERNEL.format(kernel=list(kernel))
    if source is None:
        return FUSED_BATCH_NORM if "FusedBatchNorm" in op_name else GENERIC[kind]
    op = source.op
    frame = folds.frame_remedy(op, num_cores)  # x[:, i] of a split axis (TimeDistributed)
    if frame is not None:
        return frame
    along = _along_axis(op)
    if along is not None:
        return along
    remedy = layer_kinds.remedy_for_op(op.type)  # which layer kind made it
    if remedy == "fused batch norm":
        return FUSED_BATCH_NORM
    if remedy == "resize":
        return _resize(op)
    if remedy == "convolution":
        level = _level_and_window(op)
        if level is not None and any(1 < s < 2 * w for s, w in zip(*level) if w > 1):
            shape, window = level
            return _SMALL_LEVEL.format(shape="x".join(map(str, shape)),
                                       window="x".join(map(str, window)))
        what = _convolution_kind(op)
        return _PLAIN_CONVOLUTION if what is None else _OTHER_CONVOLUTION.format(what=what)
    loss = _cross_entropy(op)
    if loss is not None:
        return _CROSS_ENTROPY.format(name=loss)
    if op.type == "Reshape" and kind == "all-gather":
        before, after = _static_shape(op.inputs[0]), _static_shape(op.outputs[0])
        if before is None or after is None:
            return GENERIC[kind]
        axes = merged_axes(before, after)
        if axes and axes[0] == 0 and before[0] > 1:
            fold = folds.fold_remedy(op, num_cores, shape, gathered_axes)  # frames into batch
            return fold or _RESHAPE_BATCH.format(axes=axes, shape=before)
        spec = contiguous_spec(before, after, num_cores) if axes else None
        if spec is not None:
            return _RESHAPE.format(axes=axes, shape=before, spec=spec)
    return GENERIC[kind]


def _resize(op) -> str:
    """The reason and fix for a gather at a TensorFlow resize op (or its gradient): an
    antialiased, corner-aligned or non-integer resize has no local form, say which."""
    from spatial_tf.resize import factor_hint

    def attr(name):
        return _attribute(op, name)

    problem, fix = "", ""
    if op.type.startswith("ScaleAndTranslate"):
        problem = ": it antialiases (antialias=True), a filter wider than the factor"
        fix = "drop antialias=True (it changes nothing when upsampling); then "
    elif attr("align_corners") or attr("half_pixel_centers") is False:
        how = ("aligns corners (align_corners=True)" if attr("align_corners") else
               "samples from the corners (half_pixel_centers=False, tf.compat.v1's)")
        problem = f": it {how}, which no local form computes"
        fix = ("resize with half-pixel centres (tf.image.resize, Keras' Resizing: their "
               "default) by integer factors; then ")
    else:
        sizes = _resize_sizes(op)
        hints = [(axis, factor_hint(n, m)) for axis, (n, m) in sizes.items()]
        bad = [(axis, hint) for axis, hint in hints if hint]
        if bad:
            axis, hint = bad[0]
            head, tail = hint.split(": ", 1)
            problem = f": along the {axis}, {head}, which no local form computes"
            fix = f"{tail}; then "
        elif sizes:
            factors = ", ".join(f"{axis} {'x' if m >= n else '1/'}{max(m // n, n // m)}"
                                for axis, (n, m) in sizes.items())
            problem = f" (here a resize by integer factors: {factors})"
    name = op.type[:-len("Grad")] if op.type.endswith("Grad") else op.type
    return _RESIZE.format(op=name, problem=problem, fix=fix)


def _attribute(op, name):
    try:
        return op.get_attr(name)
    except (ValueError, AttributeError):
        return None


def _resize_sizes(op) -> dict:
    """``{"height": (n, m), "width": (n, m)}`` for a resize of 4-D images from n to m,
    where static ({} otherwise); a gradient op's result has the input's shape."""
    if not (getattr(op, "inputs", None) and getattr(op, "outputs", None)):
        return {}
    before, after = (_static_shape(t) for t in (op.inputs[0], op.outputs[0]))
    if op.type.endswith("Grad"):
        before, after = after, before
    if before is None or after is None or len(before) != 4 or len(after) != 4:
        return {}
    return {"height": (before[1], after[1]), "width": (before[2], after[2])}


def _may_hold(source, kernel: Sequence[int]) -> bool:
    """Whether the op at ``source`` may carry a ``kernel``-shaped tensor: a forward op's
    result, or (a gradient's, an op with no result such as a variable update) one of its
    inputs, has that shape or an unknown one. A running average over frames shaped like a
    depthwise kernel's piece is not one."""
    if source is None:
        return True
    op = source.op
    tensors = op.outputs if (op.outputs and not source.gradient) else op.inputs
    shapes = [_static_shape(t) for t in tensors]
    return any(s is None or list(s) == list(kernel) for s in shapes)


def _along_axis(op) -> Optional[str]:
    """The text for a concatenation or a cumulative sum along one axis, else None."""
    axis_input = {"ConcatV2": -1, "Cumsum": 1, "Cumprod": 1}.get(op.type)
    if axis_input is None or not getattr(op, "inputs", None):
        return None
    axis = _constant_axis(op.inputs[axis_input], len(op.outputs[0].shape or ()))
    if axis is None:
        return None
    if op.type == "ConcatV2":
        sizes = [s[axis] if s else "?" for s in map(_static_shape, op.inputs[:-1])]
        return _CONCAT.format(axis=axis, sizes=" + ".join(map(str, sizes)))
    return _CUMULATIVE.format(axis=axis, what="sum" if op.type == "Cumsum" else "product")


def _constant_axis(tensor, rank: int) -> Optional[int]:
    import tensorflow as tf

    value = tf.get_static_value(tensor)
    if value is None or not rank:
        return None
    return int(value) % rank


def is_kernel_piece(shape: Sequence[int], kernel: Sequence[int], num_cores: int) -> bool:
    """Whether a gathered ``shape`` is ``kernel`` tiled over the cores: the same channel
    axes, each window axis padded by less than ``num_cores`` (XLA gathers one axis at a
    time, so an axis may still hold a piece, smaller than the kernel's).

    >>> is_kernel_piece([4, 3, 256, 256], [3, 3, 256, 256], 4)
    True
    >>> is_kernel_piece([2, 4, 256, 256], [3, 3, 256, 256], 4)   # the first axis gathered
    True
    >>> is_kernel_piece([2, 64, 64, 256], [3, 3, 256, 256], 4)
    False
    """
    shape, kernel = list(shape), list(kernel)
    if not kernel or len(shape) != len(kernel) or shape[-2:] != kernel[-2:]:
        return False
    return all(1 <= s < k + num_cores for s, k in zip(shape[:-2], kernel[:-2]))


def _convolution_kind(op) -> Optional[str]:
    """None for a plain stride-1 convolution (or its gradient), else what makes it
    different."""
    if op.type.startswith("Depthwise"):
        return "depthwise"
    if "BackpropInput" in op.type and not _is_gradient_name(op.name):
        return "transposed"
    strides, dilations = op.get_attr("strides"), op.get_attr("dilations")
    if any(s != 1 for s in strides):
        return "strided"
    if any(d != 1 for d in dilations):
        return "dilated"
    return None


def _is_gradient_name(name: str) -> bool:
    """Whether an op named ``name`` is in a gradient: TensorFlow names those
    ``gradient_tape/...`` in a step, ``.../gradients/..._grad/...`` inside a nested or
    compiled function (Keras' train function, a layer's own ``tf.function``).

    >>> _is_gradient_name("PartitionedCall_6/gradients/Conv3D_grad/Conv3DBackpropInputV2")
    True
    >>> _is_gradient_name("model/up/conv3d_transpose")
    False
    """
    if name.startswith(op_source.GRADIENT_PREFIX):
        return True
    return any(part in ("gradients", "gradient_tape") or part.endswith("_grad")
               for part in name.split("/")[:-1])


def _level_and_window(op) -> Optional[Tuple[List[int], List[int]]]:
    """The spatial shape of a convolution's input (or of its gradient's) and its window,
    None where they are not static (or the op has no tensors to read them from)."""
    if not (getattr(op, "inputs", None) and getattr(op, "outputs", None)):
        return None
    if "BackpropInput" in op.type:  # its result has the input's shape
        sizes, window = _static_shape(op.outputs[0]), _static_shape(op.inputs[1])
    elif "BackpropFilter" in op.type:  # its result has the kernel's shape
        sizes, window = _static_shape(op.inputs[0]), _static_shape(op.outputs[0])
    else:  # (input, kernel)
        sizes, window = _static_shape(op.inputs[0]), _static_shape(op.inputs[1])
    if sizes is None or window is None or len(sizes) != len(window):
        return None
    return [int(s) for s in sizes[1:-1]], [int(w) for w in window[:-2]]


def _cross_entropy(op) -> Optional[str]:
    """The Keras loss whose ops (by type or name scope) these are, or None."""
    name = f"{op.type}/{op.name}".lower()
    if "categorical_crossentropy" not in name and "softmaxcrossentropywithlogits" not in name:
        return None
    sparse = "sparse" in name
    return "sparse_categorical_crossentropy" if sparse else "categorical_crossentropy"


def _static_shape(tensor) -> Optional[List[int]]:
    dims = tensor.shape.as_list() if tensor.shape.rank is not None else None
    return dims if dims is not None and None not in dims else None


def merged_axes(before: Sequence[int], after: Sequence[int]) -> List[int]:
    """The axes of ``before`` that a reshape to ``after`` merges into one (the first such
    group, size-1 axes included), or [] when it merges none."""
    i = j = 0
    while i < len(before) and j < len(after):
        start, size, target = i, before[i], after[j]
        i += 1
        while size < target and i < len(before):
            size *= before[i]
            i += 1
        if size != target:  # the reshape splits an axis here, or the sizes do not line up
            return []
        if i - start > 1 and sum(before[k] > 1 for k in range(start, i)) > 1:
            return list(range(start, i))
        j += 1
    return []


def contiguous_spec(before: Sequence[int], after: Sequence[int],
                    num_cores: int) -> Optional[List[int]]:
    """The spec for ``before`` that keeps a reshape to ``after`` local: only the outermost
    merged axis (of size > 1) split ``num_cores`` ways. None when that axis is the batch
    (axis 0) or does not divide, or nothing is merged.

    >>> contiguous_spec([2, 32, 32, 5], [2048, 5], 4) is None   # merges the batch
    True
    """
    axes = [a for a in merged_axes(before, after) if before[a] > 1]
    if not axes or axes[0] == 0 or before[axes[0]] % num_cores:
        return None
    spec = [1] * len(before)
    spec[axes[0]] = num_cores
    return spec
