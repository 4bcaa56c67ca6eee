"""Several replicas: one program per replica, connected by cross-replica all-reduces.

With ``num_replicas = R`` the emulator traces the step once, as TPUStrategy does, with
one replica's shapes, and compiles it with ``num_replicas = R, num_partitions = C``:
replica ``r`` runs on devices ``r*C ... r*C + C - 1``, split over its ``C`` cores by
XLA's SPMD partitioner, and the replica context's sums become all-reduces across
replicas. ``prepare`` adapts the traced module to that layout; ``combine_updates``
merges the replicas' new values of a variable as its ``aggregation`` says.

>>> import numpy as np, tensorflow as tf
>>> combine_updates(tf.VariableAggregation.MEAN, np.zeros(2), [np.ones(2), 3 * np.ones(2)])
array([2., 2.])
"""
import numpy as np
import tensorflow as tf

from spatial_tf._tf_internals import hlo_pb2, xla_data_pb2

__all__ = ["prepare", "combine_updates", "per_replica_calls"]

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


def combine_updates(aggregation, old, per_replica):
    """One new value of a variable from each replica's, as ``aggregation`` says.

    ``MEAN``: the average (``MirroredStrategy`` averages such writes across replicas);
    ``SUM``: the old value plus every replica's change; ``NONE`` and
    ``ONLY_FIRST_REPLICA``: replica 0's value. (The emulator's runner keeps variables
    with ``aggregation=NONE`` or ``synchronization=ON_READ`` per replica instead, see
    ``on_read.py``; their host value is what this gives.)
    """
    if len(per_replica) == 1:
        return per_replica[0]
    if aggregation == tf.VariableAggregation.MEAN:
        total = np.sum(np.stack(per_replica), axis=0, dtype=np.result_type(old))
        return (total / len(per_replica)).astype(np.result_type(old))
    if aggregation == tf.VariableAggregation.SUM:
        changes = np.sum(np.stack(per_replica) - old, axis=0)
        return (old + changes).astype(np.result_type(old))
    return per_replica[0]


def per_replica_calls(args, kwargs, num_replicas, local_results):
    """``[(args, kwargs)]`` for each replica: distributed values give each replica its
    own component (``local_results(value)``), everything else is passed to every replica.

    Raises:
      ValueError: a distributed value has another number of components.
    """
    tree = (tuple(args), dict(kwargs or {}))
    leaves = tf.nest.flatten(tree)
    columns = []
    for leaf in leaves:
        if isinstance(leaf, tf.distribute.DistributedValues):
            parts = tuple(local_results(leaf))
            if len(parts) != num_replicas:
                raise ValueError(
                    f"strategy.run: an argument holds {len(parts)} per-replica values but "
                    f"the emulator runs num_replicas={num_replicas}. Fix: make the values "
                    f"with this emulator (its experimental_distribute_dataset or "
                    f"experimental_distribute_values_from_function)."
                )
            columns.append(parts)
        else:
            columns.append((leaf,) * num_replicas)
    return [tf.nest.pack_sequence_as(tree, [c[r] for c in columns]) for r in range(num_replicas)]
