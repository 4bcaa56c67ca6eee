"""The replica context a step function sees while the emulator traces it.

Inside ``Emulator.run`` the step is traced once, as one replica's program, inside an
``EmulatedReplicaContext``: ``tf.distribute.get_replica_context()`` returns it, with
``num_replicas_in_sync`` the emulator's replica count, ``replica_id_in_sync_group``
(XLA's replica id when there are several replicas), and ``all_reduce`` / ``merge_call``
as ``TPUStrategy`` has them. Cross-replica sums become XLA all-reduces across the
replicas of the compiled program (``all_reduce`` below), exactly where TPUStrategy puts
them, so Keras optimizers, ``tf.nn.compute_average_loss`` and synchronized batch norm
behave as on a pod.

>>> import tensorflow as tf
>>> in_program()
False
"""
import contextlib
import itertools
import threading

import tensorflow as tf

from spatial_tf import context, logs
from spatial_tf.emulator.distribute import pieces

__all__ = ["EmulatedReplicaContext", "in_program", "all_reduce", "broadcast_first"]

_state = threading.local()
_instance_keys = itertools.count(1)
# group key of the emulator's cross-replica sums; the compiled program has one group
_GROUP_KEY = 7301


def in_program():
    """True while an emulated step is being traced (its collectives run inside XLA)."""
    return getattr(_state, "depth", 0) > 0


@contextlib.contextmanager
def tracing_program():
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


@contextlib.contextmanager
def tracing(emulator):
    """Around tracing a step for ``emulator``: its scope and replica context, no TF logs."""
    with context.logical_device_scope(emulator), emulator.scope(), tracing_program(), \
            logs.quiet():
        yield


@pieces.checked_hooks
class EmulatedReplicaContext(pieces.ReplicaContext):
    """``tf.distribute.ReplicaContext`` of one emulated replica (see module doc).

    ``replica_id``: by default the replica the program runs as (XLA's replica id with
    several replicas); 0 for ``extended.call_for_each_replica``, which calls its
    function in replica 0's context, as TPUStrategy's ``_TPUReplicaContext`` does.
    """

    def __init__(self, strategy, replica_id=None):
        if replica_id is None:
            replicas = strategy.num_replicas_in_sync
            replica_id = 0 if replicas == 1 else pieces.xla_replica_id()
        super().__init__(strategy, replica_id_in_sync_group=replica_id)

    @property
    @pieces.tf_hook
    def devices(self):
        return (self._strategy.extended.worker_devices[0],)

    @pieces.tf_hook
    def _merge_call(self, merge_fn, args, kwargs):
        if not in_program():  # called now (call_for_each_replica): TensorFlow's errors
            return super()._merge_call(merge_fn, args, kwargs)
        try:
            return super()._merge_call(merge_fn, args, kwargs)
        except (AttributeError, NotImplementedError, TypeError) as e:
            name = getattr(merge_fn, "__qualname__", repr(merge_fn))
            raise type(e)(
                f"merge_call({name}): the merge function failed while the emulator traced "
                f"the step as one XLA program: {e}. On TPU, too, it runs inside the "
                f"compiled program, on symbolic tensors. Expected TensorFlow ops only. Fix: "
                f"no .numpy() or Python decisions on tensor values in it; do host work "
                f"after strategy.run returns."
            ) from e


def all_reduce(reduce_op, value, num_replicas):
    """``value`` summed (or averaged) over the replicas of the program being traced.

    Lowered to an XLA all-reduce across replicas: ``CollectiveReduceV2`` compiles for any
    numeric dtype, and ``replicas.prepare`` makes it cross-replica only (never across the
    cores of one replica, whose pieces are different parts of the same tensor).
    """
    if isinstance(value, tf.IndexedSlices):
        value = tf.convert_to_tensor(value)
    if num_replicas == 1:
        return tf.identity(value)
    total = tf.raw_ops.CollectiveReduceV2(
        input=value, group_size=num_replicas, group_key=_GROUP_KEY,
        instance_key=next(_instance_keys), ordering_token=[], merge_op="Add", final_op="Id",
    )
    if reduce_op == tf.distribute.ReduceOp.MEAN:
        if value.dtype.is_integer:
            return total // num_replicas
        return total / tf.cast(num_replicas, value.dtype)
    return total


def broadcast_first(value, num_replicas):
    """Replica 0's ``value`` on every replica of the program being traced: a cross-replica
    sum of ``value`` on replica 0 and zeros elsewhere (TPUStrategy broadcasts with an
    all-to-all; either is one collective in the program)."""
    value = tf.convert_to_tensor(value)
    if num_replicas == 1:
        return tf.identity(value)
    dtype = value.dtype
    if dtype == tf.bool:
        value = tf.cast(value, tf.int32)
    first = tf.equal(pieces.xla_replica_id(), 0)
    total = all_reduce(tf.distribute.ReduceOp.SUM, tf.where(first, value, tf.zeros_like(value)),
                       num_replicas)
    return tf.cast(total, dtype) if dtype == tf.bool else total
