"""Keras layers that resize by integer factors and keep a split, and the form
``partition_friendly`` gives Keras' own resize layers.

``LocalResizing(size, interpolation)`` is Keras' ``Resizing`` for images and volumes,
``LocalUpSampling2D`` / ``LocalUpSampling3D`` are Keras' ``UpSampling2D`` /
``UpSampling3D``: the same values (``tf.image.resize``'s, half-pixel centres), computed
as ``spatial_tf.resize`` computes them, so XLA partitions them without gathering the
image on every core. Each factor must be an integer; channels last.

``replacement(layer)`` is what ``partition_friendly`` does to a built Keras ``Resizing``,
``UpSampling2D`` or ``UpSampling3D``: the call computing it as above, or, for a setting
with no local form, the reason and what to change.

>>> import numpy as np
>>> LocalResizing((4, 12))(np.zeros((1, 8, 4, 3))).shape
TensorShape([1, 4, 12, 3])
>>> import keras
>>> inputs = keras.Input((224, 224, 3))
>>> layer = keras.layers.Resizing(100, 100)
>>> _ = layer(inputs)
>>> print(replacement(layer).why)
Resizing 224 -> 100 (height) is not an integer factor: resize to 112 (1/2) or 56 (1/4) so partition_friendly can replace it
"""
import dataclasses
from typing import Callable, List, Optional, Sequence, Tuple

import keras
import tensorflow as tf

from spatial_tf import _tf_internals, frames, resize

frames.register_exclusion(__file__)

__all__ = ["LocalResizing", "LocalUpSampling2D", "LocalUpSampling3D", "Replacement",
           "replacement"]

_AXIS_NAMES = {2: ("height", "width"), 3: ("depth", "height", "width")}
_WHY = ("XLA gathers TensorFlow's resize ops whole on every core, and has no kernel for "
        "ResizeArea; by integer factors, reshapes, slices and fixed weights give the same "
        "values with a one-voxel halo at most")


@keras.saving.register_keras_serializable(package="spatial_tf")
class LocalResizing(keras.layers.Layer):
    """Keras' ``Resizing`` for images (``size=(height, width)``) and volumes
    (``size=(depth, height, width)``) that keeps a split: each output size a multiple or
    a divisor of the input's, ``interpolation`` ``"bilinear"`` (default), ``"nearest"``
    or ``"area"``; ``spatial_tf.resize.resize``'s values, which are
    ``tf.image.resize``'s."""

    def __init__(self, size, interpolation="bilinear", **kwargs):
        super().__init__(**kwargs)
        self.size = _sizes(size, "LocalResizing", "size", (2, 3))
        self.interpolation = _interpolation(interpolation, "LocalResizing")

    def call(self, inputs):
        return resize.resize(inputs, self.size, self.interpolation)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], *self.size, input_shape[-1])

    def get_config(self):
        return {**super().get_config(), "size": list(self.size),
                "interpolation": self.interpolation}


class _LocalUpSampling(keras.layers.Layer):
    rank = 2

    def __init__(self, size=2, interpolation="nearest", **kwargs):
        super().__init__(**kwargs)
        name = type(self).__name__
        if isinstance(size, int) and not isinstance(size, bool):
            size = (size,) * self.rank
        self.size = _sizes(size, name, "size", (self.rank,))
        self.interpolation = _interpolation(interpolation, name)

    def call(self, inputs):
        return resize.upsample(inputs, self.size, self.interpolation)

    def compute_output_shape(self, input_shape):
        spatial = [None if n is None else n * k for n, k in zip(input_shape[1:-1], self.size)]
        return (input_shape[0], *spatial, input_shape[-1])

    def get_config(self):
        return {**super().get_config(), "size": list(self.size),
                "interpolation": self.interpolation}


@keras.saving.register_keras_serializable(package="spatial_tf")
class LocalUpSampling2D(_LocalUpSampling):
    """Keras' ``UpSampling2D`` (``size``: the integer factors of height and width) that
    keeps a split; ``interpolation`` ``"nearest"`` (default, the rows and columns
    repeated), ``"bilinear"`` or ``"area"``.

    >>> import numpy as np
    >>> LocalUpSampling2D((2, 3), "bilinear")(np.zeros((1, 4, 4, 1))).shape
    TensorShape([1, 8, 12, 1])
    """

    rank = 2


@keras.saving.register_keras_serializable(package="spatial_tf")
class LocalUpSampling3D(_LocalUpSampling):
    """Keras' ``UpSampling3D`` (``size``: the integer factors of depth, height and width)
    that keeps a split; ``interpolation`` ``"nearest"`` (default, Keras' only one),
    ``"bilinear"`` (trilinear: bilinear along each axis in turn) or ``"area"``."""

    rank = 3


@dataclasses.dataclass(frozen=True)
class Replacement:
    """What ``partition_friendly`` does to a Keras resize layer.

    Attributes:
      after: what the layer computes once changed, or ``"unchanged"``.
      why: the reason, and for a layer left as it is what to change.
      call: the layer's new ``call`` (None: left as it is).
    """

    after: str
    why: str
    call: Optional[Callable] = None


