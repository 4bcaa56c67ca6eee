"""Resizes by integer factors that keep a split: ``resize``, ``downsample``, ``upsample``,
and the factor-2 bilinear ``halve`` and ``double``.

XLA partitions TensorFlow's resize ops (``tf.image.resize``, Keras' ``Resizing`` and
``UpSampling2D(interpolation="bilinear")``) by gathering the whole image on every core,
and has no kernel for ``ResizeArea``. Yet with half-pixel centres (what they use,
antialias off) a resize by an integer factor ``k`` along an axis is local:

- down by ``k``: ``"area"`` is the mean of each block of ``k`` inputs, ``"bilinear"`` the
  mean of the block's middle one (odd ``k``) or two (even ``k``), ``"nearest"`` its input
  ``k // 2``;
- up by ``k``: ``"nearest"`` and ``"area"`` repeat each input ``k`` times; ``"bilinear"``
  gives the ``r``-th copy of an input weight ``1 - |d|`` and its neighbour on ``d``'s
  side ``|d|``, ``d = (2r + 1 - k) / 2k`` (the edges clamped): a one-voxel halo under a
  split.

These compute the same values with reshapes, slices, means and fixed weights, which
XLA partitions with no gather as long as each core's share of a downsampled axis is a
multiple of its factor; each axis is resized in turn (the methods are separable), so
volumes (batch, depth, height, width, channels) resize as images do.

>>> import numpy as np, tensorflow as tf
>>> x = tf.constant(np.arange(36.0).reshape(1, 6, 6, 1))
>>> bool(np.allclose(resize(x, (2, 18)), tf.image.resize(x, (2, 18))))
True
>>> bool(np.allclose(halve(x), tf.image.resize(x, (3, 3))))
True
>>> factor_hint(224, 100)
'224 -> 100 is not an integer factor: resize to 112 (1/2) or 56 (1/4)'
"""
from typing import List, Optional, Sequence, Tuple, Union

import tensorflow as tf

from spatial_tf import frames

frames.register_exclusion(__file__)

__all__ = ["resize", "downsample", "upsample", "halve", "double", "factor_hint", "METHODS"]

METHODS = ("bilinear", "nearest", "area")
"""The methods of ``tf.image.resize`` these compute (half-pixel centres, no antialias)."""

Factors = Union[int, Sequence[int]]


