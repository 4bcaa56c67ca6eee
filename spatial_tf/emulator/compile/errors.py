"""Moved to ``spatial_tf.emulator.xla.errors``: this path works for one release and warns."""
from spatial_tf.emulator import moved
from spatial_tf.emulator.xla.errors import *  # noqa: F401,F403
from spatial_tf.emulator.xla.errors import __all__  # noqa: F401

__getattr__ = moved(__name__, "spatial_tf.emulator.xla.errors")
