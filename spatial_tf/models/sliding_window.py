"""Sliding-window inference: a volume larger than one model call holds, predicted in tiles.

Tiles of a fixed shape cover the volume with some overlap; each tile's per-voxel class
scores are weighted by an importance map (highest at the tile's centre, so a voxel's
score comes mostly from the tiles that see the most context around it), summed, and
divided by the summed weights, as MONAI's ``sliding_window_inference`` does. The result
has the volume's exact spatial shape. ``predict_fn`` may run each tile split over the
cores of a replica (a step on ``spatial_tf.Emulator`` or a ``TPUStrategy``), so a volume
too large for one replica is predicted at the largest tile that fits.

>>> import numpy as np
>>> tile_positions((40, 16), (16, 16), overlap=0.25)
[(0, 0), (12, 0), (24, 0)]
>>> volume = np.arange(40 * 16, dtype=np.float32).reshape(40, 16, 1)
>>> scores = sliding_window_predict(lambda tiles: 2 * tiles, volume, (16, 16))
>>> scores.shape, bool(np.allclose(scores, 2 * volume))
((40, 16, 1), True)
"""
import itertools
import math
import numbers
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from spatial_tf.checks import check_int

__all__ = ["sliding_window_predict", "tile_positions", "blend_weights", "BLENDS"]

BLENDS = ("gaussian", "constant", "linear")

# sigma of the Gaussian importance map as a fraction of the tile's size per axis
# (MONAI's default sigma_scale, also nnU-Net's)
GAUSSIAN_SIGMA_SCALE = 0.125

_PREDICT = "sliding_window_predict"
_TILE_FIX = "e.g. tile_shape=(64, 64, 64), or the model's model.input_shape[1:-1]"


def tile_positions(volume_shape: Sequence[int], tile_shape: Sequence[int],
                   overlap: float = 0.25) -> List[Tuple[int, ...]]:
    """The start of every tile covering ``volume_shape``, in C order (last axis fastest).

    Along each axis, tiles start every ``floor(tile * (1 - overlap))`` voxels (at least
    1); the last one is shifted back to end at the volume's edge. An axis no larger than
    the tile has one tile at 0 (``sliding_window_predict`` zero-pads it to the tile).

    >>> tile_positions((32, 16), (16, 16), overlap=0.5)
    [(0, 0), (8, 0), (16, 0)]
    >>> tile_positions((20, 10), (16, 16), overlap=0.0)
    [(0, 0), (4, 0)]
    """
    where = "tile_positions"
    volume_shape = _sizes(volume_shape, "volume_shape", where,
                          "e.g. volume_shape=volume.shape[:-1]")
    tile_shape = _sizes(tile_shape, "tile_shape", where, _TILE_FIX)
    if len(volume_shape) != len(tile_shape):
        raise ValueError(
            f"{where}: volume_shape {volume_shape} has {len(volume_shape)} axes but "
            f"tile_shape {tile_shape} has {len(tile_shape)}; expected one tile size per "
            f"spatial axis of the volume. Fix: give both without the batch and channel "
            f"axes, e.g. volume_shape=volume.shape[:-1]."
        )
    overlap = _check_overlap(overlap, where)
    return list(itertools.product(*(
        _axis_starts(size, tile, overlap) for size, tile in zip(volume_shape, tile_shape))))


def _axis_starts(size: int, tile: int, overlap: float) -> List[int]:
    if size <= tile:
        return [0]
    stride = max(1, math.floor(tile * (1 - overlap) + 1e-9))  # 16 * 0.75 is 12, not 11
    return list(range(0, size - tile, stride)) + [size - tile]


