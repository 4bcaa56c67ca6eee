"""Run spatially partitioned step functions on virtual CPU devices with XLA's SPMD partitioner.

``Emulator`` stands where a custom training loop uses ``TPUStrategy``; ``report`` shows
per-core memory and communication, ``compare`` checks the partitioned run against the
unpartitioned one. jax/jaxlib (``pip install "spatial-tf[emulator]"``) are imported at
the first ``Emulator``; ``configure`` sets how many virtual devices jax starts with.

>>> import tensorflow as tf, spatial_tf
>>> emulator = Emulator(num_cores_per_replica=2)
>>> step = lambda x: tf.reduce_sum(spatial_tf.split(x, [1, 2]) ** 2)
>>> float(emulator.run(step, args=(tf.ones([4, 8]),)))
32.0
"""
from spatial_tf.emulator._xla import DEFAULT_CPU_DEVICES, DEVICES_ENV, configure
from spatial_tf.emulator.errors import CompileError
from spatial_tf.emulator.strategy import Emulator
from spatial_tf.emulator import parity, report  # noqa: E402,F401  (spatial_tf.emulator.parity)

__all__ = ["Emulator", "configure", "CompileError"]
