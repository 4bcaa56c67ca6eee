"""Variables made in an ``Emulator``'s scope: distributed variables, as TPUStrategy makes.

Under ``TPUStrategy`` a variable created in the scope is a ``TPUMirroredVariable``
(``synchronization`` ON_WRITE or AUTO) or a ``TPUSyncOnReadVariable`` (ON_READ), a
``tf.distribute.DistributedValues`` with one component per replica; ``NONE`` is refused.
The emulator builds them as TPUStrategy does, with TensorFlow's own
``distribute_utils.create_mirrored_variable`` and class mapping; only where the
components live differs. With XLA SPMD and several logical cores per replica, each
component is a ``TPUReplicatedVariable`` whose ``variables`` are the replica's copy on
each core (``ReplicaOnCores`` here).

The emulator keeps one host variable per replica, on the host CPU: replica ``r``'s
copy (``host_copies``). The cores of a replica hold the same value under SPMD, so each
core's entry of a ``ReplicaOnCores`` is that one host variable. A step is traced once,
as one replica's program, and reads and writes the replica's own copy: the program
takes replica 0's copy as its parameter (one per variable, whatever the replica count),
each replica is fed its own copy's value, and each replica's new value is written back
to its own copy (``ReplicaCopies``, which the runner asks).

>>> import tensorflow as tf
>>> import spatial_tf
>>> emulator = spatial_tf.Emulator(num_cores_per_replica=2, num_replicas=2)
>>> with emulator.scope():
...     v = tf.Variable(1.0)
>>> type(v).__name__, len(v.values), len(v.values[0].variables)
('TPUMirroredVariable', 2, 2)
>>> [float(c.read_value()) for c in emulator.experimental_local_results(v)]
[1.0, 1.0]
"""
import contextlib
import weakref
from typing import Any, List, Optional, Tuple

import tensorflow as tf

from spatial_tf.emulator.distribute import pieces, replica

__all__ = ["ReplicaOnCores", "create", "host_copies", "ReplicaCopies"]


@pieces.checked_hooks
class ReplicaOnCores(pieces.TPUReplicatedVariable):
    """One replica's component under XLA SPMD: ``variables`` holds its copy on each of the
    replica's ``num_cores`` logical cores, here the one host variable ``variable``.

    TensorFlow's ``TPUReplicatedVariable`` reads and writes its variables through a TPU
    replicate context; the emulator's program is that context, so ``handle`` is the
    host variable's, ``value()`` reads it in a step and an update writes it once.

    >>> v = ReplicaOnCores(tf.Variable([1.0, 2.0]), num_cores=4, name="w/r:0")
    >>> len(v.variables), v.assign_add([1.0, 1.0]).numpy().tolist()
    (4, [2.0, 3.0])
    """

    def __init__(self, variable: tf.Variable, num_cores: int, name: str) -> None:
        super().__init__([variable] * num_cores, name=name)

    @property
    def handle(self):
        return self.variables[0].handle

    def value(self):
        """The replica's value in a step (TensorFlow's class has no ``value()`` outside
        a TPU computation, and neither has this one outside a step)."""
        if replica.in_program():
            return self.variables[0].value()
        return super().value()

    @pieces.tf_hook
    def _update(self, update_fn, value, **kwargs):
        return update_fn(self.variables[0], value, **kwargs)


def host_copies(variable) -> Tuple[tf.Variable, ...]:
    """The host variable of each replica of a distributed ``variable``, in replica order.

    >>> host_copies(ReplicaOnCores(tf.Variable(1.0, name="w"), 2, "w/r:0"))[0].name
    'w:0'
    """
    components = getattr(variable, "values", (variable,))
    return tuple(c.variables[0] if isinstance(c, ReplicaOnCores) else c for c in components)


def create(strategy, next_creator, num_cores: int, device: str, kwargs: dict):
    """The distributed variable ``TPUStrategy`` would make for ``kwargs`` (those of
    ``tf.Variable``), with one host variable per replica of ``strategy`` on ``device``."""
    creator = _components(next_creator, strategy.num_replicas_in_sync, num_cores, device)
    return pieces.create_mirrored_variable(
        strategy, creator, pieces.TPU_VARIABLE_CLASS_MAPPING,
        pieces.TPU_VARIABLE_POLICY_MAPPING, **kwargs)


def _components(next_creator, num_replicas, num_cores, device):
    """The per-replica creator ``create_mirrored_variable`` calls: every replica's copy
    starts from the one initial value, computed once (``TPUExtended._create_variable``)."""

    def create_components(**kwargs):
        initial_value = kwargs["initial_value"]
        with _maybe_init_scope():
            initial_value = initial_value() if callable(initial_value) else initial_value
        copies: List[Any] = []
        for r in range(num_replicas):
            kwargs["initial_value"] = initial_value
            if r:  # as TPUStrategy names them; the trailing "/" ignores name scopes
                kwargs["name"] = f"{_base_name(copies[0])}/replica_{r}/"
            with tf.device(device):
                copies.append(next_creator(**kwargs))
        if num_cores == 1:
            return copies
        return [ReplicaOnCores(v, num_cores, f"{_base_name(copies[0])}/r:{r}")
                for r, v in enumerate(copies)]

    return create_components


def _base_name(variable):
    return variable.name.split(":")[0]


@contextlib.contextmanager
def _maybe_init_scope():
    """``init_scope`` unless eager outside functions (``tpu_strategy.maybe_init_scope``)."""
    if tf.compat.v1.executing_eagerly_outside_functions():
        yield
    else:
        with tf.init_scope():
            yield


class ReplicaCopies:
    """The distributed variables one emulator's scope made, found from what a traced step
    captured: replica 0's host variable, or its handle.

    >>> import spatial_tf
    >>> emulator = spatial_tf.Emulator(num_cores_per_replica=1, num_replicas=2)
    >>> with emulator.scope():
    ...     v = tf.Variable(1.0)
    >>> [c.name for c in emulator.replica_copies.of(v.values[0])]
    ['Variable:0', 'Variable/replica_1:0']
    >>> emulator.replica_copies.of(tf.Variable(1.0)) is None
    True
    """

    def __init__(self) -> None:
        # id(replica 0's handle) -> weak reference to the distributed variable
        self._by_handle: dict = {}

    def add(self, variable) -> None:
        """Note a distributed variable the emulator's scope made."""
        key = id(host_copies(variable)[0].handle)

        def forget(ref):  # unless the key was reused by a newer variable
            if self._by_handle.get(key) is ref:
                del self._by_handle[key]

        self._by_handle[key] = weakref.ref(variable, forget)

    def of(self, captured) -> Optional[Tuple[tf.Variable, ...]]:
        """Every replica's host variable of the distributed variable whose replica 0 copy
        ``captured`` is (a variable, or anything with its ``handle``), else None."""
        handle = getattr(captured, "handle", None)
        ref = self._by_handle.get(id(handle)) if handle is not None else None
        variable = ref() if ref is not None else None
        if variable is None:
            return None
        copies = host_copies(variable)
        return copies if copies[0].handle is handle else None
