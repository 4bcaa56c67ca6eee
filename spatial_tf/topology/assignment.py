"""Choose a computation shape for a TPU slice and build its ``DeviceAssignment``.

``choose`` checks the request against the slice and returns a ``Choice``: the shape, how
many replicas, and why. ``device_assignment`` builds the
``tf.tpu.experimental.DeviceAssignment`` from it, exactly what ``tpu_strategy`` uses.
Neither touches a TPU.

>>> from spatial_tf.topology import synthetic
>>> choice = choose(synthetic("v3-32"), num_cores_per_replica=8)
>>> choice.computation_shape, choice.num_replicas
((2, 2, 1, 2), 4)
>>> da = device_assignment(synthetic("v4-32"), num_cores_per_replica=4)
>>> da.num_replicas, da.num_cores_per_replica
(4, 4)
"""
import dataclasses
from typing import Any, Optional, Sequence, Tuple
import logging
import math
import numbers

import numpy as np
import tensorflow as tf

from spatial_tf.checks import CORE_COUNTS, check_int, is_power_of_two
from spatial_tf.spec import MAX_CORES_PER_REPLICA
from spatial_tf.table import plural
from spatial_tf.topology.shapes import max_replicas, rank_shapes, valid_core_counts

__all__ = [
    "Choice",
    "choose",
    "device_assignment",
    "slice_label",
    "check_exactly_one",
    "check_vector",
]

log = logging.getLogger("spatial_tf")

_AXES = ("x", "y", "z", "core")


@dataclasses.dataclass(frozen=True)
class Choice:
    """A computation shape chosen for a slice, how many replicas, and why."""

    topology: object = dataclasses.field(repr=False)
    computation_shape: tuple
    computation_stride: tuple
    num_replicas: int
    max_replicas: int
    reason: str
    alternatives: tuple = ()  # other shapes with the same core count, best first

    @property
    def num_cores_per_replica(self):
        return math.prod(self.computation_shape)

    def device_assignment(self):
        """The ``tf.tpu.experimental.DeviceAssignment`` for this choice."""
        return tf.tpu.experimental.DeviceAssignment.build(
            self.topology,
            computation_shape=list(self.computation_shape),
            computation_stride=list(self.computation_stride),
            num_replicas=self.num_replicas,
        )


def slice_label(topology: Any) -> str:
    """``'v3-8'`` for a synthetic slice, else a description from the mesh shape."""
    name = getattr(topology, "name", None)
    if isinstance(name, str):
        return name
    mesh = [int(m) for m in topology.mesh_shape]
    return f"this TPU slice (mesh_shape {mesh})"


