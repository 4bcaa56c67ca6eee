"""Intensities: CT windowing, MR percentile scaling, normalization, and the choice by
modality the commands make.

``scale_intensities(volume, modality)`` is what ``python -m spatial_tf train|evaluate|
predict --modality`` applies to every volume: ``"ct"`` the abdominal window (Hounsfield
units -160 to 240 to [0, 1]), ``"mr"`` ``percentile_scale`` (the volume's own 1st to 99th
percentile to [0, 1], clipped outside; MR intensities have no fixed unit), ``"other"``
the values as they are. CT and MR both map the darkest tissue (air) to 0, the value
padding holds.

>>> import tensorflow as tf
>>> window(tf.constant([-2000.0, 40.0, 240.0, 3000.0]), center=40, width=400).numpy().tolist()
[0.0, 0.5, 1.0, 1.0]
"""
from typing import Any, Optional
import numbers

import tensorflow as tf

__all__ = ["window", "normalize", "percentile_scale", "scale_intensities", "WINDOWS",
           "MODALITIES"]

# common CT windows (center, width) in Hounsfield units
WINDOWS = {
    "abdomen": (40, 400),
    "liver": (60, 150),
    "lung": (-600, 1500),
    "bone": (400, 1800),
    "brain": (40, 80),
}

# scale_intensities' modalities: what each does to a volume
MODALITIES = {
    "ct": "Hounsfield units windowed to the abdominal window (-160 to 240) and scaled to [0, 1]",
    "mr": "the volume's 1st to 99th percentile scaled to [0, 1], clipped outside",
    "other": "the values as they are",
}


def window(volume: Any, center: Optional[float] = None, width: Optional[float] = None, *,
           preset: Optional[str] = None) -> tf.Tensor:
    """Clip Hounsfield units to ``[center - width/2, center + width/2]``, scale to [0, 1].

    Pass ``center`` and ``width``, or ``preset`` (a key of ``WINDOWS``, e.g. ``"abdomen"``).
    The result is float32.
    """
    if preset is not None:
        if preset not in WINDOWS:
            raise ValueError(f"window: preset is {preset!r}; expected one of {sorted(WINDOWS)}.")
        center, width = WINDOWS[preset]
    center, width = _hounsfield("center", center), _hounsfield("width", width)
    if width <= 0:
        raise ValueError(f"window: width is {width:g}; expected a positive number of Hounsfield units.")
    low = center - width / 2
    volume = tf.cast(volume, tf.float32)
    return tf.clip_by_value((volume - low) / width, 0.0, 1.0)


def _hounsfield(name, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"window: {name} is {value!r}; expected a number of Hounsfield units, "
                         f"or preset= one of {sorted(WINDOWS)}.")
    return float(value)


def normalize(volume: Any, mean: Optional[float] = None, std: Optional[float] = None, *,
              epsilon: float = 1e-6) -> tf.Tensor:
    """``(volume - mean) / std`` in float32; the volume's own mean and std when not given.

    >>> import tensorflow as tf
    >>> [round(v, 4) for v in normalize(tf.constant([1.0, 3.0])).numpy().tolist()]
    [-1.0, 1.0]
    """
    volume = tf.cast(volume, tf.float32)
    if mean is None:
        mean = tf.reduce_mean(volume)
    if std is None:
        std = tf.math.reduce_std(volume)
    return (volume - mean) / (std + epsilon)


def percentile_scale(volume: Any, low: float = 1.0, high: float = 99.0) -> tf.Tensor:
    """Clip ``volume`` to its own ``low``-th and ``high``-th percentiles and scale that
    range to [0, 1] (float32), as MR pipelines do (robust to a few bright voxels).

    Percentiles interpolate linearly between ranks, as ``numpy.percentile``'s default;
    a constant volume becomes 0.

    >>> import tensorflow as tf
    >>> percentile_scale(tf.range(101.0), 10, 90).numpy()[[0, 10, 50, 90, 100]].tolist()
    [0.0, 0.0, 0.5, 1.0, 1.0]
    """
    for name, v in (("low", low), ("high", high)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 <= v <= 100:
            raise ValueError(f"percentile_scale: {name} is {v!r}; expected a percentile from "
                             f"0 to 100.")
    if low >= high:
        raise ValueError(f"percentile_scale: low is {low} and high {high}; expected low < "
                         f"high, e.g. 1 and 99.")
    volume = tf.cast(volume, tf.float32)
    ranked = tf.sort(tf.reshape(volume, [-1]))
    last = tf.cast(tf.size(ranked) - 1, tf.float64)

    def percentile(q):
        position = q / 100.0 * last
        below = tf.floor(position)
        fraction = tf.cast(position - below, tf.float32)
        a = tf.gather(ranked, tf.cast(below, tf.int32))
        b = tf.gather(ranked, tf.cast(tf.minimum(below + 1, last), tf.int32))
        return a + (b - a) * fraction

    bottom, top = percentile(float(low)), percentile(float(high))
    return tf.math.divide_no_nan(tf.clip_by_value(volume, bottom, top) - bottom, top - bottom)


def scale_intensities(volume: Any, modality: str) -> tf.Tensor:
    """``volume`` as float32 scaled for ``modality``, a key of ``MODALITIES``: ``"ct"``
    (``window(preset="abdomen")``), ``"mr"`` (``percentile_scale(1, 99)``) or
    ``"other"`` (unchanged).

    >>> scale_intensities([-160.0, 40.0, 1000.0], "ct").numpy().tolist()
    [0.0, 0.5, 1.0]
    """
    if modality not in MODALITIES:
        raise ValueError(f"scale_intensities: modality is {modality!r}; expected one of "
                         f"{', '.join(map(repr, MODALITIES))}.")
    if modality == "ct":
        return window(volume, preset="abdomen")
    if modality == "mr":
        return percentile_scale(volume, 1.0, 99.0)
    return tf.cast(volume, tf.float32)
