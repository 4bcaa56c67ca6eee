"""The ``tf.distribute`` strategy: ``Emulator``, its extended and replica contexts,
input distribution over replicas and hosts, and per-replica variables.
"""
import functools

from spatial_tf.emulator import submodule

# the modules here are attributes of the package, imported on first use
__getattr__ = functools.partial(submodule, __name__)
