"""TPU topologies: named synthetic slices, computation-shape choice, DeviceAssignment.

Nothing here needs a TPU: a ``tf.tpu.experimental.Topology`` (synthetic or returned by
``tf.tpu.experimental.initialize_tpu_system``) is enough.

>>> from spatial_tf import topology
>>> t = topology.synthetic("v3-32")
>>> choice = topology.choose(t, num_cores_per_replica=8)
>>> list(choice.computation_shape), choice.num_replicas
([2, 2, 1, 2], 4)
>>> topology.device_assignment(t, num_cores_per_replica=8).num_replicas
4
"""
from spatial_tf.topology.assignment import (Choice, check_exactly_one, check_vector, choose,
                                           device_assignment, slice_label)
from spatial_tf.topology.hosts import HostFeed, batch_hints, host_feeds, input_contexts
from spatial_tf.topology.placement import describe
from spatial_tf.topology.shapes import valid_core_counts
from spatial_tf.topology.slices import (
    ALIASES,
    SLICES,
    SliceShape,
    SyntheticTopology,
    canonical_name,
    synthetic,
)

__all__ = [
    "synthetic",
    "SLICES",
    "ALIASES",
    "canonical_name",
    "SliceShape",
    "SyntheticTopology",
    "choose",
    "Choice",
    "device_assignment",
    "slice_label",
    "describe",
    "host_feeds",
    "HostFeed",
    "input_contexts",
    "batch_hints",
    "valid_core_counts",
    "check_exactly_one",
    "check_vector",
]
