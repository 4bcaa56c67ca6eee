"""Shared test set-up: virtual CPU devices for TensorFlow, configured once per session.

TensorFlow fixes its device list the first time it is used, so the split into
``NUM_VIRTUAL_CPUS`` logical CPUs happens here at import time, before any test runs.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest
import tensorflow as tf

NUM_VIRTUAL_CPUS = 8


def _configure_virtual_cpus(n):
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(n)]
    )


_configure_virtual_cpus(NUM_VIRTUAL_CPUS)


@pytest.fixture(scope="session")
def virtual_cpus():
    """The names of the virtual CPU devices, e.g. ['/device:CPU:0', ...]."""
    return [d.name for d in tf.config.list_logical_devices("CPU")]
