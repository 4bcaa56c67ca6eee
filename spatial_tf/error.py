"""``spatial_tf.Error``: the base of the exceptions spatial_tf defines.

Each keeps the built-in base that says what went wrong (``CompileError`` is a
``ValueError``, ``TpuCompileTimeout`` a ``TimeoutError``, ...), so ``except ValueError``
goes on working; ``except spatial_tf.Error`` catches what spatial_tf itself raised.

>>> import spatial_tf
>>> from spatial_tf.emulator.xla.errors import CompileError
>>> issubclass(CompileError, spatial_tf.Error), issubclass(CompileError, ValueError)
(True, True)
"""

__all__ = ["Error"]


class Error(Exception):
    """The base of spatial_tf's own exceptions (each also has a built-in base)."""
