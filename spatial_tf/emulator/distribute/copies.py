"""Which copy of each variable each replica of a step reads and writes.

A step is traced once, as one replica's program; it captures replica 0's host copy of
each distributed variable the emulator's scope made (``distribute/variables.py``).
``StepCopies`` finds every replica's copy of each capture: replica ``r`` is fed its own
copy's value, and its new value of a variable it writes goes back to that copy, as
each TPU replica reads and writes its own. A variable made outside the scope is one
variable: every replica reads it, and with several replicas no step may write it.

>>> import tensorflow as tf
>>> import spatial_tf
>>> emulator = spatial_tf.Emulator(num_cores_per_replica=1, num_replicas=2)
>>> with emulator.scope():
...     v = tf.Variable(1.0)
>>> copies = StepCopies(emulator, [v.values[0], tf.Variable(2.0)])
>>> [len(c) for c in copies.copies], [c for c, _ in copies.extra()]
([2, 1], [0])
"""
from typing import List, Sequence

from spatial_tf.emulator.xla.handles import is_variable

__all__ = ["StepCopies"]


class StepCopies:
    """Every replica's copy of each of a step's ``captures`` (see the module docstring).

    ``copies[c]``: one variable per replica for a distributed variable's capture, else
    the capture alone.
    """

    def __init__(self, emulator, captures: Sequence) -> None:
        self.num_replicas = emulator.num_replicas_in_sync
        self.copies = []
        for capture in captures:
            found = emulator.replica_copies.of(capture) if is_variable(capture) else None
            self.copies.append(found if found is not None and len(found) > 1 else (capture,))

    def extra(self) -> List:
        """``(capture index, variable)`` of every copy but replica 0's, in feed order."""
        return [(c, v) for c, copies in enumerate(self.copies) for v in copies[1:]]

    def replica_captures(self, captures: Sequence, extra_values: Sequence) -> dict:
        """``{capture index: [value of each replica]}`` for the captures with a copy per
        replica, from replica 0's values (``captures``) and the others' (``extra()``)."""
        values = iter(extra_values)
        return {c: [captures[c]] + [next(values) for _ in copies[1:]]
                for c, copies in enumerate(self.copies) if len(copies) > 1}

    def written(self, writes) -> List:
        """The variables a step's new values go to: each written capture's copies."""
        return [v for _, c in writes for v in self.copies[c]]

    def new_values(self, writes, updates) -> List:
        """``updates[r][i]`` (replica ``r``'s value of write ``i``) in ``written`` order."""
        return [updates[r][i] for i, (_, c) in enumerate(writes)
                for r in range(len(self.copies[c]))]

    def check_writes(self, name: str, writes) -> None:
        """Refuse a step of several replicas that writes a variable made outside the
        emulator's scope: each replica would write the one variable."""
        if self.num_replicas == 1:
            return
        for _, c in writes:
            if len(self.copies[c]) == 1:
                variable = self.copies[c][0]
                raise ValueError(
                    f"{name}: the step writes the variable {variable.name!r}, which was "
                    f"created outside the emulator's scope: it is one variable, not a copy "
                    f"per replica, and each of the {self.num_replicas} replicas would write "
                    f"it. As under TPUStrategy, a variable a step writes must be made in "
                    f"the strategy's scope. Fix: create it (the model, optimizer and "
                    f"metrics too) inside `with strategy.scope():`."
                )