def blend_weights(tile_shape: Sequence[int], blend: str = "gaussian") -> np.ndarray:
    """The importance map of one tile (float32, ``tile_shape``, largest weight 1).

    ``"gaussian"``: a Gaussian centred on the tile with sigma 1/8 of the tile per axis
    (MONAI's default; a 3D tile's corner voxels weigh at least exp(-24), about 4e-11,
    never 0);
    ``"linear"``: a tent per axis falling from the centre to ``1 / ceil(size / 2)`` at
    the border voxels; ``"constant"``: all 1 (a plain average of the overlapping
    tiles). The 3D maps are products of the per-axis ones.

    >>> blend_weights((4,), "linear")
    array([0.5, 1. , 1. , 0.5], dtype=float32)
    >>> blend_weights((2, 2), "constant")
    array([[1., 1.],
           [1., 1.]], dtype=float32)
    """
    tile_shape = _sizes(tile_shape, "tile_shape", "blend_weights", _TILE_FIX)
    _check_blend(blend, "blend_weights")
    weights = np.ones((), np.float64)
    for size in tile_shape:
        i = np.arange(size, dtype=np.float64)
        if blend == "gaussian":
            sigma = GAUSSIAN_SIGMA_SCALE * size
            axis = np.exp(-0.5 * ((i - (size - 1) / 2) / sigma) ** 2)
        elif blend == "linear":
            axis = np.minimum(i + 1, size - i)
        else:
            axis = np.ones(size)
        weights = np.multiply.outer(weights, axis / axis.max())
    return weights.astype(np.float32)


def sliding_window_predict(predict_fn: Callable[[np.ndarray], Any], volume: Any,
                           tile_shape: Sequence[int], *, overlap: float = 0.25,
                           blend: str = "gaussian", batch_size: int = 1,
                           progress: bool = False) -> np.ndarray:
    """Per-voxel class scores of ``volume``, predicted tile by tile and blended.

    Args:
      predict_fn: maps a batch of tiles ``(batch_size, *tile_shape, channels)`` (NumPy,
        the volume's dtype) to per-voxel class scores ``(batch_size, *tile_shape,
        classes)`` (NumPy or a tensor), e.g. a Keras model's ``predict_on_batch`` or
        ``lambda x: emulator.run(step, args=(tf.constant(x),))`` with a ``step`` that
        splits its input, so each tile runs split over the cores. It always gets
        exactly ``batch_size`` tiles (the last batch is filled up with zero tiles whose
        scores are dropped), so a compiled step is traced once.
      volume: one example, ``(*spatial, channels)``, e.g. ``(D, H, W, 1)``.
      tile_shape: the spatial size of a tile, e.g. the model's training shape
        ``model.input_shape[1:-1]``. An axis of the volume smaller than the tile is
        zero-padded at its end to the tile, and the result cropped back.
      overlap: the fraction of a tile (per axis) its neighbour shares, in ``[0, 1)``.
      blend: how overlapping scores are weighted: ``"gaussian"``, ``"linear"`` or
        ``"constant"`` (see ``blend_weights``).
      batch_size: tiles per ``predict_fn`` call.
      progress: show a tqdm progress bar over the tiles on stderr
        (``pip install "spatial-tf[train]"``).

    Returns:
      float32 scores ``(*spatial, classes)`` (float64 if ``predict_fn`` returns
      float64): the weighted mean of every tile's scores at each voxel. Blend logits or
      probabilities, then take the argmax for a mask.

    A model whose output does not depend on where the tile starts (convolutions only)
    gives the whole-volume result wherever every covering tile holds the voxel's whole
    receptive field; a U-Net with ``depth`` levels needs tile starts that are multiples
    of ``2 ** (depth - 1)`` for that (a stride ``tile * (1 - overlap)`` and a volume
    size that are such multiples, e.g. a volume padded as for training).

    >>> import numpy as np
    >>> volume = np.ones((24, 24, 8, 1), np.float32)
    >>> scores = sliding_window_predict(lambda x: np.concatenate([x, -x], -1), volume,
    ...                                 (16, 16, 8), batch_size=2)
    >>> scores.shape, float(scores.min()), float(scores.max())
    ((24, 24, 8, 2), -1.0, 1.0)
    """
    volume, tile_shape, overlap, batch_size = _check_arguments(
        predict_fn, volume, tile_shape, overlap, blend, batch_size)
    spatial = volume.shape[:-1]
    padded = tuple(max(s, t) for s, t in zip(spatial, tile_shape))
    if padded != spatial:
        volume = np.pad(volume, [(0, p - s) for p, s in zip(padded, spatial)] + [(0, 0)])
    starts = tile_positions(padded, tile_shape, overlap)
    bar = _progress_bar(len(starts)) if progress else None
    try:
        scores = _blend_tiles(predict_fn, volume, tile_shape, starts,
                              blend_weights(tile_shape, blend), batch_size, bar)
    finally:
        if bar is not None:
            bar.close()
    return scores[tuple(slice(s) for s in spatial)]


