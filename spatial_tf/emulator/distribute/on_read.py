"""Variables each replica keeps its own copy of: one value per replica, read as aggregated.

TPUStrategy and MirroredStrategy keep a ``SyncOnReadVariable`` as one component per
replica: a step reads and writes its own replica's component, and a read outside the
step aggregates them as the variable's ``aggregation`` says (``SUM``: the sum, ``MEAN``:
the mean, ``ONLY_FIRST_REPLICA``: replica 0's; TensorFlow's
``distribute/values.py``, ``SyncOnReadVariable._get_cross_replica``). Keras keeps its
metrics so (``Mean``: ``total`` and ``count``, ``aggregation=SUM``), so each replica's
``result()`` in a step is its own running mean.

The same holds, on TPU, for a variable with ``aggregation=NONE`` written inside the step
(Keras 3 makes every model and optimizer variable so): ``TPUMirroredVariable`` then
assigns each replica's own copy with a raw assign op, no aggregation
(``tensorflow/python/distribute/tpu_values.py``; ``MirroredVariable`` does the same,
``values.py``, ``_on_write_update_replica``), so copies written from per-replica values,
such as batch-norm moving statistics, diverge; a read outside a step and a checkpoint
give the primary copy, replica 0's. Weights updated from all-reduced gradients stay equal.

The emulator's variable is one host variable; ``ReplicaValues`` keeps each replica's
component beside it and writes the aggregate into the host variable after each step, so
reads outside a step, checkpoints and ``numpy()`` see what TPUStrategy's would. A value
assigned to the host variable outside a step (``reset_state``, ``set_weights``, a
checkpoint restore; eagerly or in a ``tf.function``) is spread over the replicas as
TensorFlow's cross-replica assign does (``SUM``: value / R each; otherwise the value
each), whatever the value: ``watch`` marks every such assign of a variable the
emulator's scope created (``assign_add`` and ``assign_sub`` too, after which every
replica holds the host variable's new value).

>>> import numpy as np
>>> aggregate(tf.VariableAggregation.SUM, [np.array([1.0]), np.array([2.0])]).tolist()
[3.0]
"""
import contextlib
from typing import Dict, List, Set

import numpy as np
import tensorflow as tf

from spatial_tf._tf_internals import after_restore
from spatial_tf.emulator.distribute import replica

__all__ = ["ReplicaValues", "is_per_replica", "aggregate"]


def is_per_replica(variable) -> bool:
    """Whether each replica keeps its own copy of ``variable``: made with
    ``synchronization=ON_READ``, or with ``aggregation=NONE`` (written per replica)."""
    return (getattr(variable, "synchronization", None) == tf.VariableSynchronization.ON_READ
            or getattr(variable, "aggregation", None) == tf.VariableAggregation.NONE)


def aggregate(aggregation, per_replica: List[np.ndarray]) -> np.ndarray:
    """The value an ON_READ variable reads outside a step."""
    dtype = np.result_type(per_replica[0])
    if aggregation == tf.VariableAggregation.SUM:
        return np.sum(np.stack(per_replica), axis=0).astype(dtype)
    if aggregation == tf.VariableAggregation.MEAN:
        return (np.sum(np.stack(per_replica), axis=0) / len(per_replica)).astype(dtype)
    return per_replica[0]


class ReplicaValues:
    """Each replica's component of the ON_READ variables one emulator's steps use."""

    def __init__(self, num_replicas: int):
        self.num_replicas = num_replicas
        # variable ref -> (the components, the aggregate last written to the host variable)
        self._values: Dict = {}
        self._assigned: Set = set()  # variables assigned outside a step since the last
        self._writing = 0  # > 0 while the emulator writes the aggregates after a step

    def watch(self, variable) -> None:
        """Note every assign of ``variable`` made outside a step from now on, so that the
        next step gives every replica the assigned value (``components``)."""
        key = _key(variable)

        def mark():
            self._assigned.add(key)
            return np.int32(0)

        def note():
            if self._writing or replica.in_program():
                return
            if tf.executing_eagerly():
                mark()
            else:  # in a tf.function: noted each time it runs, not when traced
                tf.numpy_function(mark, [], tf.int32, stateful=True,
                                  name="cross_replica_assign")

        def noted(write):
            def assign(*args, **kwargs):
                result = write(*args, **kwargs)
                note()
                return result
            return assign

        for name in ("assign", "assign_add", "assign_sub"):
            setattr(variable, name, noted(getattr(variable, name)))
        after_restore(variable, note)

    @contextlib.contextmanager
    def writing_aggregates(self):
        """Around the emulator's own write of each step's aggregates to the host
        variables: not an assign outside a step."""
        self._writing += 1
        try:
            yield
        finally:
            self._writing -= 1

    def components(self, variable, host_value) -> List[np.ndarray]:
        """Replica ``r``'s value of ``variable`` at index ``r``, given the host variable's
        value now: the stored components, or the host value spread over the replicas
        after an assign outside a step (``watch``) or if the value differs from the last
        aggregate (a variable the emulator's scope did not create)."""
        host_value = np.asarray(host_value)
        key = _key(variable)
        stored = self._values.get(key)
        assigned = key in self._assigned
        self._assigned.discard(key)
        if (stored is not None and not assigned
                and np.array_equal(stored[1], host_value, equal_nan=True)):
            return stored[0]
        if (assigned or stored is not None) and variable.aggregation == tf.VariableAggregation.SUM:
            # assigned outside a step: TensorFlow's cross-replica assign of a SUM variable
            # gives each replica value / R, so that it reads back as the value
            spread = [(host_value / self.num_replicas).astype(host_value.dtype)]
        else:  # assigned, or as created: every replica the same value
            spread = [host_value]
        self._values[key] = (spread * self.num_replicas, host_value)
        return spread * self.num_replicas

    def update(self, variable, per_replica: List[np.ndarray]) -> np.ndarray:
        """Store each replica's new value; return the aggregate for the host variable."""
        per_replica = [np.asarray(v) for v in per_replica]
        value = aggregate(variable.aggregation, per_replica)
        self._values[_key(variable)] = (per_replica, value)
        return value


def _key(variable):
    """One key per variable, also for a ``handles.HandleVariable`` made again per trace."""
    return variable.handle.ref()
