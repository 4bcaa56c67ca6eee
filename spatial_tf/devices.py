"""Virtual CPU devices for TensorFlow, for running multi-device code on one machine.

TensorFlow fixes its device list when it first initializes, so call this before any
tensor is created.

>>> names = virtual_cpus(8)
>>> len(names) >= 8
True
"""
import tensorflow as tf

from spatial_tf.checks import check_int
from spatial_tf.table import plural

__all__ = ["virtual_cpus"]


def virtual_cpus(n: int) -> list:
    """Split the host CPU into ``n`` logical TF devices; return their names.

    Calling it again with the same (or a smaller) ``n`` returns the existing devices.

    Raises:
      RuntimeError: TensorFlow was already initialized with fewer CPU devices.
    """
    n = check_int(n, "n", "virtual_cpus(8)", where="virtual_cpus")
    cpu = tf.config.list_physical_devices("CPU")[0]
    existing = tf.config.get_logical_device_configuration(cpu)
    if existing is None or len(existing) < n:
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)]
            )
        except RuntimeError as e:
            have = len(tf.config.list_logical_devices("CPU"))
            raise RuntimeError(
                f"virtual_cpus({n}): TensorFlow is already initialized with "
                f"{plural(have, 'CPU device')} and cannot be split further in this process. "
                f"Fix: call spatial_tf.virtual_cpus({n}) at the start of the program, before "
                f"any tensor is created."
            ) from e
    return [d.name for d in tf.config.list_logical_devices("CPU")][: max(n, 1)]
