"""What the tests of XLA's TPU compiler share: the skip mark for machines without libtpu
and a small split convolution step."""
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator.tpu import tpu_compile

needs_libtpu = pytest.mark.skipif(
    tpu_compile.libtpu_version() is None,
    reason="needs libtpu (XLA's TPU compiler): pip install 'spatial-tf[tpu-compile]'")


def conv_step(cores, kernel):
    """A train step of one convolution with ``kernel`` (a ``tf.Variable``), its input split
    in height over ``cores`` cores."""
    def step(x):
        x = spatial_tf.split(x, [1, cores, 1, 1])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.nn.conv2d(x, kernel, 1, "SAME") ** 2)
        kernel.assign_sub(0.01 * tape.gradient(loss, kernel))
        return loss

    return step
