"""spatial_tf.layers' per-frame layers: TimeDistributed's values on clips (float64), Keras
serialisation, the conversion of a Conv2D, errors naming the fix, and a clip split in
time kept local under the emulator where TimeDistributed sends every frame to every core.

TensorFlow has no float64 MaxPool3D and no CPU float64 AvgPool3D kernel: max pooling is
compared in float32 (it selects, so it is exact), average pooling compiled by XLA.
Keras' resize computes in float32 whatever the dtype, so a resize by other than 2 or 1/2
is compared in float32; by 2 and 1/2 against the bilinear formula in NumPy float64."""
import numpy as np
import pytest
import tensorflow as tf
import keras

import spatial_tf
from spatial_tf.emulator import Emulator
from spatial_tf.emulator.xla.hlo_text import GATHER_KINDS
from spatial_tf.layers import (
    FrameAveragePooling2D,
    FrameConv2D,
    FrameMaxPooling2D,
    FrameResizing,
)

CLIP = (2, 3, 9, 10, 4)


def _clip(shape=CLIP, dtype="float64", seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(dtype)


def _time_distributed(layer, x, jit=False):
    frames = keras.layers.TimeDistributed(layer, dtype=layer.dtype_policy)
    return tf.function(frames, jit_compile=jit)(x) if jit else frames(x)


@pytest.mark.parametrize("settings", [
    dict(padding="same"), dict(strides=2), dict(kernel_size=(3, 1), dilation_rate=2),
    dict(padding="same", activation="relu", use_bias=False),
])
def test_frame_conv2d_is_time_distributed_conv2d(settings):
    keras.utils.set_random_seed(1)
    settings = {"kernel_size": 3, **settings}
    conv = keras.layers.Conv2D(5, dtype="float64", **settings)
    x = _clip()
    expected = _time_distributed(conv, x)
    frame = FrameConv2D.from_conv2d(conv)
    np.testing.assert_allclose(frame(x), expected, rtol=0, atol=1e-12)
    assert frame.compute_dtype == "float64" and frame.name == f"frame_{conv.name}"
    assert tuple(frame.kernel.shape) == (1,) + tuple(conv.kernel.shape)


def test_from_conv2d_of_an_unbuilt_conv2d_takes_its_settings_only():
    conv = keras.layers.Conv2D(6, (3, 5), strides=(1, 2), padding="same", name="stem")
    frame = FrameConv2D.from_conv2d(conv, name="stem_per_frame")
    assert not frame.built and frame.name == "stem_per_frame"
    assert frame.kernel_size == (1, 3, 5) and frame.strides == (1, 1, 2)
    config = frame.get_config()
    assert (config["kernel_size"], config["strides"]) == ((3, 5), (1, 2))
    assert "data_format" not in config


@pytest.mark.parametrize("two_d, per_frame, dtype, jit", [
    (keras.layers.MaxPooling2D, FrameMaxPooling2D, "float32", False),
    (keras.layers.AveragePooling2D, FrameAveragePooling2D, "float64", True),
])
@pytest.mark.parametrize("settings", [dict(pool_size=2),
                                      dict(pool_size=3, strides=2, padding="same"),
                                      dict(pool_size=(2, 3), strides=(1, 2))])
def test_frame_pooling_is_time_distributed_pooling(two_d, per_frame, dtype, jit, settings):
    x = _clip(dtype=dtype)
    expected = _time_distributed(two_d(dtype=dtype, **settings), x, jit)
    layer = per_frame(**two_d(dtype=dtype, **settings).get_config())  # converts a 2D one
    got = tf.function(layer, jit_compile=True)(x) if jit else layer(x)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    assert layer.pool_size[0] == 1 and layer.strides[0] == 1


def _bilinear(x, axis, m):
    """``x`` resized along ``axis`` to ``m`` (half-pixel centres), NumPy float64."""
    n = x.shape[axis]
    source = np.clip((np.arange(m) + 0.5) * n / m - 0.5, 0, n - 1)
    low = np.floor(source).astype(int)
    high = np.minimum(low + 1, n - 1)
    shape = [m if a == axis else 1 for a in range(x.ndim)]
    weight = (source - low).reshape(shape)
    return np.take(x, low, axis) * (1 - weight) + np.take(x, high, axis) * weight


def test_frame_resizing_by_two_is_bilinear_in_float64():
    x = _clip((2, 3, 8, 10, 4))
    got = FrameResizing(16, 5, dtype="float64")(x)
    np.testing.assert_allclose(got, _bilinear(_bilinear(x, 2, 16), 3, 5), rtol=0, atol=1e-12)
    nearest = FrameResizing(7, 13, interpolation="nearest", dtype="float64")
    np.testing.assert_array_equal(
        nearest(x), _time_distributed(keras.layers.Resizing(7, 13, "nearest", dtype="float64"), x))


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "area", "lanczos3"])
@pytest.mark.parametrize("size, antialias", [((18, 20), False), ((5, 7), False),
                                             ((5, 7), True), ((4, 10), True)])
