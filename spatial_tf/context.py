"""What ``spatial_tf.split`` partitions for, told apart by type.

- ``TPUStrategyLike``: ``tf.distribute.TPUStrategy`` (and its experimental name); split
  calls its ``experimental_split_to_logical_devices`` and friends. A stand-in for tests
  registers itself: ``TPUStrategyLike.register(FakeTPUStrategy)``.
- ``EmulatedLayout``: the base class of ``spatial_tf.Emulator``; split annotates for its
  ``num_cores_per_replica``.
- the active layout, a small thread-local stack: the emulator pushes itself while it
  traces or runs a step (also where no strategy scope is entered, e.g. the plain
  TensorFlow reference run of ``compare``), so split with no ``strategy`` annotates for
  its core count.

>>> from spatial_tf import context
>>> class Layout:
...     num_cores_per_replica = 4
>>> with context.logical_device_scope(Layout()):
...     context.current_layout().num_cores_per_replica
4
>>> context.current_layout() is None
True
"""
import abc
import contextlib
import threading

import tensorflow as tf

__all__ = ["TPUStrategyLike", "EmulatedLayout", "current_layout", "logical_device_scope",
           "note_model_change", "model_changes"]

_state = threading.local()
_changes_lock = threading.Lock()
_changes = 0


def note_model_change() -> None:
    """Say that spatial_tf changed a model or optimizer in place (``partition_friendly``
    replacing layers' calls, say): a step traced before no longer shows it, so the
    emulator traces its steps again (``model_changes`` is part of its cache key)."""
    global _changes
    with _changes_lock:
        _changes += 1


def model_changes() -> int:
    """How many times ``note_model_change`` was called in this process.

    >>> before = model_changes(); note_model_change(); model_changes() - before
    1
    """
    return _changes


class TPUStrategyLike(abc.ABC):
    """``isinstance(s, TPUStrategyLike)``: ``s`` is a TPUStrategy (or registered as one)."""


TPUStrategyLike.register(tf.distribute.TPUStrategy)
TPUStrategyLike.register(tf.distribute.experimental.TPUStrategy)


class EmulatedLayout:
    """Base of layouts partitioned on CPU (``spatial_tf.Emulator``); subclasses have
    ``num_cores_per_replica``, ``num_replicas`` and ``devices``."""

    num_cores_per_replica: int


def _stack():
    if not hasattr(_state, "stack"):
        _state.stack = []
    return _state.stack


def current_layout():
    """The innermost active layout (an object with ``num_cores_per_replica``), or None."""
    stack = _stack()
    return stack[-1] if stack else None


@contextlib.contextmanager
def logical_device_scope(layout):
    """Make ``layout`` the current layout for the duration of the ``with`` block."""
    if not isinstance(getattr(layout, "num_cores_per_replica", None), int):
        raise TypeError(
            f"logical_device_scope expects an object with an integer "
            f"num_cores_per_replica; got {layout!r}"
        )
    stack = _stack()
    stack.append(layout)
    try:
        yield layout
    finally:
        stack.pop()