def replacement(layer) -> Replacement:
    """The ``Replacement`` for a built Keras 3 or tf_keras ``Resizing``, ``UpSampling2D``
    or ``UpSampling3D`` ``layer``."""
    name = type(layer).__name__
    problem = _setting_problem(layer)
    if problem:
        return Replacement("unchanged", f"{name} {problem} so partition_friendly can replace it")
    rank = 3 if name == "UpSampling3D" or _has_base(layer, "UpSampling3D") else 2
    method = str(getattr(layer, "interpolation", "nearest")).lower()
    target = _target(layer, rank)
    shapes = _input_shapes(layer, rank)
    for shape in shapes:
        for axis, n, m in _per_axis(shape, target):
            hint = resize.factor_hint(n, m)
            if hint:  # "224 -> 100 is not an integer factor: resize to ..."
                sizes, rest = hint.split(" is ", 1)
                return Replacement("unchanged", f"{name} {sizes} ({axis}) is {rest} so "
                                                f"partition_friendly can replace it")
    local = _local_call(layer, target, method, rank)
    where = (_factors_text(shapes[0], target) if shapes
             else "where each factor is an integer, else Keras' own")
    return Replacement(f"{name} as spatial_tf.resize computes it ({method}; {where})", _WHY,
                       local)


def _setting_problem(layer) -> str:
    """What in ``layer``'s settings has no local form, with the fix ('' for none)."""
    method = str(getattr(layer, "interpolation", "nearest")).lower()
    if method not in resize.METHODS:
        return (f"with interpolation={method!r} has no local form here: use 'bilinear', "
                f"'nearest' or 'area'")
    if getattr(layer, "antialias", False):
        return ("with antialias=True has no local form (downsampling, its filter is wider "
                "than the factor; upsampling, it changes nothing): drop antialias=True")
    for setting in ("crop_to_aspect_ratio", "pad_to_aspect_ratio"):
        if getattr(layer, setting, False):
            return (f"with {setting}=True {setting.split('_')[0]}s to the output's aspect "
                    f"ratio before it resizes: do that in the input pipeline (or resize to "
                    f"sizes of the input's aspect ratio) and drop {setting}")
    if getattr(layer, "data_format", "channels_last") != "channels_last":
        return "with data_format='channels_first' resizes other axes: use channels_last"
    return ""


def _target(layer, rank) -> Tuple[str, Tuple[int, ...]]:
    """``("size", sizes)`` for a ``Resizing``, ``("factors", factors)`` for an upsampling."""
    if hasattr(layer, "height") and hasattr(layer, "width"):
        return "size", (int(layer.height), int(layer.width))
    size = layer.size if isinstance(layer.size, (list, tuple)) else (layer.size,) * rank
    return "factors", tuple(int(k) for k in size)


def _per_axis(shape, target) -> List[Tuple[str, int, int]]:
    """``(axis name, input size, output size)`` per spatial axis."""
    kind, values = target
    sizes = values if kind == "size" else [n * k for n, k in zip(shape, values)]
    return list(zip(_AXIS_NAMES[len(shape)], shape, sizes))


def _factors_text(shape, target) -> str:
    parts = [f"{axis} {'x' if m >= n else '1/'}{max(m // n, n // m)}"
             for axis, n, m in _per_axis(shape, target)]
    return ", ".join(parts)


def _input_shapes(layer, rank) -> List[Tuple[int, ...]]:
    """The spatial sizes of each input the model calls ``layer`` on, where known (none
    for a layer called outside a functional graph)."""
    shapes = []
    for node in _tf_internals.inbound_nodes(layer):
        tensors = getattr(node, "input_tensors", None) or ()
        shape = tuple(getattr(tensors[0], "shape", ())) if tensors else ()
        if len(shape) == rank + 2 and None not in shape[1:-1]:
            shapes.append(tuple(int(n) for n in shape[1:-1]))
    return shapes


def _local_call(layer, target, method, rank):
    """The call computing ``layer`` as ``spatial_tf.resize`` does where it can (a floating,
    or for ``"nearest"`` any, batched channels-last tensor of known sizes, each factor an
    integer), else by ``layer``'s own call."""
    original = layer.call

    def call(inputs, *args, **kwargs):
        if (tf.is_tensor(inputs) and inputs.shape.rank == rank + 2
                and None not in inputs.shape[1:-1]
                and (inputs.dtype.is_floating or method == "nearest")):
            sizes = [m for _, _, m in _per_axis(tuple(inputs.shape[1:-1]), target)]
            if not any(resize.factor_hint(n, m) for n, m in zip(inputs.shape[1:-1], sizes)):
                return resize.resize(inputs, sizes, method)
        return original(inputs, *args, **kwargs)

    return call


def _has_base(layer, name) -> bool:
    return any(klass.__name__ == name for klass in type(layer).__mro__)


def _sizes(values, layer, what, ranks: Sequence[int]) -> Tuple[int, ...]:
    ok = isinstance(values, (list, tuple)) and len(values) in ranks and all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values)
    if not ok:
        names = " or ".join(str(_AXIS_NAMES[r]).replace("'", "") for r in ranks)
        raise ValueError(f"{layer}: {what} is {values!r}; expected positive ints {names}. "
                         f"Fix: e.g. {what}={(2,) * ranks[0]}.")
    return tuple(values)


def _interpolation(method, layer) -> str:
    if method not in resize.METHODS:
        raise ValueError(f"{layer}: interpolation is {method!r}; expected one of "
                         f"{', '.join(map(repr, resize.METHODS))}. Fix: pass one of those "
                         f"(Keras' own layer for the others, which XLA gathers whole on "
                         f"every core).")
    return method
