"""Synthetic TPU topologies for named Cloud TPU slices, built as TensorFlow sees them.

A ``tf.tpu.experimental.Topology`` has a ``mesh_shape`` ``[x, y, z, cores_per_chip]``
and ``device_coordinates`` of shape ``[tasks, devices_per_task, 4]``: for each TensorFlow
task (one per TPU host VM) and each of its TPU devices, the device's physical coordinates.
``synthetic(name)`` builds that object for a named slice without a TPU, so device
assignments, tables and tests can run anywhere.

>>> topology = synthetic("v3-32")
>>> topology.mesh_shape.tolist(), topology.num_tasks, topology.num_tpus_per_task
([4, 4, 1, 2], 4, 8)
>>> topology.device_coordinates[1, :2].tolist()     # task 1 owns chips x in {2, 3}, y in {0, 1}
[[2, 0, 0, 0], [2, 0, 0, 1]]
>>> synthetic("v4-8").mesh_shape.tolist()          # megacore: one TF device per chip
[2, 2, 1, 1]

How each generation appears (sources):

- v2, v3: two TensorCores per chip, each its own TensorFlow device, so the last mesh axis
  is 2 and slices are 2D in chips (``z == 1``). "2x2 = v2-8, 4x4 = v2-32" with two cores
  per chip (google-research/text-to-text-transfer-transformer issue #34); jax's
  ``mesh_utils._get_physical_tpu_mesh`` keeps ``core_on_chip`` as a mesh axis only for
  v2/v3; TPUEstimator's ``_NUM_CORES_TO_COMPUTATION_SHAPE`` (tensorflow_estimator
  ``tpu_context.py``) ends every shape with the 2 cores of a chip.
- v4, v5p: two TensorCores per chip fused into one device ("megacore"), so the last
  mesh axis is 1 and the chip mesh is 3D (Cloud TPU v4 docs: "3D mesh", topologies
  ``AxBxC``; jax ``mesh_utils`` requires one device per chip for TPU > v3). The suffix of
  the accelerator name counts TensorCores: v4-8 is 4 chips (2x2x1).
- v5e (v5litepod), v6e: one TensorCore per chip, 2D torus (Cloud TPU v5e and v6e docs,
  "Supported configurations"); the suffix counts chips: v6e-8 is 2x4.

Hosts: multi-host slices give each TensorFlow task a 2x2x1 block of chips with all their
cores, tasks numbered with the block's x fastest, then y, then z. That is DTensor's
``host_bounds = [2, 2, 1, cores_per_chip]`` (``tensorflow/dtensor/python/tpu_util.py``),
t5x's fake v3 devices (``host_layout=(2, 2, 1, 2)`` in ``t5x/test_utils.py``) and a v4
process listing in which process 1 holds chips ``(0..1, 2..3, 0)``. Single-host slices of
8 chips (v2-8, v3-8, v5litepod-8, v6e-8) have one task with all chips. Within a task,
devices are numbered core fastest, then x, y, z (t5x ``make_devices``; jax issue #20305
lists v4-8 ids 0..3 at ``(0,0,0), (1,0,0), (0,1,0), (1,1,0)``). Only the ``TPU ordinal``
column of ``describe`` depends on this last ordering; choosing a computation shape reads
the mesh and which task owns each coordinate.
"""
import dataclasses
import itertools
from typing import Optional

import numpy as np
import tensorflow as tf

from spatial_tf.tpu_generations import generation as tpu_generation, parse

__all__ = ["SliceShape", "SLICES", "ALIASES", "SyntheticTopology", "canonical_name", "synthetic"]