def _check_arguments(predict_fn: Any, volume: Any, tile_shape: Any, overlap: Any, blend: Any,
                     batch_size: Any) -> Tuple[np.ndarray, Tuple[int, ...], float, int]:
    """``sliding_window_predict``'s ``(volume, tile_shape, overlap, batch_size)`` checked."""
    if not callable(predict_fn):
        raise TypeError(
            f"{_PREDICT}: predict_fn is {type(predict_fn).__name__}; expected a function "
            f"from a batch of tiles (batch, *tile_shape, channels) to class scores (batch, "
            f"*tile_shape, classes). Fix: pass e.g. model.predict_on_batch, or lambda x: "
            f"emulator.run(step, args=(tf.constant(x),))."
        )
    volume = np.asarray(volume)
    tile_shape = _sizes(tile_shape, "tile_shape", _PREDICT, _TILE_FIX)
    _check_volume(volume, tile_shape)
    overlap = _check_overlap(overlap, _PREDICT)
    _check_blend(blend, _PREDICT)
    batch_size = check_int(batch_size, "batch_size", "batch_size=1", where=_PREDICT)
    return volume, tile_shape, overlap, batch_size


def _blend_tiles(predict_fn: Callable[[np.ndarray], Any], volume: np.ndarray,
                 tile_shape: Tuple[int, ...], starts: List[Tuple[int, ...]],
                 weights: np.ndarray, batch_size: int, bar: Any) -> np.ndarray:
    """The weighted mean of the scores of the tiles at ``starts`` at every voxel of
    ``volume`` (which holds every tile whole), in the scores' dtype."""
    groups = [starts[i:i + batch_size] for i in range(0, len(starts), batch_size)]
    first = _predict_tiles(predict_fn, volume, tile_shape, groups[0], batch_size, None)
    scores = np.zeros(volume.shape[:-1] + first.shape[-1:], first.dtype)
    total = np.zeros(volume.shape[:-1], first.dtype)  # the summed weights
    weights = weights.astype(first.dtype)
    for i, group in enumerate(groups):
        out = first if i == 0 else _predict_tiles(predict_fn, volume, tile_shape, group,
                                                  batch_size, scores)
        for start, tile_scores in zip(group, out):
            window = _window(start, tile_shape)
            scores[window] += tile_scores * weights[..., None]
            total[window] += weights
        if bar is not None:
            bar.update(len(group))
    scores /= total[..., None]
    return scores


def _predict_tiles(predict_fn: Callable[[np.ndarray], Any], volume: np.ndarray,
                   tile_shape: Tuple[int, ...], group: List[Tuple[int, ...]],
                   batch_size: int, scores: Optional[np.ndarray]) -> np.ndarray:
    """``predict_fn``'s checked scores of the tiles at ``group``, filled up with zero
    tiles to ``batch_size`` (their scores follow those of ``group``)."""
    tiles = [volume[_window(s, tile_shape)] for s in group]
    tiles += [np.zeros_like(tiles[0])] * (batch_size - len(group))
    batch = np.stack(tiles)
    return _check_scores(predict_fn(batch), batch.shape, scores)


def _window(start: Tuple[int, ...], tile_shape: Tuple[int, ...]) -> Tuple[slice, ...]:
    return tuple(slice(s, s + t) for s, t in zip(start, tile_shape))


def _sizes(value: Any, name: str, where: str, fix: str) -> Tuple[int, ...]:
    try:
        sizes = tuple(value)
    except TypeError:
        sizes = ()
    if not sizes or not all(isinstance(s, numbers.Integral) and not isinstance(s, bool)
                            for s in sizes) or min(int(s) for s in sizes) < 1:
        raise ValueError(
            f"{where}: {name} is {value!r}; expected one positive int per spatial axis "
            f"(no batch or channel axis). Fix: {fix}."
        )
    return tuple(int(s) for s in sizes)


