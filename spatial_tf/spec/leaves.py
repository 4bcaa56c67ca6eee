"""Partition-spec leaves: how one tensor is laid out over the cores of a replica.

Four kinds, each a small immutable value whose ``repr`` evaluates back:

>>> Tile(1, 4, 1, 1)                  # split axis 1 four ways; product == cores per replica
Tile(1, 4, 1, 1)
>>> PartialTile(1, 2, 1, 1)           # split 2 ways, each half replicated on the other cores
PartialTile(1, 2, 1, 1)
>>> Replicate()                       # a full copy on every core
Replicate()
>>> Assign(0)                         # the whole tensor on one logical core
Assign(0)
>>> Tile(1, 2, 4, 1).tile_assignment(8).tolist()
[[[[0], [1], [2], [3]], [[4], [5], [6], [7]]]]
>>> Tile(1, 2, 4, 1).shard_shape((2, 64, 64, 3))
(2, 32, 16, 3)

Leaves are not tuples, so ``tf.nest`` keeps each one whole. Parsing user forms (lists of
ints, ``None``) and checking them against tensors lives in ``spatial_tf.spec.validation``.
"""
import math
from typing import Tuple

import numpy as np

from spatial_tf.checks import check_int

__all__ = ["Tile", "PartialTile", "Replicate", "Assign"]


def _check_dims(cls_name, dims):
    if len(dims) == 1 and isinstance(dims[0], (list, tuple, np.ndarray)):
        dims = tuple(dims[0])  # Tile([1, 4, 1, 1]) reads the same as Tile(1, 4, 1, 1)
    return tuple(
        check_int(d, f"split count for axis {axis}", f"{cls_name}(1, 4, 1, 1) (1 = not split)",
                  where=cls_name)
        for axis, d in enumerate(dims)
    )


class _Leaf:
    """Common behaviour: immutability, equality by value, evaluable repr."""

    __slots__ = ()

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _key(self):
        return ()

    def __eq__(self, other):
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self):
        return hash((type(self).__name__, self._key()))

    def tile_assignment(self, num_cores):
        """Logical core ids laid out in the tiling's shape, or None if not tiled."""
        return None

    def shard_shape(self, global_shape):
        """Shape of the piece each core holds (the global shape if not tiled)."""
        return tuple(global_shape)


class Tile(_Leaf):
    """Split each axis into ``dims[i]`` pieces; one piece per logical core.

    The product of ``dims`` equals the number of cores per replica. Core ids are laid
    out in row-major order over the tiling, as ``TPUStrategy`` does.

    >>> Tile(1, 2, 2, 1).tile_assignment(4).reshape(-1).tolist()
    [0, 1, 2, 3]
    """

    __slots__ = ("dims",)
    dims: Tuple[int, ...]

    def __init__(self, *dims: int) -> None:
        object.__setattr__(self, "dims", _check_dims(type(self).__name__, dims))

    @property
    def num_splits(self):
        """How many distinct pieces the tensor is cut into."""
        return math.prod(self.dims)

    def _key(self):
        return self.dims

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(map(str, self.dims))})"

    def tile_assignment(self, num_cores):
        return np.arange(self.num_splits).reshape(self.dims)

    def shard_shape(self, global_shape):
        return tuple(
            None if s is None else s // d for s, d in zip(global_shape, self.dims)
        )


class PartialTile(Tile):
    """Split into ``prod(dims)`` pieces, each replicated on ``cores // prod(dims)`` cores.

    Uses XLA's partial-replication sharding: the tile assignment has one extra, last
    axis holding the replicas of each piece.

    >>> PartialTile(1, 2, 1, 1).tile_assignment(4).tolist()
    [[[[[0, 1]]], [[[2, 3]]]]]
    """

    __slots__ = ()

    def tile_assignment(self, num_cores):
        return np.arange(num_cores).reshape(self.dims + (num_cores // self.num_splits,))


class Replicate(_Leaf):
    """A full copy of the tensor on every logical core.

    >>> Replicate().shard_shape((8, 3))
    (8, 3)
    """

    __slots__ = ()

    def __repr__(self):
        return "Replicate()"


class Assign(_Leaf):
    """The whole tensor on one logical core (not allowed by TPUStrategy in SPMD mode).

    >>> Assign(3).core
    3
    """

    __slots__ = ("core",)
    core: int

    def __init__(self, core: int) -> None:
        core = check_int(core, "core", "Assign(0)", minimum=None,
                         expected="an int logical core id", where="Assign")
        if core < 0:
            raise ValueError(
                f"Assign: core is {core}; expected a logical core id >= 0. Fix: e.g. Assign(0)."
            )
        object.__setattr__(self, "core", core)

    def _key(self):
        return (self.core,)

    def __repr__(self):
        return f"Assign({self.core})"

