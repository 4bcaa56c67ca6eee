"""How an ``Emulator`` updates the distributed variables of its scope, as TPUStrategy does.

``TPUExtended._update`` (``tensorflow/python/distribute/tpu_strategy.py``) has two cases,
and so has ``update`` here:

- outside a step (a cross-replica ``assign``, ``strategy.extended.update``, a
  checkpoint restore): every replica's copy is written, each under an
  ``UpdateContext`` for its replica, as TPUStrategy does outside a TPU context;
- inside a step: the program is one replica's and writes that replica's copy (its
  parameter, replica 0's host variable while tracing; see ``variables.py``), as
  TPUStrategy writes the replicated handle inside its TPU context.

TensorFlow's own variable classes decide the rest: an update in a step of a variable
with ``aggregation`` SUM or MEAN goes through ``merge_call`` and a cross-replica sum (an
all-reduce in the program), ONLY_FIRST_REPLICA through ``broadcast_to`` (replica 0's
value, broadcast in the program), NONE writes each replica's own copy.

``checked_assigns`` makes ``assign``, ``assign_add`` and ``assign_sub`` refuse a value of
another shape or dtype in one line naming the variable, before any copy is written.

>>> import spatial_tf
>>> emulator = spatial_tf.Emulator(num_cores_per_replica=1, num_replicas=2)
>>> with emulator.scope():
...     v = tf.Variable([1.0, 2.0], name="w")
>>> v.assign([3.0, 4.0, 5.0])  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: assign to the variable 'w' (float32, shape (2,)): the value has shape (3,); ...
"""
import functools

import tensorflow as tf

from spatial_tf.emulator.distribute import pieces, replica
from spatial_tf.emulator.distribute.variables import host_copies

__all__ = ["update", "update_non_slot", "broadcast_to", "checked_assigns"]


def update(extended, local_results, var, fn, args, kwargs, group):
    """``extended.update(var, fn, args, kwargs, group)``: ``fn(copy, *args, **kwargs)``
    for the copy (or copies) of ``var`` the current context writes. ``local_results``:
    the extended object's, for results that are not grouped."""
    if replica.in_program() or not isinstance(var, pieces.DistributedVariable):
        target = var.values[0] if isinstance(var, pieces.DistributedVariable) else var
        with pieces.UpdateContext(0 if replica.in_program() else None):
            result = fn(target, *args, **kwargs)
        return result if group else tf.nest.map_structure(local_results, result)
    if (var.synchronization != tf.VariableSynchronization.ON_READ
            and var.aggregation != tf.VariableAggregation.NONE):
        pieces.assert_mirrored(args)
        pieces.assert_mirrored(kwargs)
    updates = []
    for i, component in enumerate(var.values):
        with tf.device(component.device), pieces.UpdateContext(i), tf.name_scope(f"update_{i}"):
            updates.append(fn(component, *pieces.select_replica(i, args),
                              **pieces.select_replica(i, kwargs)))
    return pieces.update_regroup(extended, updates, group)


def update_non_slot(local_results, device, fn, args, kwargs, group):
    """``fn(*args, **kwargs)`` in cross-replica context with no replica chosen, so that
    the distributed variables it assigns are written whole (``TPUExtended``)."""
    with tf.device(device), pieces.UpdateContext(None):
        result = fn(*args, **kwargs)
    return result if group else tf.nest.map_structure(local_results, result)


def broadcast_to(tensor, num_replicas):
    """Replica 0's ``tensor`` on every replica inside a step (what an ONLY_FIRST_REPLICA
    variable is written with); outside a step, ``tensor``. Python numbers are kept as
    they are, so that their dtype follows the variable's."""
    if isinstance(tensor, (float, int)) or not replica.in_program():
        return tensor
    return replica.broadcast_first(tensor, num_replicas)


def checked_assigns(variable) -> None:
    """Make ``variable.assign``, ``assign_add`` and ``assign_sub`` check the value's shape
    and dtype first (the instance's methods, so that its class stays TensorFlow's)."""
    for method in ("assign", "assign_add", "assign_sub"):
        setattr(variable, method, _checked(variable, method, getattr(variable, method)))


def _checked(variable, method, write):
    @functools.wraps(write)
    def checked(value, *args, **kwargs):
        return write(checked_value(variable, method, value), *args, **kwargs)

    return checked


def checked_value(variable, method, value):
    """``value`` as a tensor of ``variable``'s dtype and a compatible shape, or a one-line
    ``ValueError`` naming the variable. Per-replica values and ``IndexedSlices`` pass
    unchanged (TensorFlow checks those).

    >>> checked_value(tf.Variable([1, 2], name="n"), "assign_add", [0.5, 1.5])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: assign_add to the variable 'n' (int32, shape (2,)): the value ... int32. ...
    """
    if isinstance(value, (tf.distribute.DistributedValues, tf.IndexedSlices)):
        return value
    what = (f"{method} to the variable {_name(variable)!r} ({variable.dtype.name}, shape "
            f"{tuple(variable.shape)})")
    try:
        tensor = tf.convert_to_tensor(value, dtype=variable.dtype)
    except (TypeError, ValueError):
        got = getattr(value, "dtype", None)
        raise ValueError(
            f"{what}: the value ({getattr(got, 'name', got) or type(value).__name__}) is "
            f"not convertible to {variable.dtype.name}. No replica's copy was written. "
            f"Fix: tf.cast the value to {variable.dtype.name}.") from None
    if not tensor.shape.is_compatible_with(variable.shape):
        raise ValueError(
            f"{what}: the value has shape {tuple(tensor.shape)}; expected shape "
            f"{tuple(variable.shape)}, which every replica's copy has. No replica's copy "
            f"was written. Fix: give a value of shape {tuple(variable.shape)}.")
    return tensor


def _name(variable):
    return host_copies(variable)[0].name.split(":")[0]