def choose(
    topology: tf.tpu.experimental.Topology,
    *,
    computation_shape: Optional[Sequence[int]] = None,
    num_cores_per_replica: Optional[int] = None,
    num_replicas: Optional[int] = None,
    computation_stride: Optional[Sequence[int]] = None,
) -> "Choice":
    """Check the request against ``topology`` and return a ``Choice``.

    Give exactly one of ``computation_shape`` (``[x, y, z, cores]``, as
    ``DeviceAssignment.build`` takes it) and ``num_cores_per_replica`` (the shape is then
    chosen from the mesh). ``num_replicas`` defaults to all that fit. Errors name the
    slice, the request and the valid alternatives.
    """
    if not isinstance(topology, tf.tpu.experimental.Topology):
        raise TypeError(
            f"topology is {topology!r} ({type(topology).__name__}); expected a "
            f"tf.tpu.experimental.Topology, e.g. spatial_tf.topology.synthetic('v3-8') "
            f"or the value tf.tpu.experimental.initialize_tpu_system returns."
        )
    label = slice_label(topology)
    check_exactly_one(computation_shape, num_cores_per_replica, label)
    mesh = [int(m) for m in topology.mesh_shape]
    stride = check_vector(computation_stride, "computation_stride", label, mesh, default=1)
    if computation_shape is not None:
        shape = check_vector(computation_shape, "computation_shape", label, mesh)
        ranked = _check_given_shape(topology, label, shape, stride)
    else:
        n = _check_core_count(topology, label, num_cores_per_replica, stride)
        ranked = rank_shapes(topology, n, stride)
    best, others = ranked[0], ranked[1:]
    limit = max_replicas(topology.mesh_shape, best.shape, stride)
    if topology.missing_devices.size:  # TensorFlow then fills present cores in task order
        present = topology.num_tasks * topology.num_tpus_per_task
        limit = min(limit, present // math.prod(best.shape))
    replicas = _check_replicas(label, num_replicas, limit, best.shape)
    reason = _reason(topology, best, others, replicas, limit, stride, computation_shape)
    choice = Choice(
        topology, best.shape, stride, replicas, limit, reason,
        tuple(r.shape for r in others),
    )
    log.info("%s: computation_shape %s, %s: %s", label,
             list(best.shape), plural(replicas, "replica"), reason)
    return choice


def device_assignment(
    topology: tf.tpu.experimental.Topology,
    *,
    computation_shape: Optional[Sequence[int]] = None,
    num_cores_per_replica: Optional[int] = None,
    num_replicas: Optional[int] = None,
    computation_stride: Optional[Sequence[int]] = None,
) -> tf.tpu.experimental.DeviceAssignment:
    """Return the ``tf.tpu.experimental.DeviceAssignment`` for the request (see ``choose``).

    >>> from spatial_tf.topology import synthetic
    >>> da = device_assignment(synthetic("v3-8"), num_cores_per_replica=2)
    >>> da.num_replicas, [list(map(int, c)) for c in da.core_assignment[0]]
    (4, [[0, 0, 0, 0], [0, 0, 0, 1]])
    """
    return choose(
        topology,
        computation_shape=computation_shape,
        num_cores_per_replica=num_cores_per_replica,
        num_replicas=num_replicas,
        computation_stride=computation_stride,
    ).device_assignment()


# ---------------------------------------------------------------- argument checks


def check_exactly_one(computation_shape: Optional[Sequence[int]],
                      num_cores_per_replica: Optional[int], label: str) -> None:
    """Raise unless exactly one of the two ways to size a replica is given."""
    if (computation_shape is None) == (num_cores_per_replica is None):
        given = "both" if computation_shape is not None else "neither"
        raise ValueError(
            f"{label}: got {given} of computation_shape= and num_cores_per_replica=; "
            f"pass exactly one. Fix: e.g. num_cores_per_replica=8 (the shape is chosen "
            f"from the slice) or computation_shape=[2, 2, 1, 2]."
        )


def check_vector(value: Any, name: str, label: str, mesh: Optional[Sequence[int]] = None,
                 default: Optional[int] = None) -> Tuple[int, ...]:
    """``value`` as a tuple of 4 positive ints ``[x, y, z, cores_per_chip]``, or raise."""
    if value is None and default is not None:
        return (default,) * 4
    items = list(value) if isinstance(value, (list, tuple, np.ndarray)) else None
    if items is None or any(
        isinstance(v, bool) or not isinstance(v, numbers.Integral) for v in items
    ):
        raise TypeError(
            f"{label}: {name}={value!r} ({type(value).__name__}); expected 4 ints "
            f"[x, y, z, cores_per_chip], e.g. {name}=[2, 2, 1, 2]."
        )
    if len(items) != 4 or any(v < 1 for v in items):
        axes = f" of mesh_shape {mesh}" if mesh is not None else " of the TPU mesh"
        hint = (
            " TPUEstimator's 3-entry form [x, y, cores] is [x, y, 1, cores] here."
            if len(items) == 3 else ""
        )
        raise ValueError(
            f"{label}: {name}={items} must have 4 positive entries [x, y, z, "
            f"cores_per_chip], one per axis{axes}.{hint} Fix: e.g. {name}=[2, 2, 1, 2]."
        )
    return tuple(int(v) for v in items)


def _valid_counts_text(topology, stride):
    return ", ".join(map(str, valid_core_counts(topology, MAX_CORES_PER_REPLICA, stride)))


def _check_core_count(topology, label, n, stride):
    total = int(np.prod(topology.mesh_shape))
    valid = f"Valid values for {label}: {_valid_counts_text(topology, stride)}."
    n = check_int(n, "num_cores_per_replica", f"num_cores_per_replica=8. {valid}",
                  minimum=None, expected="an int", where=label, as_argument=True)
    if not is_power_of_two(n):
        raise ValueError(
            f"{label}: num_cores_per_replica={n} is not a positive power of two. {valid} "
            f"Fix: pass one of these."
        )
    if n > total:
        raise ValueError(
            f"{label} has {total} cores; num_cores_per_replica={n} does not fit. {valid} "
            f"Fix: pass one of these, or use a larger slice."
        )
    if n > MAX_CORES_PER_REPLICA:
        raise ValueError(
            f"{label}: num_cores_per_replica={n} is more than {MAX_CORES_PER_REPLICA}, "
            f"the most TPUConfig allows per replica. {valid} Fix: pass one of these."
        )
    if not rank_shapes(topology, n, stride):
        mesh = [int(m) for m in topology.mesh_shape]
        raise ValueError(
            f"{label}: no block of {n} cores tiles mesh_shape {mesh} with "
            f"computation_stride {list(stride)}. {valid} Fix: pass one of these, or "
            f"another computation_stride."
        )
    return n


def _check_given_shape(topology, label, shape, stride):
    n = math.prod(shape)
    mesh = [int(m) for m in topology.mesh_shape]
    request = f"computation_shape={list(shape)}"
    if n not in CORE_COUNTS:  # its entries are positive (check_vector)
        raise ValueError(
            f"{label}: {request} has {n} cores per replica; expected a power of two up "
            f"to {MAX_CORES_PER_REPLICA}. Valid core counts for {label}: "
            f"{_valid_counts_text(topology, stride)}. Fix: give a computation_shape "
            f"with one of these core counts, or num_cores_per_replica= instead."
        )
    ranked = rank_shapes(topology, n, stride)
    alternatives = ", ".join(str(list(r.shape)) for r in ranked) or "none"
    for axis, m, s, st in zip(_AXES, mesh, shape, stride):
        if s * st > m or m % (s * st):
            problem = (
                f"axis {axis} needs {s * st} but the slice has {m}"
                if s * st > m
                else f"axis {axis} ({m}) is not a multiple of {s * st}, so "
                f"{m % (s * st)} of every {m} would sit idle"
            )
            raise ValueError(
                f"{label}: {request} does not fit mesh_shape {mesh} "
                f"(computation_stride {list(stride)}): {problem}. Valid computation "
                f"shapes with {n} cores for {label}: {alternatives}. Fix: pass one of "
                f"these, or num_cores_per_replica={n} to let the shape be chosen."
            )
    given = next(r for r in ranked if r.shape == shape)
    return [given] + [r for r in ranked if r.shape != shape]


def _check_replicas(label, num_replicas, limit, shape):
    if num_replicas is None:
        return limit
    check_int(num_replicas, "num_replicas", f"num_replicas={limit}, or None for all that fit",
              minimum=None, expected=f"an int from 1 to {limit}", where=label, as_argument=True)
    if not 1 <= num_replicas <= limit:
        raise ValueError(
            f"{label}: num_replicas={num_replicas}, but at most {plural(limit, 'replica')} of "
            f"computation_shape {list(shape)} fit. Valid values: 1 to {limit} "
            f"(or None for {limit}). Fix: pass one of these, or fewer cores per replica "
            f"for more replicas."
        )
    return int(num_replicas)


# ---------------------------------------------------------------- explanation


def _reason(topology, best, others, replicas, limit, stride, given):
    x, y, z, c = best.shape
    n = math.prod(best.shape)
    mesh = [int(m) for m in topology.mesh_shape]
    if mesh[3] == 1:
        per_chip = "one device per chip"
    elif c == mesh[3]:
        per_chip = f"all {c} cores of each chip"
    else:
        per_chip = f"{c} of the {mesh[3]} cores of each chip"
    head = "requested" if given is not None else "most compact block"
    text = (
        f"{head}: {plural(n, 'core')} as a {x}x{y}x{z} block of chips with {per_chip} "
        f"(surface {best.surface}, at most {plural(best.span - 3, 'hop')} apart, "
        f"{plural(best.hosts, 'host')} per replica)"
    )
    if stride != (1, 1, 1, 1):
        text += f", cores {list(stride)} apart"
    text += (f"; {plural(limit, 'replica tiles', 'replicas tile')} the "
             f"{mesh[0]}x{mesh[1]}x{mesh[2]} chip mesh")
    if replicas < limit:
        text += f", {replicas} used ({plural((limit - replicas) * n, 'core')} idle)"
    if given is None and others:
        runner_up = others[0]
        text += f"; next best {list(runner_up.shape)} ({_why_worse(best, runner_up)})"
    if topology.missing_devices.size:
        text += (
            f"; the slice reports {plural(len(topology.missing_devices), 'missing core')}, so "
            f"TensorFlow assigns cores in task order and the block shape is not kept"
        )
    return text


def _why_worse(best, other):
    if other.shape[3] < best.shape[3]:
        return "splits chips' cores across replicas"
    if other.surface > best.surface:
        return f"surface {other.surface}"
    if other.span > best.span:
        return f"up to {other.span - 3} hops"
    if other.hosts > best.hosts:
        return f"spans {other.hosts} hosts"
    return "equally compact; tie broken towards y"

