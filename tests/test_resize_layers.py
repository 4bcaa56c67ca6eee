"""Keras' Resizing / UpSampling2D / UpSampling3D after partition_friendly, and the Local*
layers: Keras' values and gradients, the reason for each layer left as it is, the
report's fix at a gathered resize, and no gather of a split activation afterwards."""
import numpy as np
import pytest
import tensorflow as tf

import keras
import spatial_tf
from spatial_tf.layers import (LocalResizing, LocalUpSampling2D, LocalUpSampling3D,
                               partition_friendly)

from test_resize import _image, _reference, _tf_resize


def _values_and_gradients(model, x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = model(x)
        loss = tf.reduce_sum(y * tf.cos(y))
    return [y] + tape.gradient(loss, [x] + model.trainable_variables)


def _assert_same(before, after, tolerance):
    """Equal to ``tolerance`` relative to the largest value of each tensor (a kernel's
    gradient sums many terms, some of its elements cancel out)."""
    for b, a in zip(before, after):
        scale = max(1.0, float(np.max(np.abs(b))))
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=tolerance * scale)


def _changed(changes, kind):
    return [c for c in changes if c.before == kind]


def test_nearest_resizes_keep_keras_float64_values_and_gradients_exactly():
    inputs = keras.Input((12, 12, 3), dtype="float64")
    x = keras.layers.Conv2D(3, 3, padding="same", dtype="float64")(inputs)
    x = keras.layers.Resizing(4, 6, interpolation="nearest", dtype="float64")(x)  # 1/3, 1/2
    x = keras.layers.UpSampling2D((3, 2), dtype="float64")(x)
    x = keras.layers.Resizing(24, 12, interpolation="nearest", dtype="float64")(x)  # x2, x1
    volume = keras.layers.Reshape((4, 6, 12, 3), dtype="float64")(x)
    x = keras.layers.UpSampling3D((2, 1, 3), dtype="float64")(volume)
    model = keras.Model(inputs, x)
    x = _image((2, 12, 12, 3))
    before = _values_and_gradients(model, x)
    changes = partition_friendly(model, warn=False)
    assert [c.after for c in _changed(changes, "Resizing") + _changed(changes, "UpSampling2D")
            + _changed(changes, "UpSampling3D")] == [
        "Resizing as spatial_tf.resize computes it (nearest; height 1/3, width 1/2)",
        "Resizing as spatial_tf.resize computes it (nearest; height x2, width x1)",
        "UpSampling2D as spatial_tf.resize computes it (nearest; height x3, width x2)",
        "UpSampling3D as spatial_tf.resize computes it (nearest; depth x2, height x1, width x3)"]
    assert all(c.handled for c in changes)
    _assert_same(before, _values_and_gradients(model, x), 1e-12)


def _bilinear_and_area_model(dtype):
    inputs = keras.Input((12, 12, 2), dtype=dtype)
    x = keras.layers.Conv2D(2, 3, padding="same", dtype=dtype)(inputs)
    x = keras.layers.Resizing(4, 3, dtype=dtype)(x)                                # 1/3, 1/4
    x = keras.layers.UpSampling2D((3, 4), interpolation="bilinear", dtype=dtype)(x)
    x = keras.layers.Resizing(24, 6, dtype=dtype)(x)                               # x2, 1/2
    x = keras.layers.Resizing(6, 12, interpolation="area", dtype=dtype)(x)        # 1/4, x2
    return keras.Model(inputs, x)


# Keras' bilinear and area resize in float32 whatever the layer's dtype (tf.image.resize);
# the float64 values themselves are checked exactly just below
@pytest.mark.parametrize("dtype, atol", [("float64", 2e-6), ("float32", 2e-5)])
def test_bilinear_and_area_resizes_keep_keras_values_and_gradients(dtype, atol):
    model = _bilinear_and_area_model(dtype)
    x = tf.cast(_image((2, 12, 12, 2)), dtype)
    before_y = model(x)
    with tf.GradientTape() as tape:  # TensorFlow has no gradient for ResizeArea: up to it
        tape.watch(x)
        y = _up_to(model, -1)(x)
        loss = tf.reduce_sum(y * tf.cos(y))
    before = [y] + tape.gradient(loss, [x] + model.trainable_variables)
    changes = partition_friendly(model, warn=False)
    assert len([c for c in changes if c.changed and c.handled]) == 5  # 4 resizes, 1 conv
    np.testing.assert_allclose(model(x), before_y, rtol=0, atol=atol)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = _up_to(model, -1)(x)
        loss = tf.reduce_sum(y * tf.cos(y))
    _assert_same(before, [y] + tape.gradient(loss, [x] + model.trainable_variables), atol)


