"""Per-core memory budgets: HBM per device of each TPU generation, or a size you give.

A device is what one logical core of ``num_cores_per_replica`` runs on: a TensorCore on
v2 and v3 (two per chip, each with its own half of the chip's HBM), a whole chip on v4
and v5p (megacore: the chip's two TensorCores act as one device) and on v5e and v6e (one
TensorCore per chip).

>>> parse_budget("v3").device_bytes == 16 * GiB
True
>>> parse_budget("v3-8").usable == int(16 * GiB * (1 - RESERVE_FRACTION))
True
>>> parse_budget("512MiB").usable, parse_budget(1000).usable
(536870912, 1000)
>>> parse_budget("16 GB").usable
16000000000
>>> print(parse_budget("v3"))
v3: 16.0 GiB per core (one TensorCore), 14.4 GiB usable after a 10% reserve
"""
import dataclasses
import numbers
from typing import Any, Optional

from spatial_tf.table import parse_size
from spatial_tf.tpu_generations import GENERATIONS, Generation, SliceName, parse

__all__ = ["Budget", "parse_budget", "HBM_PER_DEVICE", "RESERVE_FRACTION", "GiB"]

KiB, MiB, GiB = 2**10, 2**20, 2**30

# generation -> (HBM bytes per device, what a device is), from the one record per
# generation (spatial_tf.tpu_generations, which cites the sources)
HBM_PER_DEVICE = {g.name: (g.hbm_per_device, g.device) for g in GENERATIONS.values()}


# Kept free of a generation's HBM for what the step's own buffers do not include: the
# TPU runtime and program, infeed/outfeed buffers and fragmentation. A planning margin
# (not a measured TPU figure); pass reserve=0 to plan against the full HBM.
RESERVE_FRACTION = 0.10


@dataclasses.dataclass(frozen=True)
class Budget:
    """Bytes one core may use (``usable``), and where the figure comes from.

    Attributes:
      usable: bytes per core the plan must fit in.
      device_bytes: the device's HBM before the reserve (``usable`` for plain sizes).
      reserve: the fraction of ``device_bytes`` held back.
      name: e.g. ``"v3"``, ``"v3-8"`` or ``"16GiB"``.
      device: what one core is on that generation (None for plain sizes).
      generation: the TPU generation's record (None for plain sizes); ``slice``: the
        named slice (``tpu_generations.SliceName``), or None.
    """

    usable: int
    device_bytes: int
    reserve: float
    name: str
    device: Optional[str] = None
    generation: Optional[Generation] = None
    slice: Optional[SliceName] = None

    def __str__(self):
        """The budget and, for a TPU generation or a reserve, where ``usable`` comes from:
        ``v3: 16.0 GiB per core (one TensorCore), 14.4 GiB usable after a 10% reserve``."""
        from spatial_tf.table import format_bytes

        if self.device is None and not self.reserve:
            return f"{format_bytes(self.usable)} per core"
        one = "" if self.device is None else f" (one {self.device.split(' (')[0]})"
        whole = f"{self.name}: {format_bytes(self.device_bytes)} per core{one}"
        if not self.reserve:
            return f"{whole}, no reserve"
        return f"{whole}, {self.limit}"

    @property
    def limit(self) -> str:
        """``usable`` in words, with the reserve when there is one: ``14.4 GiB usable after a
        10% reserve`` (a TPU generation's default), ``2.0 GiB`` (a size you give)."""
        from spatial_tf.table import format_bytes

        if not self.reserve:
            return format_bytes(self.usable)
        return f"{format_bytes(self.usable)} usable after a {self.reserve:.0%} reserve"


def parse_budget(value: Any, reserve: Optional[float] = None) -> Budget:
    """``value`` as a ``Budget``: bytes (int), a size (``"16GiB"``, ``"512 MiB"``,
    ``"8GB"``) or a TPU generation or slice name (``"v3"``, ``"v3-8"``, ``"v5e-16"``).

    A generation's HBM per device is reduced by ``reserve`` (default
    ``RESERVE_FRACTION``); sizes you give are taken as they are unless ``reserve`` is
    given. A ``Budget`` passes through unchanged.
    """
    if isinstance(value, Budget):
        return value
    if reserve is not None and (isinstance(reserve, bool) or not isinstance(reserve, numbers.Real)
                                or not 0 <= reserve < 1):
        raise ValueError(
            f"budget reserve is {reserve!r}; expected a fraction from 0 (none) up to, not "
            f"including, 1. Fix: e.g. reserve=0.1 to keep 10% of HBM for the runtime."
        )
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError(f"budget is {value!r}; expected a positive number of bytes. Fix: {_FIX}")
        return _make(int(value), reserve or 0.0, f"{int(value)} bytes")
    if not isinstance(value, str):
        raise TypeError(f"budget is {value!r}; expected bytes (int), a size string or a TPU "
                        f"slice name. Fix: {_FIX}")
    try:
        count = parse_size(value)
    except ValueError as e:  # a number with an unknown unit
        raise ValueError(f"budget is {value!r}; {e}. Fix: {_FIX}") from None
    if count is not None:
        if count <= 0:
            raise ValueError(f"budget is {value!r}; expected a positive size. Fix: {_FIX}")
        return _make(count, reserve or 0.0, value.strip())
    try:
        record, piece = parse(value)
    except ValueError as e:
        raise ValueError(f"budget is {value!r}; expected a size or a TPU generation or slice "
                         f"({str(e).split('; ', 1)[0]}). Fix: {_FIX}") from None
    device_bytes, device = HBM_PER_DEVICE[record.name]
    budget = _make(device_bytes, RESERVE_FRACTION if reserve is None else reserve,
                   value.strip().lower())
    return dataclasses.replace(budget, device=device, generation=record, slice=piece)


def _make(device_bytes, reserve, name):
    return Budget(int(device_bytes * (1 - reserve)), device_bytes, reserve, name)


_FIX = (
    f"pass bytes (e.g. 17179869184), a size such as '16GiB' or '512MiB', or a TPU "
    f"generation or slice name: {', '.join(HBM_PER_DEVICE)} (e.g. 'v3' or 'v3-8')."
)
