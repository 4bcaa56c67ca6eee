"""Test helpers for your own pytest suite: emulators as fixtures, and partitioning checks.

Installed with spatial_tf as a pytest plugin (entry point ``pytest11``), so the fixture
``emulator`` and the marker ``@pytest.mark.spatial_tf(cores=..., replicas=...)`` are
there in any suite; see ``spatial_tf.testing.plugin``. The assertions work anywhere:

>>> import tensorflow as tf, spatial_tf
>>> from spatial_tf.testing import assert_partitioned_matches
>>> step = lambda x: tf.reduce_sum(spatial_tf.split(x, [1, 2]) ** 2)
>>> assert_partitioned_matches(spatial_tf.Emulator(2), step, (tf.ones([4, 8]),)).ok
True
"""
from spatial_tf.testing import plugin  # noqa: F401  (spatial_tf.testing.plugin, for -p)
from spatial_tf.testing.assertions import (
    assert_fits_tpu,
    assert_no_activation_gather,
    assert_partitioned_matches,
)

__all__ = ["assert_partitioned_matches", "assert_no_activation_gather", "assert_fits_tpu"]
