"""Resample volumes to a target voxel spacing and back to an exact shape (scipy.ndimage).

Scans come at their scanner's spacing (0.7 x 0.7 x 2.5 mm, 1 mm isotropic, ...); a model
trained at one spacing sees each structure at one size in voxels. ``resample_to_spacing``
brings a volume from its ``spacing`` (a NIfTI header's: ``spatial_tf.data.voxel_spacing``)
to a target spacing with ``scipy.ndimage.zoom``: ``order=1`` (linear) for images,
``order=0`` (nearest neighbour) for label maps. The new shape is ``resampled_shape``: on
each axis ``round(size * spacing / target)``, at least 1; the result's real spacing,
``size * spacing / new_size``, is the target's to within half a voxel over the volume.
``resample_to_shape`` goes back to an exact shape (a predicted mask to its input's
grid). Both align the **outer edges** of the two grids (scipy's ``grid_mode=True``):
voxel ``j`` of the result is centred at voxel coordinate ``(j + 0.5) * s - 0.5`` of the
input, ``s = old size / new size``, so a volume covers the same extent in space before and
after, and ``resampled_affine`` gives the affine that keeps it in place. Values beyond the
outer voxel centres repeat the edge voxel. No smoothing precedes downsampling.

Nearest-neighbour resampling by a whole factor is exact both ways: each voxel becomes a
``k x k x k`` block, and the block's voxels go back to it.

>>> import numpy as np
>>> labels = np.array([[[0, 1], [2, 1]]], np.int32)                # 1 x 2 x 2 at 1 mm
>>> fine = resample_to_spacing(labels, (1, 1, 1), (0.5, 0.5, 0.5), order=0)
>>> fine.shape, fine[0, :, :].tolist()
((2, 4, 4), [[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 1, 1], [2, 2, 1, 1]])
>>> np.array_equal(resample_to_shape(fine, labels.shape, order=0), labels)
True
"""
from typing import Any, Sequence, Tuple
import math
import numbers

import numpy as np

__all__ = ["resampled_shape", "resample_to_spacing", "resample_to_shape", "resampled_affine"]


def _scipy_ndimage():
    try:
        import scipy.ndimage
    except ImportError as e:
        raise ImportError("Resampling volumes needs scipy, which is not installed. Fix: "
                          "pip install 'spatial-tf[data]' (or pip install scipy).") from e
    return scipy.ndimage


def _sizes(values: Any, name: str, where: str, rank: int) -> Tuple[float, ...]:
    """``values`` as ``rank`` positive finite floats (ValueError otherwise)."""
    try:
        values = tuple(values)
    except TypeError:
        values = (values,)
    if len(values) != rank or any(isinstance(v, bool) or not isinstance(v, numbers.Real)
                                  or not math.isfinite(v) or v <= 0 for v in values):
        raise ValueError(f"{where}: {name} is {values}; expected {rank} positive voxel sizes "
                         f"in mm, one per axis, e.g. {(1.0,) * rank}.")
    return tuple(float(v) for v in values)


def resampled_shape(shape: Sequence[int], spacing: Sequence[float],
                    target: Sequence[float]) -> Tuple[int, ...]:
    """The shape of a volume of ``shape`` at ``spacing`` resampled to ``target``: on each
    axis ``size * spacing / target`` rounded to the nearest whole number (halves up), at
    least 1.

    >>> resampled_shape((197, 233, 189), (1, 1, 1), (4, 4, 4))
    (49, 58, 47)
    >>> resampled_shape((512, 512, 137), (0.7, 0.7, 2.5), (1.5, 1.5, 1.5))
    (239, 239, 228)
    """
    shape = tuple(int(s) for s in shape)
    spacing = _sizes(spacing, "spacing", "resampled_shape", len(shape))
    target = _sizes(target, "target", "resampled_shape", len(shape))
    # rounded to 6 places first: 5 x 0.7 / 1.4 is 2.5, not 2.4999999999999996
    return tuple(max(1, math.floor(round(n * s / t, 6) + 0.5))
                 for n, s, t in zip(shape, spacing, target))


