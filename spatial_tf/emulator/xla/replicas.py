"""Several replicas: one program per replica, connected by cross-replica all-reduces.

With ``num_replicas = R`` the emulator traces the step once, as TPUStrategy does, with
one replica's shapes, and compiles it with ``num_replicas = R, num_partitions = C``:
replica ``r`` runs on devices ``r*C ... r*C + C - 1``, split over its ``C`` cores by
XLA's SPMD partitioner, and the replica context's sums become all-reduces across
replicas. ``prepare`` adapts the traced module to that layout; ``per_replica_calls``
gives each replica its arguments. (Each replica reads and writes its own copy of each
variable: ``copies.py``.)

>>> per_replica_calls((1.0,), None, 2, lambda v: (v,))
[((1.0,), {}), ((1.0,), {})]
"""
import numpy as np
import tensorflow as tf

from spatial_tf._tf_internals import hlo_pb2, xla_data_pb2

__all__ = ["prepare", "per_replica_calls"]

_OpSharding = xla_data_pb2.OpSharding


def prepare(hlo, num_replicas):
    """The serialized module ``hlo`` ready to compile for ``num_replicas`` replicas.

    - the emulator's cross-replica sums (``CollectiveReduceV2``) lose their channel id, so
      XLA reads them as cross-replica all-reduces (each core of a replica sums its own
      piece with the same piece of the other replicas);
    - parameters and results are whole within each replica: jax's runtime describes
      shardings over all devices and cannot express "split within each replica".
    """
    if num_replicas == 1:
        return hlo
    module = hlo_pb2.HloModuleProto.FromString(hlo)
    for computation in module.computations:
        for instruction in computation.instructions:
            if (instruction.opcode == "all-reduce"
                    and instruction.metadata.op_type == "CollectiveReduceV2"):
                instruction.channel_id = 0
        if computation.id != module.entry_computation_id:
            continue
        for instruction in computation.instructions:
            if instruction.opcode == "parameter" or instruction.id == computation.root_id:
                _replicate(instruction.sharding, instruction.shape)
    return module.SerializeToString()


def _replicate(sharding, shape):
    sharding.Clear()
    if shape.tuple_shapes:
        sharding.type = _OpSharding.TUPLE
        for element in shape.tuple_shapes:
            _replicate(sharding.tuple_shardings.add(), element)
    else:
        sharding.type = _OpSharding.REPLICATED


def per_replica_calls(args, kwargs, num_replicas, local_results):
    """``[(args, kwargs)]`` for each replica: distributed values give each replica its
    own component (``local_results(value)``), everything else (distributed variables
    too) is passed to every replica.

    A per-replica Python number or string is passed as a tensor, as ``TPUStrategy.run``
    converts its inputs (each replica's own value, in one compiled program).

    >>> from spatial_tf._tf_internals import values
    >>> ids = values.PerReplica((0, 1))
    >>> [args[0] for args, _ in per_replica_calls((ids,), None, 2, lambda v: v.values)]
    [<tf.Tensor: shape=(), dtype=int32, numpy=0>, <tf.Tensor: shape=(), dtype=int32, numpy=1>]

    Raises:
      ValueError: a distributed value has another number of components.
    """
    tree = (tuple(args), dict(kwargs or {}))
    leaves = tf.nest.flatten(tree)
    columns = []
    for leaf in leaves:
        # a distributed variable goes whole to every replica, as in TPUStrategy.run
        if (isinstance(leaf, tf.distribute.DistributedValues)
                and not isinstance(leaf, tf.Variable)):
            parts = tuple(local_results(leaf))
            if len(parts) != num_replicas:
                raise ValueError(
                    f"strategy.run: an argument holds {len(parts)} per-replica values but "
                    f"the emulator runs num_replicas={num_replicas}. Fix: make the values "
                    f"with this emulator (its experimental_distribute_dataset or "
                    f"experimental_distribute_values_from_function)."
                )
            columns.append(tuple(_as_tensor(p) for p in parts))
        else:
            columns.append((leaf,) * num_replicas)
    return [tf.nest.pack_sequence_as(tree, [c[r] for c in columns]) for r in range(num_replicas)]


# what a per-replica value may hold that is passed as a tensor, not as a Python constant
_PYTHON_VALUES = (bool, int, float, complex, str, bytes, np.generic)


def _as_tensor(value):
    """``value`` as a tensor if it is a Python (or numpy) scalar or string, else itself."""
    return tf.convert_to_tensor(value) if isinstance(value, _PYTHON_VALUES) else value
