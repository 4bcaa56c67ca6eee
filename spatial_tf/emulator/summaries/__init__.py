"""``tf.summary`` calls inside a step: cut out of the compiled program and written on
the host, as TPUStrategy runs them.
"""
import functools

from spatial_tf.emulator import submodule

# the modules here are attributes of the package, imported on first use
__getattr__ = functools.partial(submodule, __name__)