def resample_to_shape(volume: Any, shape: Sequence[int], *, order: int) -> np.ndarray:
    """``volume`` resampled to exactly ``shape``, the grids' outer edges aligned
    (``scipy.ndimage.zoom`` with ``grid_mode=True``); ``order`` 0 (nearest neighbour, for
    label maps: no new values) or 1 (linear, for images). Keeps the dtype.

    >>> import numpy as np
    >>> resample_to_shape(np.array([0.0, 1.0, 2.0, 3.0], np.float32), (2,), order=1).tolist()
    [0.5, 2.5]
    """
    volume = np.asarray(volume)
    shape = tuple(shape)
    if len(shape) != volume.ndim or any(isinstance(s, bool) or not isinstance(s, numbers.Integral)
                                        or s < 1 for s in shape):
        raise ValueError(f"resample_to_shape: shape is {shape}; expected {volume.ndim} sizes "
                         f">= 1, one per axis of the volume of shape {volume.shape}.")
    if isinstance(order, bool) or order not in (0, 1):
        raise ValueError(f"resample_to_shape: order is {order!r}; expected 0 (nearest "
                         f"neighbour, for label maps) or 1 (linear, for images).")
    if volume.size == 0:
        raise ValueError(f"resample_to_shape: the volume has shape {volume.shape}; expected "
                         f"at least one voxel on each axis.")
    shape = tuple(int(s) for s in shape)
    if shape == volume.shape:
        return volume.copy()
    zoom = [new / old for new, old in zip(shape, volume.shape)]
    out = _scipy_ndimage().zoom(volume, zoom, order=order, mode="nearest", grid_mode=True)
    assert out.shape == shape, (out.shape, shape)  # zoom rounds size * (new / old): exact
    return out


def resample_to_spacing(volume: Any, spacing: Sequence[float], target: Sequence[float], *,
                        order: int) -> np.ndarray:
    """``volume`` (voxels of ``spacing`` mm, per array axis) resampled to voxels of
    ``target`` mm: the shape ``resampled_shape`` gives, ``order`` 1 (linear) for images,
    0 (nearest neighbour) for label maps. Undo it with ``resample_to_shape(result,
    volume.shape, order=0)`` (a predicted mask back on its input's grid).

    >>> import numpy as np
    >>> ramp = np.arange(8, dtype=np.float32).reshape(8, 1, 1)   # 8 voxels of 1 mm
    >>> resample_to_spacing(ramp, (1, 1, 1), (2, 1, 1), order=1).ravel().tolist()
    [0.5, 2.5, 4.5, 6.5]
    """
    volume = np.asarray(volume)
    shape = resampled_shape(volume.shape, _sizes(spacing, "spacing", "resample_to_spacing",
                                                 volume.ndim),
                            _sizes(target, "target", "resample_to_spacing", volume.ndim))
    return resample_to_shape(volume, shape, order=order)


def resampled_affine(affine: Any, shape: Sequence[int], new_shape: Sequence[int]) -> np.ndarray:
    """The voxel-to-world affine of a volume of ``shape`` (with ``affine``) resampled to
    ``new_shape`` by this module: the same extent in space, voxels ``old size / new size``
    times as large, voxel ``j``'s centre where ``(j + 0.5) * s - 0.5`` of the old grid is.

    >>> import numpy as np
    >>> resampled_affine(np.diag([2.0, 2.0, 2.0, 1.0]), (4, 4, 4), (2, 4, 8)).tolist()
    [[4.0, 0.0, 0.0, 1.0], [0.0, 2.0, 0.0, 0.0], [0.0, 0.0, 1.0, -0.5], [0.0, 0.0, 0.0, 1.0]]
    """
    affine = np.asarray(affine, np.float64)
    if affine.shape != (4, 4) or len(shape) != 3 or len(new_shape) != 3:
        raise ValueError(f"resampled_affine: affine has shape {affine.shape}, shape {shape}, "
                         f"new_shape {new_shape}; expected a 4 x 4 affine and 3 sizes each.")
    step = np.array([old / new for old, new in zip(shape, new_shape)], np.float64)
    voxels = np.eye(4)
    voxels[:3, :3] = np.diag(step)
    voxels[:3, 3] = (step - 1) / 2
    return affine @ voxels