def test_frame_resizing_is_time_distributed_resizing(interpolation, size, antialias):
    x = _clip(dtype="float32")
    resizing = keras.layers.Resizing(*size, interpolation=interpolation, antialias=antialias)
    expected = _time_distributed(resizing, x)
    got = FrameResizing(*size, interpolation=interpolation, antialias=antialias)(x)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6 * np.abs(expected).max())


@pytest.mark.parametrize("layer", [
    FrameConv2D(4, (3, 5), strides=(1, 2), padding="same", activation="relu", name="c"),
    FrameMaxPooling2D((2, 3), padding="same", name="m"),
    FrameAveragePooling2D(2, strides=1, name="a"),
    FrameResizing(6, 4, interpolation="area", antialias=True, name="r"),
], ids=lambda layer: type(layer).__name__)
def test_a_model_of_frame_layers_saves_and_loads(layer, tmp_path):
    x = _clip((1, 2, 8, 8, 4), "float32")
    inputs = keras.Input(x.shape[1:])
    model = keras.Model(inputs, layer(inputs))
    assert type(layer).from_config(layer.get_config()).get_config() == layer.get_config()
    model.save(tmp_path / "clip.keras")
    loaded = keras.models.load_model(tmp_path / "clip.keras")
    assert type(loaded.layers[1]) is type(layer)
    np.testing.assert_array_equal(loaded(x), model(x))


@pytest.mark.parametrize("make, error, message", [
    (lambda: FrameConv2D(4, (3, 3, 3)), ValueError,
     r"FrameConv2D: kernel_size is \(3, 3, 3\); expected an int or two ints \(height, width\)"),
    (lambda: FrameMaxPooling2D(0), ValueError, r"FrameMaxPooling2D: pool_size is 0; expected a "
                                               r"positive int"),
    (lambda: FrameAveragePooling2D(data_format="channels_first"), ValueError,
     r"data_format is 'channels_first'; expected 'channels_last'.*Fix: move the channels last"),
    (lambda: FrameConv2D.from_conv2d(keras.layers.Dense(3)), TypeError,
     r"conv is a Dense; expected a keras.layers.Conv2D"),
    (lambda: FrameResizing(0, 4), ValueError, r"FrameResizing: height is 0; expected a positive"),
    (lambda: FrameResizing(4, 4, interpolation="cubic"), ValueError,
     r"interpolation is 'cubic'; expected one of bilinear, nearest, bicubic"),
    (lambda: FrameConv2D(4, 3)(np.zeros((2, 8, 8, 3))), ValueError,
     r"FrameConv2D: the input has shape \(2, 8, 8, 3\); expected a clip of rank 5.*"
     r"or use keras.layers.Conv2D for images"),
    (lambda: FrameResizing(4, 4)(keras.Input((3, None, 8, 2))), ValueError,
     r"expected a known height and width"),
])
def test_bad_arguments_name_the_value_and_the_fix(make, error, message):
    with pytest.raises(error, match=message):
        make()


@pytest.mark.emulator
def test_a_clip_split_in_time_stays_split_where_time_distributed_sends_every_frame():
    """The same block (convolution, max pooling, resize by 2 and by 3/4) on a clip split
    [1, 2, 1, 1, 1]: TimeDistributed's layers send each frame to every core, the
    per-frame layers gather nothing and halve the one-core step's temp memory."""
    keras.utils.set_random_seed(0)
    conv = keras.layers.Conv2D(8, 3, padding="same")
    conv.build((None, 16, 16, 4))
    blocks = {
        "TimeDistributed": [keras.layers.TimeDistributed(layer) for layer in (
            conv, keras.layers.MaxPooling2D(2), keras.layers.Resizing(16, 12))],
        "per frame": [FrameConv2D.from_conv2d(conv), FrameMaxPooling2D(2),
                      FrameResizing(16, 12)],
    }
    emulator, reports = Emulator(2), {}
    for name, block in blocks.items():
        def step(x, block=block):
            x = spatial_tf.split(x, [1, 2, 1, 1, 1])
            with tf.GradientTape() as tape:
                y = x
                for layer in block:
                    y = layer(y)
                loss = tf.reduce_sum(y ** 2)
            weights = [w for layer in block for w in layer.trainable_variables]
            return loss, tape.gradient(loss, weights)

        reports[name] = emulator.report(step, (tf.ones((2, 4, 16, 16, 4)),))
    ours, theirs = reports["per frame"], reports["TimeDistributed"]
    assert theirs.warnings and theirs.ratio("temp") > 0.9
    assert ours.warnings == [] and ours.ratio("temp") < 0.6
    assert not [c for c in ours.collectives if c.kind in GATHER_KINDS]
    # what remains are the kernel and bias gradients' sums and the loss's
    assert all(c.kind == "all-reduce" and c.bytes <= 3 * 3 * 4 * 8 * 4 for c in ours.collectives)
