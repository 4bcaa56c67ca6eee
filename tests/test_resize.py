"""halve and double: tf.image.resize's values (float64, to rounding), and no gather of the
image when the resized axes are split."""
import numpy as np
import pytest
import tensorflow as tf

import keras
import spatial_tf
from spatial_tf.emulator import Emulator
from spatial_tf.resize import double, halve


def _image(shape, seed=0):
    return tf.constant(np.random.default_rng(seed).normal(size=shape))  # float64


def _bilinear(x, axis, size):
    """Half-pixel-centre bilinear resampling of one axis to ``size``, in NumPy float64:
    the textbook formula (source = (out + 0.5) * n / size - 0.5, clamped to the edges),
    as TensorFlow's ResizeBilinear defines it."""
    x = np.moveaxis(np.asarray(x, np.float64), axis, 0)
    n = x.shape[0]
    source = np.clip((np.arange(size) + 0.5) * n / size - 0.5, 0, n - 1)
    low = np.floor(source).astype(int)
    high = np.minimum(low + 1, n - 1)
    weight = (source - low).reshape((-1,) + (1,) * (x.ndim - 1))
    return np.moveaxis((1 - weight) * x[low] + weight * x[high], 0, axis)


def _reference(x, scale, axes):
    x = np.asarray(x)
    for axis in axes:
        x = _bilinear(x, axis, int(x.shape[axis] * scale))
    return x


@pytest.mark.parametrize("shape", [(1, 2, 2, 1), (2, 4, 6, 3), (1, 16, 10, 2), (3, 8, 2, 5),
                                   (2, 4, 6, 8, 3), (1, 2, 4, 2, 2, 1)])
def test_float64_equals_the_bilinear_formula(shape):
    x = _image(shape)
    spatial = range(1, len(shape) - 1)
    np.testing.assert_allclose(halve(x), _reference(x, 0.5, spatial), rtol=0, atol=1e-12)
    np.testing.assert_allclose(double(x), _reference(x, 2, spatial), rtol=0, atol=1e-12)
    assert halve(x).dtype == double(x).dtype == tf.float64