@dataclasses.dataclass(frozen=True)
class SliceShape:
    """A named slice: chip mesh, cores per chip as TensorFlow sees them, chips per host."""

    name: str
    generation: str
    chips: tuple  # (x, y, z) chips
    cores_per_chip: int  # TensorFlow devices per chip
    host_chips: tuple  # (x, y, z) block of chips owned by one task

    @property
    def mesh_shape(self):
        return tuple(self.chips) + (self.cores_per_chip,)

    @property
    def num_cores(self):
        return int(np.prod(self.mesh_shape))

    @property
    def num_hosts(self):
        return int(np.prod(self.chips) // np.prod(self.host_chips))


def _slice(name, chips, host_chips=(2, 2, 1)):
    """A named slice; its TensorFlow devices per chip are its generation's
    (``spatial_tf.tpu_generations``)."""
    generation = name.rsplit("-", 1)[0]
    host = tuple(min(h, c) for h, c in zip(host_chips, chips))
    return SliceShape(name, generation, tuple(chips), tpu_generation(name).devices_per_chip,
                      host)


_ONE_HOST_2X4 = (2, 4, 1)  # 8-chip single-host VMs (v5e, v6e "2x4", one host)

SLICES = {
    s.name: s
    for s in [
        # v2 / v3: 2D chip mesh, 2 TensorFlow devices per chip, 4 chips per host.
        # Chips: "2x2 = v2-8, 4x4 = v2-32, 4x8 = v2-64, 8x8 = v2-128" (t5 issue #34);
        # 2 cores per chip: jax mesh_utils, TPUEstimator's table; hosts: t5x, DTensor.
        _slice("v2-8", (2, 2, 1)),
        _slice("v2-32", (4, 4, 1)),
        _slice("v3-8", (2, 2, 1)),
        _slice("v3-32", (4, 4, 1)),
        _slice("v3-64", (4, 8, 1)),
        _slice("v3-128", (8, 8, 1)),
        _slice("v3-256", (8, 16, 1)),
        # v4 / v5p: 3D chip mesh, megacore (1 device per chip), 4 chips per host.
        # Cloud TPU v4 page: 2 TensorCores per chip, 3D mesh, AxBxC topologies; a v4
        # tray is 2x2x1 chips; v4-8 ids 0..3 at (0,0,0),(1,0,0),(0,1,0),(1,1,0) (jax #20305).
        _slice("v4-8", (2, 2, 1)),
        _slice("v4-16", (2, 2, 2)),
        _slice("v4-32", (2, 2, 4)),
        _slice("v4-64", (2, 4, 4)),
        _slice("v5p-8", (2, 2, 1)),
        _slice("v5p-16", (2, 2, 2)),
        _slice("v5p-32", (2, 2, 4)),
        # v5e / v6e: 2D chip mesh, 1 core per chip; 8-chip single host, else 4-chip VMs.
        # Cloud TPU v5e / v6e pages: one TensorCore per chip, 2D torus, topologies 2x2,
        # 2x4 (1 host), 4x4, 4x8; v6e-16 is 4 VMs of ct6e-standard-4t (4 chips each).
        _slice("v5litepod-4", (2, 2, 1)),
        _slice("v5litepod-8", (2, 4, 1), _ONE_HOST_2X4),
        _slice("v5litepod-16", (4, 4, 1)),
        _slice("v6e-4", (2, 2, 1)),
        _slice("v6e-8", (2, 4, 1), _ONE_HOST_2X4),
        _slice("v6e-16", (4, 4, 1)),
        _slice("v6e-32", (4, 8, 1)),
    ]
}


# Other names users type for the same slices: Cloud TPU's docs and gcloud call v5e
# slices "v5e-N" beside the accelerator type "v5litepod-N".
ALIASES = {
    f"v5e-{n}": f"v5litepod-{n}" for n in (4, 8, 16) if f"v5litepod-{n}" in SLICES
}


# (canonical generation, suffix) -> SLICES key: every spelling ``tpu_generations.parse``
# reads (v5e-8, v5litepod-8, V5Lite-8) finds the same slice
_BY_GENERATION = {(s.generation.name, s.suffix): key
                  for key, s in ((key, parse(key)[1]) for key in SLICES) if s is not None}


def canonical_name(name: str) -> Optional[str]:
    """The ``SLICES`` key for ``name`` (case and aliases folded), or None if unknown.

    >>> canonical_name("v5e-8"), canonical_name("V3-8"), canonical_name("v9-8")
    ('v5litepod-8', 'v3-8', None)
    >>> canonical_name("v5lite-4"), canonical_name("v3"), canonical_name("v3-12")
    ('v5litepod-4', None, None)
    """
    try:
        record, piece = parse(name)
    except ValueError:
        return None
    return None if piece is None else _BY_GENERATION.get((record.name, piece.suffix))


class SyntheticTopology(tf.tpu.experimental.Topology):
    """A real ``Topology`` that also remembers which named slice it stands for."""

    def __init__(self, shape: "SliceShape") -> None:
        self.slice = shape
        super().__init__(
            mesh_shape=list(shape.mesh_shape),
            device_coordinates=_device_coordinates(shape),
        )

    @property
    def name(self):
        return self.slice.name

    def __repr__(self):
        return f"synthetic({self.slice.name!r})"


def _device_coordinates(shape):
    """``[tasks, devices_per_task, 4]``: hosts x-fastest; devices core-fastest, then x, y, z."""
    blocks = [c // h for c, h in zip(shape.chips, shape.host_chips)]
    tasks = []
    for bz, by, bx in itertools.product(*(range(b) for b in reversed(blocks))):
        origin = (bx * shape.host_chips[0], by * shape.host_chips[1], bz * shape.host_chips[2])
        devices = []
        for z, y, x, core in itertools.product(
            *(range(h) for h in reversed(shape.host_chips)), range(shape.cores_per_chip)
        ):
            devices.append([origin[0] + x, origin[1] + y, origin[2] + z, core])
        tasks.append(devices)
    return np.array(tasks, dtype=np.int32)


def synthetic(name: str) -> "SyntheticTopology":
    """Return the ``tf.tpu.experimental.Topology`` of the named slice (no TPU needed).

    >>> t = synthetic("v6e-16")
    >>> t.mesh_shape.tolist(), t.num_tasks
    ([4, 4, 1, 1], 4)
    >>> synthetic("v5e-8")           # as Cloud TPU's docs name v5litepod-8
    synthetic('v5litepod-8')
    """
    if not isinstance(name, str):
        raise TypeError(
            f"synthetic: name is {name!r} ({type(name).__name__}); expected a slice name "
            f"string such as 'v3-8'. Known slices: {', '.join(SLICES)}."
        )
    key = canonical_name(name)
    if key is None:
        raise ValueError(
            f"synthetic: unknown slice {name!r}. Known slices: {', '.join(SLICES)} "
            f"(also {', '.join(ALIASES)}). "
            f"Fix: use one of these names (accelerator types as Cloud TPU spells them), "
            f"or build tf.tpu.experimental.Topology(mesh_shape=..., "
            f"device_coordinates=...) yourself."
        )
    return SyntheticTopology(SLICES[key])
