"""Synthetic CT-like volumes with label masks, deterministic by ``seed``, any size.

A noisy elliptical "body" of soft tissue in air holds ellipsoid "organs" (classes
``1 .. num_classes - 2``) and a "lesion" (class ``num_classes - 1``) of varied
intensity inside one organ. Intensities are Hounsfield units (air -1000, soft tissue
about 40), so the usual CT windowing applies.

>>> image, labels = synthetic_ct((16, 24, 24), seed=1)
>>> image.shape, image.dtype.name, labels.shape, sorted(set(labels.ravel().tolist()))
((16, 24, 24, 1), 'float32', (16, 24, 24), [0, 1, 2])
"""
from typing import Sequence, Tuple
import numbers

import numpy as np
import tensorflow as tf

from spatial_tf.data.intensity import window

__all__ = ["synthetic_ct", "synthetic_ct_dataset", "class_names"]


def class_names(num_classes: int = 3) -> Tuple[str, ...]:
    """The names of the classes ``synthetic_ct`` draws, for legends.

    >>> class_names(3), class_names(4)
    (('background', 'organ', 'lesion'), ('background', 'organ 1', 'organ 2', 'lesion'))
    """
    organs = ["organ"] if num_classes == 3 else [f"organ {k}" for k in range(1, num_classes - 1)]
    return ("background", *organs, "lesion")


def synthetic_ct(shape: Sequence[int] = (64, 64, 64), seed: int = 0, num_classes: int = 3,
                 noise: float = 20.0) -> Tuple[np.ndarray, np.ndarray]:
    """One volume: ``(image, labels)`` as NumPy arrays.

    Args:
      shape: ``(depth, height, width)``, each at least 8.
      seed: the same seed gives the same volume.
      num_classes: at least 2: background, ``num_classes - 2`` organs, one lesion.
      noise: standard deviation of the Gaussian noise, in Hounsfield units.

    Returns:
      ``image`` float32 ``(*shape, 1)`` in Hounsfield units and ``labels`` int32 ``shape``.
    """
    shape = tuple(shape)
    if len(shape) != 3 or any(isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 8
                              for s in shape):
        raise ValueError(f"synthetic_ct: shape is {shape}; expected three ints >= 8, "
                         f"(depth, height, width).")
    if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral) or num_classes < 2:
        raise ValueError(f"synthetic_ct: num_classes is {num_classes!r}; expected an int >= 2 "
                         f"(background and a lesion at least).")
    rng = np.random.default_rng(seed)
    grid = np.stack(np.meshgrid(*[np.linspace(-1, 1, s) for s in shape], indexing="ij"), -1)

    def ellipsoid(center, radii):
        return (((grid - center) / radii) ** 2).sum(-1) <= 1.0

    image = np.full(shape, -1000.0)
    labels = np.zeros(shape, np.int32)
    body = ellipsoid(np.zeros(3), np.array([0.95, 0.85, 0.9]))
    image[body] = 30.0
    organ_masks = []
    for k in range(num_classes - 2):
        center = rng.uniform(-0.4, 0.4, 3)
        radii = rng.uniform(0.3, 0.45, 3)
        organ = ellipsoid(center, radii) & body
        image[organ] = rng.uniform(60.0, 200.0)
        labels[organ] = 1 + k
        organ_masks.append((organ, center, radii))
    if organ_masks:  # the lesion sits inside one organ
        _, center, radii = organ_masks[rng.integers(len(organ_masks))]
        lesion_center = center + rng.uniform(-0.3, 0.3, 3) * radii
    else:
        lesion_center = rng.uniform(-0.4, 0.4, 3)
    lesion = ellipsoid(lesion_center, rng.uniform(0.15, 0.25, 3)) & body
    image[lesion] = rng.choice([-1.0, 1.0]) * rng.uniform(80.0, 150.0) + 60.0
    labels[lesion] = num_classes - 1
    image += rng.normal(0.0, noise, shape)
    return image[..., None].astype(np.float32), labels


def synthetic_ct_dataset(shape: Sequence[int] = (64, 64, 64), num_volumes: int = 8, seed: int = 0,
                         num_classes: int = 3, preset: str = "abdomen") -> tf.data.Dataset:
    """Unbatched ``(image, labels)`` examples, image windowed to [0, 1] with ``preset``.

    Volume ``i`` is ``synthetic_ct(shape, seed + i, num_classes)``.

    >>> ds = synthetic_ct_dataset((8, 8, 8), num_volumes=2)
    >>> [tuple(t.shape) for t in ds.element_spec]
    [(8, 8, 8, 1), (8, 8, 8)]
    """
    volumes = [synthetic_ct(shape, seed + i, num_classes) for i in range(num_volumes)]
    images = window(np.stack([v[0] for v in volumes]), preset=preset)
    labels = np.stack([v[1] for v in volumes])
    return tf.data.Dataset.from_tensor_slices((images, labels))