@pytest.mark.parametrize("shape", [(1, 2, 2, 1), (2, 4, 6, 3), (1, 16, 10, 2)])
def test_float32_equals_tf_image_resize_and_keras_resizing(shape):
    x = tf.cast(_image(shape), tf.float32)
    n, h, w, c = shape
    np.testing.assert_allclose(halve(x), tf.image.resize(x, (h // 2, w // 2)), atol=1e-6)
    np.testing.assert_allclose(double(x), tf.image.resize(x, (2 * h, 2 * w)), atol=1e-6)
    np.testing.assert_allclose(double(x), keras.layers.Resizing(2 * h, 2 * w)(x), atol=1e-6)
    np.testing.assert_allclose(halve(x), keras.layers.Resizing(h // 2, w // 2)(x), atol=1e-6)


def test_one_axis_at_a_time():
    x = _image((1, 6, 4, 2))
    np.testing.assert_allclose(double(x, axes=[2]), _reference(x, 2, [2]), atol=1e-12)
    np.testing.assert_allclose(halve(x, axes=[1]), _reference(x, 0.5, [1]), atol=1e-12)
    assert double(x, axes=[2]).shape == (1, 6, 8, 2)


@pytest.mark.parametrize("call, message", [
    (lambda: halve(tf.zeros([1, 5, 4, 1])), "halve: axis 1 of shape [1, 5, 4, 1] has odd size "
                                            "5; expected an even size. Fix: pad or crop"),
    (lambda: double(tf.zeros([4, 4])), "double: x has shape (4, 4); expected (batch, "
                                       "*spatial, channels), rank 3 or more"),
    (lambda: halve(tf.zeros([1, 4, 4, 1]), axes=[3]),
     "halve: axis 3 of shape [1, 4, 4, 1] is not a spatial axis of known size; expected "
     "axes among [1, 2]. Fix: axes=[1, 2]."),
])
def test_bad_input_is_refused_with_the_fix(call, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")
                       .replace(")", r"\)").replace("*", r"\*")):
        call()


@pytest.mark.emulator
def test_a_split_image_is_resized_without_a_gather():
    x = _image((1, 32, 32, 8)).numpy().astype(np.float32)

    def ours(x):
        x = spatial_tf.split(x, [1, 2, 2, 1])
        return tf.reduce_sum(double(halve(x)) ** 2)

    def tensorflows(x):
        x = spatial_tf.split(x, [1, 2, 2, 1])
        return tf.reduce_sum(tf.image.resize(tf.image.resize(x, (16, 16)), (32, 32)) ** 2)

    emulator = Emulator(4)
    theirs = emulator.report(tensorflows, (x,))
    assert [w for w in theirs.warnings if "ResizeBilinear" in w]  # what the test is about
    report = emulator.report(ours, (x,))
    assert report.warnings == [], report.warnings
    assert "all-gather" not in report.by_kind()
    np.testing.assert_allclose(emulator.run(ours, (x,)), emulator.run(tensorflows, (x,)),
                               rtol=1e-5)


def _resizing_model(dtype="float32"):
    inputs = keras.Input((16, 16, 4), dtype=dtype)
    x = keras.layers.Conv2D(4, 3, padding="same", dtype=dtype)(inputs)
    x = keras.layers.Resizing(8, 8, dtype=dtype)(x)            # halved
    x = keras.layers.Resizing(16, 16, dtype=dtype)(x)          # doubled
    x = keras.layers.Resizing(12, 16, dtype=dtype)(x)          # not by 2: Keras' own
    return keras.Model(inputs, x)


# Keras' Resizing computes in float32 whatever the layer's dtype (tf.image.resize), so
# float64 agrees to float32 rounding; test_float64_equals_the_bilinear_formula is exact
@pytest.mark.parametrize("dtype, atol", [("float64", 1e-6), ("float32", 1e-5)])
def test_partition_friendly_resizing_gives_keras_values(dtype, atol):
    model = _resizing_model(dtype)
    x = tf.cast(_image((2, 16, 16, 4)), dtype)
    before = model(x).numpy()
    changes = spatial_tf.layers.partition_friendly(model, warn=False)
    resized = [c for c in changes if c.before == "Resizing"]
    assert len(resized) == 3 and all(c.changed and c.handled for c in resized)
    assert resized[0].after == "Resizing, by 2 as spatial_tf.resize.halve / double"
    np.testing.assert_allclose(model(x).numpy(), before, rtol=0, atol=atol)


def test_partition_friendly_leaves_other_resizes_to_keras():
    inputs = keras.Input((16, 16, 1))
    x = keras.layers.Resizing(8, 8, interpolation="nearest")(inputs)
    x = keras.layers.Resizing(4, 4, crop_to_aspect_ratio=True)(x)
    changes = spatial_tf.layers.partition_friendly(keras.Model(inputs, x), warn=False)
    assert [(c.after, c.handled) for c in changes] == [("unchanged", False)] * 2


@pytest.mark.emulator
def test_after_partition_friendly_a_split_resize_gathers_nothing():
    inputs = keras.Input((32, 32, 8))
    x = keras.layers.Conv2D(8, 3, padding="same")(inputs)
    x = keras.layers.Resizing(32, 32)(keras.layers.Resizing(16, 16)(x))
    model = keras.Model(inputs, x)
    x = _image((1, 32, 32, 8)).numpy().astype(np.float32)

    def step(x):
        return tf.reduce_sum(model(spatial_tf.split(x, [1, 2, 2, 1])) ** 2)

    emulator = Emulator(4)
    before = emulator.report(step, (x,))
    assert [w for w in before.warnings if "ResizeBilinear" in w]  # what the test is about
    spatial_tf.layers.partition_friendly(model, warn=False)
    after = emulator.report(step, (x,))
    assert after.warnings == [], after.warnings
    assert after.partitioned["temp"] < before.partitioned["temp"]
