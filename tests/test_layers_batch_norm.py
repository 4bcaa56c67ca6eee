"""Batch norm that keeps the split: the fused kernel's warning, and unfuse_batch_norm."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator import Emulator
from spatial_tf.layers import unfuse_batch_norm

pytestmark = pytest.mark.emulator


def _fused_step(scale, offset, fused):
    def step(x):
        x = spatial_tf.split(x, [1, 2, 2, 1])
        if fused:
            y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, scale, offset, is_training=True)
        else:
            mean, variance = tf.nn.moments(x, [0, 1, 2])
            y = tf.nn.batch_normalization(x, mean, variance, offset, scale, 1e-3)
        return tf.reduce_sum(y * y * tf.range(1.0, 5.0))
    return step


def test_fused_batch_norm_is_gathered_and_the_warning_gives_the_fix():
    emulator = Emulator(num_cores_per_replica=4)
    x = tf.random.stateless_normal([2, 32, 32, 4], seed=(0, 1))
    scale, offset = tf.constant([1.0, 2.0, 0.5, 1.5]), tf.zeros([4])
    fused = emulator.report(_fused_step(scale, offset, True), args=(x,))
    assert fused.by_kind()["all-gather"]["count"] >= 1
    [warning] = [w for w in fused.warnings if "FusedBatchNormV3" in w]
    assert "fused batch norm (FusedBatchNormV3, tf_keras' default) has no partitioned form" in warning
    assert "Fix: spatial_tf.layers.partition_friendly(model) unfuses it" in warning
    assert "reshape" not in warning
    plain = emulator.report(_fused_step(scale, offset, False), args=(x,))
    assert "all-gather" not in plain.by_kind() and plain.warnings == []
    assert plain.partitioned["temp"] < fused.partitioned["temp"]
    np.testing.assert_allclose(_fused_step(scale, offset, True)(x), _fused_step(scale, offset, False)(x),
                               rtol=1e-4)


def test_a_gather_elsewhere_keeps_the_reshape_advice():
    emulator = Emulator(num_cores_per_replica=4)

    def step(x):
        x = spatial_tf.split(x, [1, 2, 2, 1])
        return tf.reduce_sum(tf.cumsum(tf.reshape(x, [2, -1]), axis=1))

    report = emulator.report(step, args=(tf.ones([2, 32, 32, 4]),))
    [reshape] = [w for w in report.warnings if "TensorFlow op 'Reshape'" in w]
    assert "Fix: [1, 4, 1, 1] keeps this reshape local" in reshape
    assert not any("fused batch norm" in w for w in report.warnings)


def test_keras3_model_has_nothing_to_unfuse():
    inner = keras.Sequential([keras.layers.BatchNormalization()])
    model = keras.Sequential([keras.Input((8, 8, 2)), keras.layers.Conv2D(2, 3),
                              keras.layers.BatchNormalization(), inner])
    assert unfuse_batch_norm(model) == [] and unfuse_batch_norm(inner.layers[0]) == []


def test_not_a_model():
    with pytest.raises(TypeError, match="unfuse_batch_norm: got int; expected a Keras or tf_keras model"):
        unfuse_batch_norm(3)


def test_tf_keras_nested_layers_unfused_same_results_and_no_gather():
    tf_keras = pytest.importorskip("tf_keras")
    emulator = Emulator(num_cores_per_replica=4)
    with emulator.scope():
        tf_keras.utils.set_random_seed(0)
        inner = tf_keras.Sequential([tf_keras.layers.BatchNormalization(name="inner_bn")],
                                    name="inner")
        model = tf_keras.Sequential([
            tf_keras.layers.Conv2D(8, 3, padding="same", input_shape=(32, 32, 4)),
            tf_keras.layers.BatchNormalization(name="bn"), inner,
            tf_keras.layers.BatchNormalization(name="already", fused=False),
            tf_keras.layers.Conv2D(1, 3, padding="same")])

    def make_step():  # a new function: a compiled step keeps the kernel it was traced with
        def step(x):
            x = spatial_tf.split(x, [1, 2, 2, 1])
            return tf.reduce_mean(model(x, training=True) ** 2)
        return step

    x = tf.random.stateless_normal([2, 32, 32, 4], seed=(2, 3))
    before = model(x, training=True).numpy()
    assert "FusedBatchNormV3" in " ".join(emulator.report(make_step(), args=(x,)).warnings)
    assert unfuse_batch_norm(model) == ["bn", "inner_bn"]
    assert [model.get_layer("bn").fused, inner.layers[0].fused] == [False, False]
    assert unfuse_batch_norm(model) == []  # nothing left to change
    np.testing.assert_allclose(model(x, training=True).numpy(), before, rtol=1e-4, atol=1e-5)
    report = emulator.report(make_step(), args=(x,))
    assert "all-gather" not in report.by_kind() and report.warnings == []


def test_tf_keras_batch_norm_held_in_a_custom_layers_attributes_is_unfused():
    tf_keras = pytest.importorskip("tf_keras")

    class Block(tf_keras.layers.Layer):  # as Model Garden's 3D U-Net blocks keep theirs
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self._convs = [tf_keras.layers.Conv2D(4, 3, padding="same")]
            self._norms = [tf_keras.layers.BatchNormalization(name="block_bn")]

        def call(self, x, training=None):
            return self._norms[0](self._convs[0](x), training=training)

    tf_keras.utils.set_random_seed(0)
    inputs = tf_keras.Input((8, 8, 2))
    block = Block(name="block")
    model = tf_keras.Model(inputs, block(inputs))
    assert "block_bn" not in [layer.name for layer in model.layers]  # held, not listed
    x = tf.random.stateless_normal([2, 8, 8, 2], seed=(4, 5))
    before = model(x, training=True).numpy()
    assert unfuse_batch_norm(model) == ["block_bn"]
    assert block._norms[0].fused is False
    assert unfuse_batch_norm(model) == []
    np.testing.assert_allclose(model(x, training=True).numpy(), before, rtol=1e-4, atol=1e-5)