def _check_volume(volume: np.ndarray, tile_shape: Tuple[int, ...]) -> None:
    rank = len(tile_shape)
    if volume.ndim != rank + 1:
        if volume.ndim == rank + 2 and volume.shape[0] == 1:
            fix = "drop the batch axis and predict one example at a time (volume[0], ...)"
        elif volume.ndim == rank:  # a volume without channels, or channels in tile_shape
            fix = (f"add a channel axis at the end (volume[..., None]) if the volume has "
                   f"none, else leave the channels out of tile_shape (tile_shape="
                   f"{tile_shape[:-1]})")
        else:
            fix = (f"give tile_shape {max(volume.ndim - 1, 1)} sizes, one per spatial axis "
                   f"of the volume (a volume has no batch axis)")
        raise ValueError(
            f"{_PREDICT}: volume has shape {volume.shape} and tile_shape is {tile_shape}; "
            f"expected a volume of {rank} spatial axes then channels ({rank + 1} axes). "
            f"Fix: {fix}."
        )
    if volume.dtype.kind not in "biuf":
        raise ValueError(
            f"{_PREDICT}: volume has dtype {volume.dtype}; expected real numbers (an image "
            f"with its channels last). Fix: convert it, e.g. volume.astype(np.float32)."
        )
    if 0 in volume.shape:
        raise ValueError(
            f"{_PREDICT}: volume has shape {volume.shape}, with an empty axis; expected "
            f"at least one voxel and one channel. Fix: check how the volume was read or "
            f"cropped."
        )


def _check_overlap(overlap: Any, where: str) -> float:
    if isinstance(overlap, bool) or not isinstance(overlap, numbers.Real) \
            or not 0 <= float(overlap) < 1:
        raise ValueError(
            f"{where}: overlap is {overlap!r}; expected a number in [0, 1), the fraction of "
            f"a tile its neighbour shares. Fix: e.g. overlap=0.25 (0.5 for smoother seams, "
            f"at about twice the tiles)."
        )
    return float(overlap)


def _check_blend(blend: Any, where: str) -> None:
    if not isinstance(blend, str) or blend not in BLENDS:
        raise ValueError(
            f"{where}: blend is {blend!r}; expected 'gaussian', 'constant' or 'linear'. "
            f"Fix: e.g. blend='gaussian' (MONAI's and nnU-Net's choice)."
        )


def _check_scores(out: Any, batch_shape: Tuple[int, ...],
                  scores: Optional[np.ndarray]) -> np.ndarray:
    """``predict_fn``'s output as NumPy, checked against the batch it was given."""
    out = np.asarray(out)
    classes = "classes" if scores is None else str(scores.shape[-1])
    expected = f"({', '.join(map(str, batch_shape[:-1]))}, {classes})"
    if out.ndim != len(batch_shape) or out.shape[:-1] != batch_shape[:-1] or (
            scores is not None and out.shape[-1] != scores.shape[-1]) or out.shape[-1] == 0:
        raise ValueError(
            f"{_PREDICT}: predict_fn returned shape {out.shape} for tiles of shape "
            f"{batch_shape}; expected {expected}, class scores per voxel of every tile. "
            f"Fix: keep the batch and spatial sizes (a model with padding='same') and "
            f"return the scores, not a mask or a single example."
        )
    if out.dtype.kind != "f" and out.dtype.name != "bfloat16":
        raise ValueError(
            f"{_PREDICT}: predict_fn returned {out.dtype} values; expected class scores "
            f"(floats: logits or probabilities) to blend. Fix: return the model's logits "
            f"and take the argmax of the blended result."
        )
    return out if out.dtype in (np.float32, np.float64) else out.astype(np.float32)


def _progress_bar(total: int) -> Any:
    try:
        from tqdm.auto import tqdm
    except ImportError:
        raise ImportError(
            f"{_PREDICT}: progress=True needs tqdm, which is not installed. Fix: pip "
            f"install 'spatial-tf[train]', or progress=False."
        ) from None
    return tqdm(total=total, desc="sliding window", unit="tile", dynamic_ncols=True)
