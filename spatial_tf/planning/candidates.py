"""The specs worth trying: every split of a power-of-two core count over the spatial axes.

For a ``(batch, *spatial, channels)`` input, a candidate gives each spatial axis (and
the batch axis, where the batch divides) a power-of-two split count whose product is the
core count, each count dividing its axis; channels are never split. With
``symmetric=True`` (the default), splits that only permute the counts among spatial axes
of equal size are tried once (a U-Net treats those axes alike), keeping the one with the
larger counts on the outer axes.

>>> candidate_specs((1, 32, 32, 32, 1), 8)
[(1, 8, 1, 1, 1), (1, 4, 2, 1, 1), (1, 2, 2, 2, 1)]
>>> len(candidate_specs((1, 32, 32, 32, 1), 8, symmetric=False))
10
>>> candidate_specs((2, 64, 16, 1), 4)
[(1, 4, 1, 1), (1, 1, 4, 1), (1, 2, 2, 1), (2, 2, 1, 1), (2, 1, 2, 1)]
"""
import itertools
import math
from typing import List, Optional, Sequence, Tuple

from spatial_tf.spec import check_num_cores_per_replica

__all__ = ["candidate_specs", "check_shape"]


def check_shape(shape: Sequence[int], name: str = "inputs") -> Tuple[int, ...]:
    """``shape`` as a tuple of positive ints, rank 3 or more ``(batch, *spatial, channels)``."""
    try:
        checked: Optional[Tuple[int, ...]] = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        checked = None
    if checked is None or len(checked) < 3 or any(s < 1 for s in checked):
        raise ValueError(
            f"{name}: the volume's shape is not (batch, *spatial, channels) with known "
            f"positive sizes. Expected rank 3 or more, e.g. (1, 128, 128, 128, 1). Fix: "
            f"give the full shape, batch first and channels last."
        )
    return checked


def candidate_specs(shape: Sequence[int], num_cores: int, *, batch: bool = True,
                    symmetric: bool = True) -> List[Tuple[int, ...]]:
    """Every valid spec for ``shape`` on ``num_cores`` cores, fewest split axes first.

    Raises:
      ValueError: ``num_cores`` is not a power of two up to 128, or ``shape`` has no
        split of ``num_cores`` whose counts divide its sizes (the message says which).
    """
    num_cores = check_num_cores_per_replica(num_cores)
    shape = check_shape(shape, "candidate_specs")
    axes = list(range(1 if not batch else 0, len(shape) - 1))
    exponents = int(math.log2(num_cores))
    found = []
    for combo in itertools.product(range(exponents + 1), repeat=len(axes)):
        if sum(combo) != exponents:
            continue
        spec = [1] * len(shape)
        for axis, e in zip(axes, combo):
            spec[axis] = 2**e
        if all(shape[a] % spec[a] == 0 for a in range(len(shape))):
            found.append(tuple(spec))
    if symmetric:
        found = _one_per_permutation(shape, found)
    if not found:
        raise ValueError(
            f"candidate_specs: no split of {num_cores} cores divides the shape "
            f"{list(shape)}: each split axis's size must be a multiple of its split count. "
            f"Expected spatial sizes with enough factors of 2. Fix: pad the volume "
            f"(spatial_tf.data.pad_to_multiple) or use fewer cores."
        )
    # fewest split axes first, then batch unsplit first, then larger outer counts
    found.sort(key=lambda s: (sum(c > 1 for c in s), s[0] > 1, [-c for c in s]))
    return found


def _one_per_permutation(shape, specs):
    """Keep one spec per group of spatial axes of equal size with permuted counts."""
    groups = {}
    for axis in range(1, len(shape) - 1):
        groups.setdefault(shape[axis], []).append(axis)
    kept, seen = [], set()
    for spec in sorted(specs, key=lambda s: [-c for c in s]):
        key = [spec[0]]
        for size in sorted(groups):
            key.append((size, tuple(sorted((spec[a] for a in groups[size]), reverse=True))))
        key = tuple(key)
        if key not in seen:
            seen.add(key)
            kept.append(spec)
    return kept