def _up_to(model, end):
    return keras.Model(model.inputs, model.layers[end - 1].output)


def test_replaced_float64_resizes_are_exact():
    inputs = keras.Input((12, 12, 2), dtype="float64")
    resizes = [keras.layers.Resizing(4, 3, dtype="float64"),
               keras.layers.UpSampling2D((3, 4), interpolation="bilinear", dtype="float64"),
               keras.layers.Resizing(24, 6, interpolation="area", dtype="float64")]
    x = inputs
    for layer in resizes:
        x = layer(x)
    model = keras.Model(inputs, x)
    partition_friendly(model, warn=False)
    x = _image((2, 12, 12, 2))
    weights = _image((2, 24, 6, 2), seed=1)
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(model(x) * weights)
    expected = _reference(_reference(_reference(x, (4, 3), "bilinear"), (12, 12), "bilinear"),
                          (24, 6), "area")
    np.testing.assert_allclose(model(x), expected, rtol=0, atol=1e-12)
    gradient = _reference(_reference(_reference(weights, (12, 12), "area", transpose=True),
                                     (4, 3), "bilinear", transpose=True),
                          (12, 12), "bilinear", transpose=True)
    np.testing.assert_allclose(tape.gradient(loss, x), gradient, rtol=0, atol=1e-12)


def _left(layer, shape=(16, 16, 3)):
    inputs = keras.Input(shape)
    model = keras.Model(inputs, layer(inputs))
    [change] = partition_friendly(model, warn=False)
    assert change.after == "unchanged" and not change.handled
    return change.why


@pytest.mark.parametrize("layer, shape, why", [
    (lambda: keras.layers.Resizing(100, 112), (224, 224, 1),
     "Resizing 224 -> 100 (height) is not an integer factor: resize to 112 (1/2) or 56 (1/4) "
     "so partition_friendly can replace it"),
    (lambda: keras.layers.Resizing(8, 24), (16, 16, 3),
     "Resizing 16 -> 24 (width) is not an integer factor: resize to 16 (as it is) or 32 (x2) "
     "so partition_friendly can replace it"),
    (lambda: keras.layers.Resizing(8, 8, antialias=True), (16, 16, 3),
     "Resizing with antialias=True has no local form (downsampling, its filter is wider than "
     "the factor; upsampling, it changes nothing): drop antialias=True so partition_friendly "
     "can replace it"),
    (lambda: keras.layers.Resizing(8, 4, crop_to_aspect_ratio=True), (16, 16, 3),
     "Resizing with crop_to_aspect_ratio=True crops to the output's aspect ratio before it "
     "resizes: do that in the input pipeline (or resize to sizes of the input's aspect "
     "ratio) and drop crop_to_aspect_ratio so partition_friendly can replace it"),
    (lambda: keras.layers.Resizing(8, 4, pad_to_aspect_ratio=True), (16, 16, 3),
     "Resizing with pad_to_aspect_ratio=True pads to the output's aspect ratio before it "
     "resizes"),
    (lambda: keras.layers.Resizing(8, 8, interpolation="bicubic"), (16, 16, 3),
     "Resizing with interpolation='bicubic' has no local form here: use 'bilinear', "
     "'nearest' or 'area' so partition_friendly can replace it"),
    (lambda: keras.layers.UpSampling2D(2, interpolation="lanczos3"), (16, 16, 3),
     "UpSampling2D with interpolation='lanczos3' has no local form here"),
    (lambda: keras.layers.UpSampling3D(2, data_format="channels_first"), (2, 8, 8, 8),
     "UpSampling3D with data_format='channels_first' resizes other axes: use channels_last "
     "so partition_friendly can replace it"),
])
def test_unsupported_resizes_are_left_with_the_reason(layer, shape, why):
    assert _left(layer(), shape).startswith(why)


