"""The ``tf.distribute`` strategy, the emulator's top part: ``Emulator``, its extended
and replica contexts, input distribution over replicas and hosts, per-replica variables,
and running a compiled step for every replica (``runner``, ``copies``). ``Emulator``
composes the parts below: it traces and compiles (``compile``), builds reports and
comparisons (``diagnose``) and reads TPU targets (``tpu``).
"""
import functools

from spatial_tf.emulator import submodule

# the modules here are attributes of the package, imported on first use
__getattr__ = functools.partial(submodule, __name__)
