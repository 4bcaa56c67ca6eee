"""Which logical-device layout is active: a small thread-local stack.

Strategy-like objects that are not a ``tf.distribute.TPUStrategy`` (the CPU emulator)
push themselves here while their ``scope()`` or ``run()`` is active, so that
``spatial_tf.split`` called with no ``strategy`` annotates for their core count.

>>> from spatial_tf import context
>>> class Layout:
...     num_cores_per_replica = 4
>>> with context.logical_device_scope(Layout()):
...     context.current_layout().num_cores_per_replica
4
>>> context.current_layout() is None
True
"""
import contextlib
import threading

_state = threading.local()


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