def test_a_resize_of_unknown_input_size_is_decided_at_each_call():
    layer = keras.layers.Resizing(8, 8)
    layer.build((None, 16, 16, 1))
    [change] = partition_friendly(layer, warn=False)
    assert change.after == ("Resizing as spatial_tf.resize computes it (bilinear; where each "
                            "factor is an integer, else Keras' own)")
    for shape in [(1, 16, 16, 1), (1, 12, 10, 1)]:  # by 2; not an integer factor
        x = _image(shape, dtype=tf.float32)
        np.testing.assert_allclose(layer(x), tf.image.resize(x, (8, 8)), atol=1e-6)
    images = tf.cast(tf.reshape(tf.range(256), [1, 16, 16, 1]), tf.uint8)
    np.testing.assert_array_equal(layer(images), keras.layers.Resizing(8, 8)(images))


@pytest.mark.parametrize("layer, shape, size, method", [
    (lambda: LocalResizing((4, 12)), (2, 8, 4, 3), (4, 12), "bilinear"),
    (lambda: LocalResizing((6, 3, 8), "area"), (1, 12, 6, 4, 2), (6, 3, 8), "area"),
    (lambda: LocalUpSampling2D((2, 3), "bilinear"), (2, 5, 4, 1), (10, 12), "bilinear"),
    (lambda: LocalUpSampling2D(), (2, 5, 4, 1), (10, 8), "nearest"),
    (lambda: LocalUpSampling3D((1, 2, 4), "bilinear"), (1, 3, 4, 2, 2), (3, 8, 8), "bilinear"),
])
def test_local_layers_give_tensorflows_values_and_round_trip_their_config(layer, shape,
                                                                          size, method):
    layer = layer()
    x = _image(shape, dtype=tf.float32)
    np.testing.assert_allclose(layer(x), _tf_resize(x, size, method), rtol=0, atol=3e-6)
    assert layer.compute_output_shape(shape) == (shape[0], *size, shape[-1])
    copy = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(copy) is type(layer) and copy.get_config() == layer.get_config()
    np.testing.assert_array_equal(copy(x), layer(x))


def test_a_model_with_local_layers_saves_and_loads(tmp_path):
    inputs = keras.Input((8, 8, 1))
    x = LocalUpSampling2D(2, "bilinear")(inputs)
    model = keras.Model(inputs, LocalResizing((4, 4), "area")(x))
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    x = _image((1, 8, 8, 1), dtype=tf.float32)
    np.testing.assert_array_equal(loaded(x), model(x))


@pytest.mark.parametrize("make, message", [
    (lambda: LocalResizing(8), "LocalResizing: size is 8; expected positive ints (height, "
                               "width) or (depth, height, width). Fix: e.g. size=(2, 2)."),
    (lambda: LocalUpSampling3D((2, 2)), "LocalUpSampling3D: size is (2, 2); expected positive "
                                        "ints (depth, height, width). Fix: e.g. size=(2, 2, 2)."),
    (lambda: LocalUpSampling2D(interpolation="bicubic"),
     "LocalUpSampling2D: interpolation is 'bicubic'; expected one of 'bilinear', 'nearest', "
     "'area'. Fix:"),
])
def test_bad_layer_arguments_are_refused_with_the_fix(make, message):
    with pytest.raises(ValueError, match="".join("\\" + c if c in "[]()*." else c
                                                 for c in message)):
        make()


