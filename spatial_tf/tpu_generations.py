"""One record per TPU generation: what every table of spatial_tf reads about a generation.

Budgets (HBM per device), the TPU compiler's compile-only targets (the libtpu topology
to compile for) and the help texts read ``GENERATIONS``; a new generation is one record
here. Sources are Cloud TPU's system-architecture pages (one per generation) and, for
the libtpu topology names, ``jax.experimental.topologies.get_topology_desc`` with libtpu
0.0.42.1 (each name below returned compile-only devices of that kind on a CPU machine).

>>> generation("v5litepod").name, generation("V3").hbm_per_device // 2**30
('v5e', 16)
>>> generation("tpu7x").tensorflow is None          # no TensorFlow runtime on Ironwood
True
>>> generation("v3").topology_for(16)               # 16 TensorCores: a 4x4 chip mesh
'v3:4x4'
>>> round(generation("v3").timing.clock_hz / 1e6)    # 123 TFLOP/s / (2 x 2 MXUs x 128^2 x 2)
938
>>> generation("tpu7x").timing is None              # its MXU count is not published
True
>>> record, piece = parse("v4-8")                    # the suffix counts TensorCores on v4
>>> record.name, piece.name, piece.devices
('v4', 'v4-8', 4)
>>> parse("v5litepod-8")[1].name, parse("v5e")[1]    # chips on v5e; no slice named
('v5e-8', None)
"""
import dataclasses
from typing import Dict, Optional, Tuple

__all__ = ["Generation", "Timing", "SliceName", "GENERATIONS", "generation", "parse", "names"]

GiB = 2**30


@dataclasses.dataclass(frozen=True)
class Timing:
    """What turns the TPU compiler's cycle estimates into seconds and prices collectives.

    Attributes:
      tensorcores_per_chip, mxus_per_core, mxu_size: the chip's matrix units (an MXU is
        ``mxu_size`` x ``mxu_size`` multiply-accumulators, 2 flops each per cycle).
      peak_bf16_per_chip: peak bfloat16 FLOP/s of one chip, as Cloud TPU publishes it.
      hbm_bandwidth_per_chip: HBM bytes/s of one chip.
      ici_link_bandwidth: one-way bytes/s of one inter-chip link.
      ici_links_per_chip: inter-chip links of one chip (4: 2D torus, 6: 3D torus).
      source: where each figure comes from.
    """

    tensorcores_per_chip: int
    mxus_per_core: int
    mxu_size: int
    peak_bf16_per_chip: float
    hbm_bandwidth_per_chip: float
    ici_link_bandwidth: float
    ici_links_per_chip: int
    source: str

    @property
    def clock_hz(self) -> float:
        """The TensorCore clock, derived: peak FLOP/s / (cores x MXUs x size^2 x 2)."""
        per_cycle = self.tensorcores_per_chip * self.mxus_per_core * self.mxu_size**2 * 2
        return self.peak_bf16_per_chip / per_cycle


