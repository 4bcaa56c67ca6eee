"""Diagnosis: what a partitioned step costs per core (``report``), whether partitioning
changes its results (``compare``), and the user's line and fix for each gather.
"""
import functools

from spatial_tf.emulator import submodule

# the modules here are attributes of the package, imported on first use
__getattr__ = functools.partial(submodule, __name__)
