"""Rank the computation shapes that tile a TPU mesh, most compact block first.

Pure maths on ``Topology.mesh_shape`` and ``device_coordinates``; no TPU, no table.
A computation shape ``[x, y, z, c]`` is the block of physical cores one replica occupies:
``x * y * z`` chips and ``c`` cores of each chip (``c`` is 1 on megacore and single-core
chips, up to 2 on v2/v3).

A shape is a candidate when its footprint (``shape * stride``) divides the mesh on every
axis, so replicas tile the slice with no core left idle (``DeviceAssignment.build`` only
needs the footprint to fit; it floors ``mesh // footprint`` and leaves the rest idle).
Candidates are ranked by, in order:

1. cores of one chip first: two cores on a chip share the chip, the cheapest link;
2. smallest block surface ``ab + bc + ca`` in chips (the most ICI links inside the block);
3. shortest longest path through the block (``a + b + c``);
4. fewest hosts the block touches (read from ``device_coordinates``);
5. then the smaller z, then the smaller x (so a tie grows along y first, which makes
   v3-8 match TPUEstimator's ``_NUM_CORES_TO_COMPUTATION_SHAPE`` exactly).

>>> from spatial_tf.topology.slices import synthetic
>>> [r.shape for r in rank_shapes(synthetic("v3-8"), 4)]
[(1, 2, 1, 2), (2, 1, 1, 2), (2, 2, 1, 1)]
"""
import dataclasses
from typing import Any, List, Sequence
import itertools
import math

import numpy as np

from spatial_tf.spec import MAX_CORES_PER_REPLICA

__all__ = ["Ranked", "rank_shapes", "valid_core_counts", "block_tasks", "max_replicas"]


@dataclasses.dataclass(frozen=True)
class Ranked:
    """One candidate shape with the figures it was ranked by."""

    shape: tuple
    surface: int  # ab + bc + ca over the chip block
    span: int  # a + b + c: the longest path through the block is span - 3 hops
    hosts: int  # tasks the block at the mesh origin touches

    def key(self):
        x, y, z, c = self.shape
        return (-c, self.surface, self.span, self.hosts, z, x)


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def _surface(a, b, c):
    return a * b + b * c + c * a


def block_tasks(topology, shape, stride=(1, 1, 1, 1), origin=(0, 0, 0, 0)):
    """Set of task ids owning the cores of one block of ``shape`` at ``origin``."""
    axes = [range(o, o + s * st, st) for o, s, st in zip(origin, shape, stride)]
    return {int(topology.task_ordinal_at_coordinates(p)) for p in itertools.product(*axes)}


def rank_shapes(topology, num_cores, stride=(1, 1, 1, 1)):
    """All shapes of ``num_cores`` cores whose footprint divides the mesh, best first."""
    mesh = [int(m) for m in topology.mesh_shape]
    out = []
    for shape in _factorizations(num_cores, mesh, stride):
        x, y, z, _ = shape
        hosts = len(block_tasks(topology, shape, stride))
        out.append(Ranked(shape, _surface(x, y, z), x + y + z, hosts))
    return sorted(out, key=Ranked.key)


def _factorizations(n, mesh, stride):
    for x in _divisors(n):
        for y in _divisors(n // x):
            for z in _divisors(n // (x * y)):
                shape = (x, y, z, n // (x * y * z))
                if all(m % (s * st) == 0 for m, s, st in zip(mesh, shape, stride)):
                    yield shape


def valid_core_counts(topology: Any, limit: int = MAX_CORES_PER_REPLICA,
                      stride: Sequence[int] = (1, 1, 1, 1)) -> List[int]:
    """Powers of two up to ``limit`` for which some block tiles the mesh."""
    total = int(np.prod(topology.mesh_shape))
    counts = []
    n = 1
    while n <= min(limit, total):
        if any(True for _ in _factorizations(n, list(topology.mesh_shape), stride)):
            counts.append(n)
        n *= 2
    return counts


def max_replicas(mesh_shape, shape, stride):
    """How many replicas ``DeviceAssignment.build`` can place (its own formula)."""
    return math.prod(
        (int(m) // (s * st)) * st for m, s, st in zip(mesh_shape, shape, stride)
    )