@pytest.mark.emulator
@pytest.mark.parametrize("make, op_type, expected", [
    (lambda x: tf.image.resize(x, (48, 32)), "ResizeBilinear",
     "XLA has no partitioned form of TensorFlow's ResizeBilinear, so it reassembles the whole "
     "image on every core (here a resize by integer factors: height x3, width x2). Fix: "
     "spatial_tf.layers.partition_friendly(model) computes Keras' Resizing, UpSampling2D and "
     "UpSampling3D by integer factors without the gather"),
    (lambda x: tf.image.resize(x, (10, 16), "nearest"), "ResizeNearestNeighbor",
     "TensorFlow's ResizeNearestNeighbor, so it reassembles the whole image on every core: "
     "along the height, 16 -> 10 is not an integer factor, which no local form computes. "
     "Fix: resize to 8 (1/2) or 16 (as it is); then spatial_tf.layers.partition_friendly"),
    (lambda x: tf.compat.v1.image.resize(x, (32, 32), align_corners=True), "ResizeBilinear",
     "whole image on every core: it aligns corners (align_corners=True), which no local form "
     "computes. Fix: resize with half-pixel centres (tf.image.resize, Keras' Resizing: their "
     "default) by integer factors; then"),
    (lambda x: tf.compat.v1.image.resize(x, (32, 32)), "ResizeBilinear",
     "it samples from the corners (half_pixel_centers=False, tf.compat.v1's)"),
])
def test_the_report_names_what_makes_a_resize_local(make, op_type, expected):
    from spatial_tf.emulator.diagnose import op_source, remedies

    graph = tf.function(make).get_concrete_function(tf.TensorSpec([2, 16, 16, 4])).graph
    [op] = [op for op in graph.get_operations() if op.type == op_type]
    assert expected in remedies.explain("all-gather", op_source.find(graph, op.name), 4)


@pytest.mark.emulator
def test_after_partition_friendly_a_split_step_gathers_nothing():
    # split [1, 2, 2, 1], each core's share of a downsampled axis a multiple of its factor
    inputs = keras.Input((24, 24, 2))
    x = keras.layers.Conv2D(2, 3, padding="same")(inputs)
    x = keras.layers.Resizing(8, 6)(x)                                            # 1/3, 1/4
    x = keras.layers.UpSampling2D((3, 4), interpolation="bilinear")(x)
    model = keras.Model(inputs, keras.layers.Resizing(48, 12)(x))                  # x2, 1/2
    x = _image((2, 24, 24, 2)).numpy().astype(np.float32)

    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(spatial_tf.split(x, [1, 2, 2, 1])) ** 2)
        return loss, tape.gradient(loss, model.trainable_variables)

    emulator = spatial_tf.Emulator(4)
    before = emulator.report(step, (x,))
    resizes = [w for w in before.warnings if "ResizeBilinear" in w]
    assert resizes and "here a resize by integer factors" in resizes[0]
    expected = step(x)  # TensorFlow's own kernels (XLA's ResizeBilinear differs by 3: below)
    partition_friendly(model, warn=False)
    after = emulator.report(step, (x,))
    assert after.warnings == [], after.warnings
    assert "all-gather" not in after.by_kind()
    assert after.partitioned["temp"] < before.partitioned["temp"]
    for a, b in zip(tf.nest.flatten(emulator.run(step, (x,))), tf.nest.flatten(expected)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_under_xla_the_replaced_layers_give_tensorflows_values():
    """XLA's own lowering of ResizeBilinear (tf.function(jit_compile=True) on CPU) differs
    from TensorFlow's kernel for odd upsampling factors (some outputs by whole input
    steps); the replaced layers give the kernel's values under XLA too."""
    inputs = keras.Input((6, 8, 2))
    model = keras.Model(inputs, keras.layers.UpSampling2D((3, 5), interpolation="bilinear")(
        keras.layers.Resizing(3, 4)(inputs)))
    x = _image((2, 6, 8, 2), dtype=tf.float32)
    expected = model(x)
    partition_friendly(model, warn=False)
    np.testing.assert_allclose(tf.function(model, jit_compile=True)(x), expected, atol=3e-6)


@pytest.mark.emulator
def test_nearest_and_area_resizes_compile_once_replaced():
    inputs = keras.Input((12, 12, 2))
    x = keras.layers.Conv2D(2, 3, padding="same")(inputs)
    x = keras.layers.Resizing(24, 24, interpolation="area")(x)
    x = keras.layers.Resizing(6, 6, interpolation="nearest")(x)
    model = keras.Model(inputs, keras.layers.UpSampling2D(2)(x))

    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(spatial_tf.split(x, [1, 2, 2, 1])) ** 2)
        return loss, tape.gradient(loss, model.trainable_variables)

    x = _image((2, 12, 12, 2)).numpy().astype(np.float32)
    emulator = spatial_tf.Emulator(4)
    with pytest.raises(Exception, match="ResizeArea"):  # no gradient, nor an XLA kernel
        emulator.report(step, (x,))
    partition_friendly(model, warn=False)
    report = emulator.report(step, (x,))
    assert report.warnings == [] and "all-gather" not in report.by_kind()
