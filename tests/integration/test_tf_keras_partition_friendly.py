"""partition_friendly on tf_keras models (Model Garden's Keras), in the Model Garden environment."""
import numpy as np
import pytest

tf_keras = pytest.importorskip(
    "tf_keras", reason="tf_keras is installed in the Model Garden environment (.ci/run)")

import tensorflow as tf  # noqa: E402

from spatial_tf.layers import partition_friendly  # noqa: E402


class _Block(tf_keras.layers.Layer):
    """Convolutions and batch norms kept in lists, as Model Garden's blocks keep them."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.convs = [tf_keras.layers.Conv2D(3, 3, padding="same", name=f"conv{i}",
                                             dtype=self.dtype) for i in range(2)]
        self.norms = [tf_keras.layers.BatchNormalization(name=f"bn{i}", dtype=self.dtype)
                      for i in range(2)]

    def call(self, x, training=None):
        for conv, norm in zip(self.convs, self.norms):
            x = tf.nn.relu(norm(conv(x), training=training))
        return x


def _model(dtype):
    tf_keras.utils.set_random_seed(0)
    inputs = tf_keras.Input((8, 8, 2), dtype=dtype)
    x = _Block(name="block", dtype=dtype)(inputs)
    x = tf_keras.layers.Conv2D(2, 3, strides=2, padding="same", name="down", dtype=dtype)(x)
    x = tf_keras.layers.Conv2DTranspose(2, 2, strides=2, name="up", dtype=dtype)(x)
    x = tf_keras.layers.DepthwiseConv2D(3, padding="same", name="depthwise", dtype=dtype)(x)
    return tf_keras.Model(inputs, x, name="net")


def _step(model, x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = model(x, training=True)
        loss = tf.reduce_sum(y * tf.cos(y))
    return y, tape.gradient(loss, [x] + model.trainable_variables)


def test_fused_batch_norm_and_convs_in_lists_are_changed_and_named():
    model = _model("float32")
    model(tf.zeros((1, 8, 8, 2)), training=True)  # tf_keras decides fused=None at build
    changes = {c.path: c for c in partition_friendly(model, warn=False)}
    assert {path for path, c in changes.items() if c.changed} == {
        "net/block/conv0", "net/block/conv1", "net/block/bn0", "net/block/bn1", "net/down",
        "net/up"}
    # a depthwise convolution keeps the split as written: left unchanged, counted handled
    assert [path for path, c in changes.items() if not c.changed] == ["net/depthwise"]
    assert all(c.handled for c in changes.values())
    assert changes["net/depthwise"].why.startswith("a depthwise convolution")
    assert changes["net/up"].after == ("Conv2DTranspose with its weight gradients made to "
                                       "wait for its input gradient")
    assert changes["net/block/bn0"].before == "BatchNormalization(fused=True)"
    assert changes["net/block/bn0"].after == "BatchNormalization(fused=False)"
    assert changes["net/down"].after == "Conv2D with its kernel gradient made to wait for " \
                                        "its input gradient"
    assert all(not layer.fused for layer in model.get_layer("block").norms)


def test_same_results_gradients_and_checkpoint_keys(tmp_path):
    plain, friendly = _model("float32"), _model("float32")
    friendly.set_weights(plain.get_weights())
    before = tf.train.Checkpoint(model=friendly).write(str(tmp_path / "before"))
    partition_friendly(friendly, warn=False)
    after = tf.train.Checkpoint(model=friendly).write(str(tmp_path / "after"))
    assert sorted(tf.train.list_variables(before)) == sorted(tf.train.list_variables(after))
    x = tf.constant(np.random.default_rng(0).normal(size=(2, 8, 8, 2)), tf.float32)
    (y0, g0), (y1, g1) = _step(plain, x), _step(friendly, x)
    # fused and unfused batch norm differ by float32 rounding only
    np.testing.assert_allclose(y1.numpy(), y0.numpy(), rtol=1e-4, atol=1e-4)
    for a, b in zip(g1, g0):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-3)


def test_convolutions_agree_in_float64():
    # tf_keras' fused batch norm has no float64 kernel: float64 models build it unfused
    plain, friendly = _model("float64"), _model("float64")
    friendly.set_weights(plain.get_weights())
    partition_friendly(friendly, warn=False)
    x = tf.constant(np.random.default_rng(1).normal(size=(2, 8, 8, 2)), tf.float64)
    (y0, g0), (y1, g1) = _step(plain, x), _step(friendly, x)
    assert all(v.dtype == tf.float64 for v in friendly.weights)
    np.testing.assert_allclose(y1.numpy(), y0.numpy(), rtol=0, atol=1e-11)
    for a, b in zip(g1, g0):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-11)


def _regularized(dtype):
    """tf_keras layers with weight regularizers, as Model Garden's task adds them."""
    tf_keras.utils.set_random_seed(0)
    l2 = tf_keras.regularizers.l2(1e-2)  # one object shared by every layer, as there
    inputs = tf_keras.Input((8, 8, 2), dtype=dtype)
    x = tf_keras.layers.Conv2D(3, 3, padding="same", kernel_regularizer=l2,
                               bias_regularizer=l2, name="conv", dtype=dtype)(inputs)
    x = tf_keras.layers.Conv2D(2, 1, strides=2, kernel_regularizer=l2, name="head",
                               dtype=dtype)(x)
    return tf_keras.Model(inputs, x, name="reg")