@dataclasses.dataclass(frozen=True)
class Generation:
    """What spatial_tf knows of one TPU generation.

    Attributes:
      name: canonical name (``"v5e"``); ``aliases``: other names users type.
      devices_per_chip: devices TensorFlow sees per chip (a device runs one logical core).
      compile_devices_per_chip: devices libtpu's compile-only client lists per chip.
      device: what a device is on this generation.
      hbm_per_device: HBM bytes per device, as Cloud TPU documents it.
      topologies: libtpu compile-only topology names, smallest first (what
        ``topology_for`` picks from).
      tensorflow: the newest TensorFlow runtime Cloud TPU documents for it, or None when
        Cloud TPU documents none (a compile target only).
      source: where the figures come from.
      suffix_counts: what the number of a slice name counts (``"TensorCores"``: v4-8 is 8
        TensorCores, 4 chips; ``"chips"``: v5litepod-8 is 8 chips).
      chip_config: libtpu's chip configuration for compile-only devices as TensorFlow
        sees them (``"megacore"``: one device per chip), or None for libtpu's default.
      timing: the figures that turn the TPU compiler's cycles into seconds (``Timing``),
        or None where Cloud TPU does not publish them (no step time is given then).
      timing_missing: why ``timing`` is None.
    """

    name: str
    aliases: Tuple[str, ...]
    devices_per_chip: int
    compile_devices_per_chip: int
    device: str
    hbm_per_device: int
    topologies: Tuple[str, ...]
    tensorflow: Optional[str]
    source: str
    timing: Optional[Timing] = None
    timing_missing: str = ""
    suffix_counts: str = "TensorCores"
    chip_config: Optional[str] = None

    def devices_in_slice(self, suffix: int) -> int:
        """TensorFlow devices of the slice named ``<generation>-<suffix>``.

        >>> generation("v4").devices_in_slice(8), generation("v3").devices_in_slice(8)
        (4, 8)
        >>> generation("v5e").devices_in_slice(8)
        8
        """
        if self.suffix_counts == "chips":
            return suffix * self.devices_per_chip
        return max(suffix // (2 if self.chip_config == "megacore" else 1), 1)

    def topology_for(self, num_devices: int) -> str:
        """The smallest libtpu topology with at least ``num_devices`` devices."""
        for topology in self.topologies:
            if _devices_of(self, topology) >= num_devices:
                return topology
        raise ValueError(
            f"TPU {self.name}: no compile-only topology holds {num_devices} devices; the "
            f"largest, {self.topologies[-1]}, holds {_devices_of(self, self.topologies[-1])}. "
            f"Fix: fewer cores per replica."
        )


def _devices_of(gen, topology):
    chips = 1
    for n in topology.split(":")[1].split("x"):
        chips *= int(n)
    return chips * gen.compile_devices_per_chip


_2D = ("2x2", "2x4", "4x4", "4x8", "8x8", "8x16")
_3D = ("2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8")

# Peak FLOP/s, HBM bandwidth and MXUs: each generation's Cloud TPU page; one-way ICI link
# bandwidth and links per chip: the scaling book's TPU table (jax-ml.github.io/scaling-book/
# tpus), which is about 10% below Cloud TPU's nominal per-chip figures.
_SCALING_BOOK = "jax-ml.github.io/scaling-book/tpus (ICI bandwidth per link, links per chip)"


def _timing(cores, mxus, size, peak, hbm, link, links, page):
    return Timing(cores, mxus, size, peak, hbm, link, links, f"{page}; {_SCALING_BOOK}")


_RECORDS = [
    Generation("v2", (), 2, 2, "TensorCore (2 per chip, 16 GiB per chip)", 8 * GiB,
            tuple(f"v2:{t}" for t in ("2x2", "4x4", "8x8")), "2.x (retired)",
            "cloud.google.com/tpu/docs/system-architecture-tpu-vm (TPU v2)",
            timing_missing="Cloud TPU publishes no ICI bandwidth for v2"),
    Generation("v3", (), 2, 2, "TensorCore (2 per chip, 32 GiB per chip)", 16 * GiB,
            tuple(f"v3:{t}" for t in ("2x2", "4x4", "8x8")), "2.x",
            "cloud.google.com/tpu/docs/v3: 32 GiB HBM2 per chip, 2 TensorCores",
            _timing(2, 2, 128, 123e12, 900e9, 1e11, 4,
                    "cloud.google.com/tpu/docs/v3: 123 TFLOP/s, 900 GBps, 2 MXUs per core")),
    # v4: TensorFlow sees one device per chip (megacore); libtpu's compile-only client
    # lists each TensorCore as a device (v4:2x2x1 has 8) unless asked for its "megacore"
    # chip configuration (4), as MaxText's AOT compile asks for v4 and v5p
    Generation("v4", (), 1, 1, "chip (megacore: 2 TensorCores as one device)", 32 * GiB,
            tuple(f"v4:{t}" for t in _3D[:5]), "2.x",
            "cloud.google.com/tpu/docs/v4: 32 GiB HBM2 per chip, megacore",
            _timing(2, 4, 128, 275e12, 1200e9, 4.5e10, 6,
                    "cloud.google.com/tpu/docs/v4: 275 TFLOP/s, 1200 GBps, 4 MXUs per core"),
            chip_config="megacore"),
    Generation("v5e", ("v5litepod", "v5lite"), 1, 1, "chip (1 TensorCore)", 16 * GiB,
            tuple(f"v5e:{t}" for t in _2D), "2.18",
            "cloud.google.com/tpu/docs/v5e: 16 GB HBM per chip, 1 TensorCore",
            _timing(1, 4, 128, 197e12, 819e9, 4.5e10, 4,
                    "cloud.google.com/tpu/docs/v5e: 197 TFLOP/s, 819 GBps, 4 MXUs"),
            suffix_counts="chips"),
    Generation("v5p", (), 1, 1, "chip (megacore: 2 TensorCores as one device)", 95 * GiB,
            tuple(f"v5p:{t}" for t in _3D), "2.x",
            "cloud.google.com/tpu/docs/v5p: 95 GiB HBM per chip, megacore",
            _timing(2, 4, 128, 459e12, 2765e9, 9e10, 6,
                    "cloud.google.com/tpu/docs/v5p: 459 TFLOP/s, 2765 GBps, 4 MXUs per core"),
            chip_config="megacore"),
    Generation("v6e", ("trillium",), 1, 1, "chip (1 TensorCore)", 32 * GiB,
            tuple(f"v6e:{t}" for t in _2D), None,
            "cloud.google.com/tpu/docs/v6e: 32 GB HBM per chip, 1 TensorCore; its "
            "training guides are JAX and PyTorch only",
            timing_missing="Cloud TPU's v6e pages disagree on its MXUs per core, so its "
                           "clock cannot be derived", suffix_counts="chips"),
    Generation("tpu7x", ("ironwood", "v7x"), 2, 2, "device (2 per chip, 192 GiB per chip)",
            96 * GiB, tuple(f"tpu7x:{t}" for t in _3D[:5]), None,
            "cloud.google.com/tpu/docs/tpu7x: 192 GiB HBM per chip, 2 devices; "
            "TensorFlow is not supported",
            timing_missing="Cloud TPU publishes no MXU count or clock for TPU7x"),
]
GENERATIONS: Dict[str, Generation] = {r.name: r for r in _RECORDS}
_BY_NAME = {alias: g for g in GENERATIONS.values() for alias in (g.name,) + g.aliases}


def names() -> str:
    """The canonical names, for messages and help texts: ``'v2, v3, ..., tpu7x'``."""
    return ", ".join(GENERATIONS)


@dataclasses.dataclass(frozen=True)
class SliceName:
    """A slice named by its generation and number (``v4-8``), read as Cloud TPU reads it:
    the number counts what the generation's ``suffix_counts`` says (TensorCores or chips).

    Attributes:
      generation: the ``Generation`` record; suffix: the number after the dash.
    """

    generation: Generation
    suffix: int

    @property
    def name(self) -> str:
        """The canonical spelling: ``"v5e-8"`` for ``"v5litepod-8"``."""
        return f"{self.generation.name}-{self.suffix}"

    @property
    def devices(self) -> int:
        """The TPU devices TensorFlow sees in the slice (``v4-8``: 4, one per chip)."""
        return self.generation.devices_in_slice(self.suffix)


def parse(name: str) -> Tuple[Generation, Optional[SliceName]]:
    """``name`` (a generation, an alias or a slice: ``"v3"``, ``"V5litepod-16"``) as its
    generation record and, when it names a slice, that slice (else None).

    Raises:
      TypeError: ``name`` is not a string.
      ValueError: an unknown generation, or a slice number that is not a positive int.
    """
    if not isinstance(name, str):
        raise TypeError(f"TPU name is {name!r} ({type(name).__name__}); expected a "
                        f"generation or slice name such as 'v3' or 'v5e-8'. Fix: pass a string.")
    key = name.strip().lower()
    found = _BY_NAME.get(key)
    if found is not None:
        return found, None
    stem, _, suffix = key.rpartition("-")
    found = _BY_NAME.get(stem)
    if found is None:
        raise ValueError(
            f"unknown TPU generation {name!r}; expected one of {names()} (or a slice of "
            f"one, e.g. 'v3-8'). Fix: use one of these names."
        )
    if not suffix.isdigit() or int(suffix) < 1:
        raise ValueError(
            f"TPU slice {name!r}: the part after the dash is {suffix!r}; expected a positive "
            f"number of {found.suffix_counts} (e.g. '{found.name}-8'). Fix: "
            f"'{found.name}-8', or '{found.name}' for the generation alone.")
    return found, SliceName(found, int(suffix))


def generation(name: str) -> Generation:
    """The record of generation ``name`` (case and aliases folded; a slice suffix such as
    ``-8`` names the generation too: ``"v3-8"`` is v3). See ``parse``.

    Raises:
      ValueError: an unknown generation, naming the known ones.
    """
    return parse(name)[0]
