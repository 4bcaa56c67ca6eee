"""Compile and run: trace a step, partition and compile it with XLA (XLA:CPU here, or
XLA:TPU as a compile-only target), cache compiles, run them for every replica.
"""
import functools

from spatial_tf.emulator import submodule

# the modules here are attributes of the package, imported on first use
__getattr__ = functools.partial(submodule, __name__)
