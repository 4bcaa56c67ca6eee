"""Per-core memory against volume size, fitted from a few small compiles.

A spatially partitioned step's per-core bytes are weights, optimizer slots and their
gradients (fixed) plus activations, which scale with the voxels each core holds:
``bytes = a + b * voxels``. ``LinearFit`` is the least-squares line through measured
``(voxels, bytes)`` points; it predicts sizes too large to compile here, and its
``error`` against a direct compile of a size it did not see says how far to trust it.

>>> f = LinearFit.from_points([16**3, 24**3, 32**3], [1000 + 2 * 16**3, 1000 + 2 * 24**3,
...                                                   1000 + 2 * 32**3])
>>> round(f.a), round(f.b, 6), round(f.predict(64**3))
(1000, 2.0, 525288)
>>> largest_edge(f, budget=1000 + 2 * 40**3, multiple=8)
40
>>> f.error(48**3, 1000 + 2 * 48**3 * 1.05) < 0  # predicted 4.6% low
True
"""
import dataclasses
import math
from typing import Mapping, Optional, Sequence

import numpy as np

from spatial_tf.table import plural

__all__ = ["LinearFit", "largest_edge", "fewest_cores"]


@dataclasses.dataclass(frozen=True)
class LinearFit:
    """``bytes = a + b * voxels``, from ``points`` (voxels, bytes) measured."""

    a: float
    b: float
    points: tuple

    @classmethod
    def from_points(cls, voxels: Sequence[float], measured: Sequence[float]) -> "LinearFit":
        voxels = [float(v) for v in voxels]
        if len(set(voxels)) < 2:
            raise ValueError(
                f"fit: {plural(len(set(voxels)), 'distinct size')} measured ({voxels}); "
                f"expected at least 2 to fit bytes = a + b * voxels. Fix: give fit_sizes two or "
                f"more different edges, e.g. fit_sizes=(16, 24, 32)."
            )
        b, a = np.polyfit(voxels, [float(m) for m in measured], 1)
        return cls(float(a), float(b), tuple(zip(voxels, measured)))

    def predict(self, voxels: float) -> float:
        return self.a + self.b * float(voxels)

    def error(self, voxels: float, measured: float) -> float:
        """Relative error of the prediction against ``measured``: (pred - meas) / meas."""
        return (self.predict(voxels) - measured) / measured

    def max_voxels(self, budget: float) -> float:
        """Voxels per replica that fit ``budget`` bytes per core (inf if memory does not
        grow with size, 0 if even the fixed part does not fit)."""
        if self.b <= 0:
            return math.inf if self.a <= budget else 0.0
        return max((budget - self.a) / self.b, 0.0)


def largest_edge(fit: LinearFit, budget: float, multiple: int = 1) -> int:
    """The largest cube edge, a multiple of ``multiple``, whose voxels fit ``budget``."""
    voxels = fit.max_voxels(budget)
    if math.isinf(voxels):
        raise ValueError(
            "largest_edge: the fitted memory does not grow with the volume (slope <= 0), "
            "so no largest size follows from it. Expected measurements at sizes where "
            "activations dominate. Fix: fit from larger sizes."
        )
    edge = int(round(voxels ** (1 / 3), 6))
    return edge - edge % multiple


def fewest_cores(fits_by_cores: Mapping[int, LinearFit], voxels: float,
                 budget: float) -> Optional[int]:
    """The smallest core count whose (best) fit predicts ``voxels`` within ``budget``,
    or None if none does.

    >>> fits = {1: LinearFit(0, 8.0, ()), 8: LinearFit(0, 1.0, ())}
    >>> fewest_cores(fits, 1000, 2000), fewest_cores(fits, 1000, 500)
    (8, None)
    """
    for cores in sorted(fits_by_cores):
        if fits_by_cores[cores].predict(voxels) <= budget:
            return cores
    return None