def _total_step(model, x):
    with tf.GradientTape() as tape:
        y = model(x, training=True)
        loss = tf.reduce_sum(y * tf.cos(y)) + tf.add_n(model.losses)
    return loss, tape.gradient(loss, model.trainable_variables)


def test_regularizers_are_ordered_with_the_same_loss_and_gradients_in_float64():
    plain, friendly = _regularized("float64"), _regularized("float64")
    friendly.set_weights(plain.get_weights())
    changes = [c for c in partition_friendly(friendly) if "regularizer" in c.before]
    assert [(c.path, c.before, c.changed) for c in changes] == [
        ("reg/conv", "kernel, bias regularizers", True), ("reg/head", "kernel regularizer", True)]
    assert len(friendly.losses) == len(plain.losses) == 3
    x = tf.constant(np.random.default_rng(2).normal(size=(2, 8, 8, 2)), tf.float64)
    l0, g0 = _total_step(plain, x)
    for l1, g1 in (_total_step(friendly, x), tf.function(_total_step)(friendly, x)):
        np.testing.assert_allclose(l1.numpy(), l0.numpy(), rtol=1e-13)
        for a, b in zip(g1, g0):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)
    assert not any(c.changed for c in partition_friendly(friendly))  # idempotent
    assert friendly.get_layer("conv").get_config()["kernel_regularizer"] == \
        plain.get_layer("conv").get_config()["kernel_regularizer"]



def test_tf_keras_grouped_conv3d_as_model_garden_builds_it():
    """Model Garden's MoViNet: tf_keras' Conv3D with groups = channels (depthwise) and a
    grouped one, in float64."""
    def build():
        tf_keras.utils.set_random_seed(0)
        inputs = tf_keras.Input((4, 6, 5, 4), dtype="float64")
        x = tf_keras.layers.Conv3D(4, (3, 3, 3), padding="same", groups=4, use_bias=False,
                                   dtype="float64", name="depthwise")(inputs)
        x = tf_keras.layers.Conv3D(4, 3, padding="same", groups=2, dtype="float64",
                                   name="grouped")(x)
        return tf_keras.Model(inputs, x, name="movinet_like")

    plain, friendly = build(), build()
    friendly.set_weights(plain.get_weights())
    changes = partition_friendly(friendly)
    assert [(c.path, c.changed, c.handled) for c in changes] == [
        ("movinet_like/depthwise", False, True), ("movinet_like/grouped", True, True)]
    x = tf.constant(np.random.default_rng(2).normal(size=(2, 4, 6, 5, 4)))
    y0, g0 = _step(plain, x)
    for y1, g1 in (_step(friendly, x), tf.function(_step)(friendly, x)):
        np.testing.assert_allclose(y1.numpy(), y0.numpy(), rtol=0, atol=1e-10)
        for a, b in zip(g1, g0):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-10)