def resize(x, size: Sequence[int], method: str = "bilinear"):
    """``x`` (batch, *spatial, channels) resized to ``size`` (one size per spatial axis,
    each a multiple or a divisor of the axis's), as ``tf.image.resize(x, size, method)``
    gives (for a volume, as it gives applied to each pair of axes).

    >>> resize(tf.zeros([2, 6, 8, 8, 1]), (3, 24, 8)).shape
    TensorShape([2, 3, 24, 8, 1])
    """
    x = tf.convert_to_tensor(x)
    spatial = _axes(x, None, "resize")
    sizes = _positive_ints(size, "size", "resize", len(spatial))
    _check_method(x, method, "resize")
    for axis, m in zip(spatial, sizes):
        n = x.shape[axis]
        hint = factor_hint(n, m)
        if hint:
            raise ValueError(f"resize: axis {axis} of shape {list(x.shape)}: {hint}. Fix: "
                             f"resize to such a size here, or use tf.image.resize, which "
                             f"XLA gathers whole on every core.")
        if m > n:
            x = _upsample(x, m // n, method, [axis], "resize")
        elif m < n:
            x = _downsample(x, n // m, method, [axis], "resize")
    return x


def downsample(x, factors: Factors, method: str = "bilinear",
               axes: Optional[Sequence[int]] = None):
    """``x`` (batch, *spatial, channels) made ``factors`` times smaller along ``axes``
    (default: every spatial axis; one factor for all, or one per axis), as
    ``tf.image.resize`` to those sizes gives; each size must be a multiple of its factor,
    and under a split so must each core's share (else XLA moves the pieces).

    >>> downsample(tf.zeros([1, 12, 9, 2]), (4, 3), "area").shape
    TensorShape([1, 3, 3, 2])
    """
    return _downsample(tf.convert_to_tensor(x), factors, method, axes, "downsample")


def _downsample(x, factors, method, axes, name):
    for axis, k in _axis_factors(x, factors, method, axes, name):
        n = x.shape[axis]
        if n % k:
            sizes = " or ".join(str(s) for s in (n - n % k, n - n % k + k) if s)
            raise ValueError(
                f"{name}: axis {axis} of shape {list(x.shape)} has size {n}, which "
                f"factor {k} does not divide; expected a multiple of {k}. Fix: pad or crop "
                f"it to {sizes} first.")
        first, count = {"area": (0, k), "nearest": (k // 2, 1),
                        "bilinear": ((k - 1) // 2, 2 - k % 2)}[method]
        blocks = _window(_reshaped(x, axis, 1, [n // k, k]), axis + 1, first, count)
        x = tf.reduce_mean(blocks, axis + 1) if count > 1 else tf.squeeze(blocks, axis + 1)
    return x


def upsample(x, factors: Factors, method: str = "bilinear",
             axes: Optional[Sequence[int]] = None):
    """``x`` (batch, *spatial, channels) made ``factors`` times larger along ``axes``
    (default: every spatial axis; one factor for all, or one per axis), as
    ``tf.image.resize`` to those sizes gives (``"bilinear"``: edges clamped).

    >>> upsample(tf.constant([[[0.0], [4.0]]]), 4)[0, :, 0].numpy().tolist()
    [0.0, 0.0, 0.5, 1.5, 2.5, 3.5, 4.0, 4.0]
    """
    return _upsample(tf.convert_to_tensor(x), factors, method, axes, "upsample")


def _upsample(x, factors, method, axes, name):
    for axis, k in _axis_factors(x, factors, method, axes, name):
        copies = _bilinear_copies(x, axis, k) if method == "bilinear" else [x] * k
        x = _reshaped(tf.stack(copies, axis + 1), axis, 2, [x.shape[axis] * k])
    return x


def halve(x, axes: Optional[Sequence[int]] = None):
    """``x`` (batch, *spatial, channels) bilinearly halved along ``axes`` (default: every
    spatial axis), as ``tf.image.resize`` to half the size gives; each axis's size must
    be even, and a split of it must give each core an even share."""
    x = tf.convert_to_tensor(x)
    for axis in _axes(x, axes, "halve"):
        n = x.shape[axis]
        if n % 2:
            raise ValueError(f"halve: axis {axis} of shape {list(x.shape)} has odd size {n}; "
                             f"expected an even size. Fix: pad or crop it to {n - 1} or "
                             f"{n + 1} first, or use tf.image.resize.")
    return _downsample(x, 2, "bilinear", axes, "halve")


def double(x, axes: Optional[Sequence[int]] = None):
    """``x`` (batch, *spatial, channels) bilinearly doubled along ``axes`` (default: every
    spatial axis), as ``tf.image.resize`` to twice the size gives (half-pixel centres, the
    edges clamped)."""
    return _upsample(tf.convert_to_tensor(x), 2, "bilinear", axes, "double")


def factor_hint(n: int, m: int) -> str:
    """``""`` when an axis of size ``n`` resizes to ``m`` by an integer factor (or not at
    all); else what to resize it to instead, the nearest such sizes first.

    >>> factor_hint(16, 48), factor_hint(10, 12)
    ('', '10 -> 12 is not an integer factor: resize to 10 (as it is) or 20 (x2)')
    """
    if m % n == 0 or n % m == 0:
        return ""
    sizes = {n // d for d in range(1, n + 1) if n % d == 0} | {n * (m // n), n * (m // n + 1)}
    below = max((s for s in sizes if s < m), default=None)
    above = min(s for s in sizes if s > m)
    near = sorted((s for s in (below, above) if s is not None), key=lambda s: (abs(s - m), s))
    named = [f"{s} ({'as it is' if s == n else f'1/{n // s}' if s < n else f'x{s // n}'})"
             for s in near]
    return f"{n} -> {m} is not an integer factor: resize to {' or '.join(named)}"


def _bilinear_copies(x, axis, k) -> List:
    """The ``k`` outputs of each input along ``axis``: ``1 - |d|`` of it and ``|d|`` of
    its neighbour on ``d``'s side, the edges clamped."""
    before, after = _clamped_neighbour(x, axis, -1), _clamped_neighbour(x, axis, 1)
    copies = []
    for r in range(k):
        d = (2 * r + 1 - k) / (2 * k)
        copies.append(x if d == 0 else (1 - abs(d)) * x + abs(d) * (before if d < 0 else after))
    return copies


def _clamped_neighbour(x, axis, side):
    """Each input's neighbour on ``side`` (-1 before, 1 after) along ``axis``, the edge
    input its own. Its gradient is the same form on the other side, which XLA partitions
    with a halo exchange as it does the forward (TensorFlow's own slice gradient, a
    dynamic update slice, XLA gathers whole on every core)."""
    n, rank = x.shape[axis], x.shape.rank
    position = tf.reshape(tf.range(n), [n if a == axis else 1 for a in range(rank)])
    edge = tf.cast(tf.equal(position, 0 if side < 0 else n - 1), x.dtype)

    @tf.custom_gradient
    def neighbour(x):
        def gradient(dy):
            return _shifted(dy, axis, -side) + edge * dy
        return _shifted(x, axis, side) + edge * x, gradient

    return neighbour(x)


def _shifted(x, axis, side):
    """``x[i + side]`` at each ``i`` along ``axis``, zero past the ends."""
    padded = tf.pad(x, [[1, 1] if a == axis else [0, 0] for a in range(x.shape.rank)])
    return _window(padded, axis, 1 + side, x.shape[axis])


def _reshaped(x, axis, span, sizes):
    """``x`` with its ``span`` axes from ``axis`` on reshaped to ``sizes`` (an unknown
    batch stays unknown)."""
    dims = list(x.shape)
    dims[axis:axis + span] = sizes
    return tf.reshape(x, [-1 if d is None else d for d in dims])


def _window(x, axis, start, size):
    begin = [start if a == axis else 0 for a in range(x.shape.rank)]
    sizes = [size if a == axis else -1 for a in range(x.shape.rank)]
    return tf.slice(x, begin, sizes)


def _axis_factors(x, factors, method, axes, name) -> List[Tuple[int, int]]:
    """``(axis, factor)`` for each axis to resize, checked (factor 1 left out)."""
    chosen = _axes(x, axes, name)
    _check_method(x, method, name)
    if isinstance(factors, int) and not isinstance(factors, bool):
        factors = [factors] * len(chosen)
    ks = _positive_ints(factors, "factors", name, len(chosen))
    return [(axis, k) for axis, k in zip(chosen, ks) if k != 1]


def _check_method(x, method, name):
    if method not in METHODS:
        raise ValueError(f"{name}: method is {method!r}; expected one of "
                         f"{', '.join(map(repr, METHODS))}. Fix: pass one of those (other "
                         f"methods: tf.image.resize, which XLA gathers whole on every core).")
    if method != "nearest" and not x.dtype.is_floating:
        raise ValueError(f"{name}: x has dtype {x.dtype.name}; expected a floating dtype for "
                         f"method {method!r}. Fix: tf.cast(x, tf.float32) first, or "
                         f"method='nearest'.")


def _positive_ints(values, what, name, count=None) -> Tuple[int, ...]:
    ok = isinstance(values, (list, tuple)) and all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values)
    if not ok or (count is not None and len(values) != count):
        expected = f"{count} positive ints" if count is not None else "positive ints"
        raise ValueError(f"{name}: {what} is {values!r}; expected {expected}, one per "
                         f"resized spatial axis. Fix: e.g. {what}={tuple([2] * (count or 2))}.")
    return tuple(int(v) for v in values)


def _axes(x, axes, name):
    rank = x.shape.rank
    if rank is None or rank < 3:
        raise ValueError(f"{name}: x has shape {x.shape}; expected (batch, *spatial, "
                         f"channels), rank 3 or more. Fix: add the batch and channel axes.")
    spatial = range(1, rank - 1)
    chosen = list(spatial) if axes is None else [int(a) for a in axes]
    for axis in chosen:
        if axis not in spatial or x.shape[axis] is None:
            raise ValueError(f"{name}: axis {axis} of shape {list(x.shape)} is not a spatial "
                             f"axis of known size; expected axes among "
                             f"{list(spatial)}. Fix: axes={list(spatial)}.")
    return chosen
