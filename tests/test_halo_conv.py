"""spatial_tf.halo_conv: Keras' convolution results and gradients, a list of inputs as their
concatenation, and less memory per core when split (the emulator's compiled programs)."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.halo_conv import HaloConv2D, HaloConv3D, conv_keeping_input_unpadded

RNG = np.random.default_rng(0)


def _pair(halo_cls, keras_cls, channels, **options):
    """A HaloConv layer taking one input per entry of ``channels`` and Keras' layer on their
    concatenation, with the same weights (float64)."""
    halo = halo_cls(4, dtype="float64", **options)
    plain = keras_cls(4, dtype="float64", **options)
    return halo, plain


def _results(layer, inputs, concatenate):
    inputs = [tf.constant(x) for x in inputs]
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        y = layer(tf.concat(inputs, -1) if concatenate else inputs)
        loss = tf.reduce_sum(tf.sin(y) * y)  # a gradient that is not constant
    return [y] + tape.gradient(loss, inputs + layer.trainable_variables)


CASES = [  # (layer, Keras' layer, batch and spatial shape, channels per input, options)
    (HaloConv3D, keras.layers.Conv3D, (2, 6, 7, 5), [3], dict(kernel_size=3, padding="same")),
    (HaloConv3D, keras.layers.Conv3D, (2, 6, 7, 5), [3, 2], dict(kernel_size=3, padding="same", use_bias=False)),
    (HaloConv3D, keras.layers.Conv3D, (1, 6, 7, 5), [2, 1], dict(kernel_size=3, padding="valid")),
    (HaloConv3D, keras.layers.Conv3D, (1, 6, 7, 5), [2], dict(kernel_size=2, padding="same")),
    (HaloConv3D, keras.layers.Conv3D, (1, 6, 7, 5), [2], dict(kernel_size=(3, 1, 2), padding="same")),
    (HaloConv3D, keras.layers.Conv3D, (1, 6, 7, 5), [2], dict(kernel_size=(3, 1, 2), padding="valid")),
    (HaloConv3D, keras.layers.Conv3D, (1, 6, 8, 6), [2, 2], dict(kernel_size=3, strides=2, padding="same")),
    (HaloConv3D, keras.layers.Conv3D, (1, 6, 7, 5), [2], dict(kernel_size=3, dilation_rate=2, padding="same")),
    (HaloConv3D, keras.layers.Conv3D, (1, 6, 7, 5), [2, 3],
     dict(kernel_size=3, padding="same", use_bias=True, activation="relu")),
    (HaloConv2D, keras.layers.Conv2D, (2, 9, 7), [3], dict(kernel_size=3, padding="same")),
    (HaloConv2D, keras.layers.Conv2D, (2, 9, 7), [1, 2], dict(kernel_size=4, padding="valid", use_bias=False)),
    (HaloConv2D, keras.layers.Conv2D, (2, 9, 7), [3], dict(kernel_size=(1, 3), padding="same")),
    (HaloConv2D, keras.layers.Conv2D, (2, 9, 8), [2, 1], dict(kernel_size=3, strides=2, padding="valid")),
]


def test_cases_were_collected():
    assert len(CASES) == 13


@pytest.mark.parametrize("halo_cls, keras_cls, shape, channels, options", CASES)
def test_results_and_gradients_equal_keras_convolution(halo_cls, keras_cls, shape, channels, options):
    halo, plain = _pair(halo_cls, keras_cls, channels, **options)
    inputs = [RNG.normal(size=shape + (c,)) for c in channels]
    halo(inputs if len(inputs) > 1 else inputs[0])
    plain(np.concatenate(inputs, -1))
    plain.set_weights(halo.get_weights())
    assert halo.kernel.shape == plain.kernel.shape
    assert halo.kernel.shape[-2:] == (sum(channels), 4)
    got = _results(halo, inputs, concatenate=False)
    want = _results(plain, inputs, concatenate=True)
    assert len(got) == len(want) == 1 + len(channels) + (2 if options.get("use_bias", True) else 1)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-11, atol=1e-11)


def test_a_single_input_may_be_a_tensor_or_a_list():
    layer = HaloConv3D(2, 3, padding="same")
    x = RNG.normal(size=(1, 4, 4, 4, 3)).astype("float32")
    np.testing.assert_array_equal(layer(x).numpy(), layer([x]).numpy())


def test_the_function_equals_tensorflows_gradient_in_float64():
    x = tf.constant(RNG.normal(size=(2, 5, 6, 3)))
    w = tf.constant(RNG.normal(size=(3, 3, 3, 2)))
    for padding in ("SAME", "VALID"):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([x, w])
            mine = conv_keeping_input_unpadded(x, w, padding.lower())
            theirs = tf.nn.convolution(x, w, padding=padding)
            losses = [tf.reduce_sum(mine * tf.cos(mine)), tf.reduce_sum(theirs * tf.cos(theirs))]
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
        for a, b in zip(tape.gradient(losses[0], [x, w]), tape.gradient(losses[1], [x, w])):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)


def test_mixed_precision_computes_in_bfloat16_with_float32_kernels():
    layer = HaloConv3D(2, 3, padding="same", dtype="mixed_bfloat16")
    x = tf.constant(RNG.normal(size=(1, 4, 4, 4, 3)), tf.float32)
    with tf.GradientTape() as tape:
        y = layer([x[..., :1], x[..., 1:]])
        loss = tf.reduce_sum(tf.cast(y, tf.float32))
    assert y.dtype == tf.bfloat16 and layer.kernel.dtype == "float32"
    assert tape.gradient(loss, layer.kernel).dtype == tf.float32


def test_config_and_saved_model_round_trip(tmp_path):
    inputs = [keras.Input((4, 4, 4, 2)), keras.Input((4, 4, 4, 1))]
    model = keras.Model(inputs, HaloConv3D(3, 3, padding="same", name="halo")(inputs))
    x = [RNG.normal(size=(1, 4, 4, 4, 2)).astype("float32"),
         RNG.normal(size=(1, 4, 4, 4, 1)).astype("float32")]
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded.get_layer("halo")) is HaloConv3D
    np.testing.assert_array_equal(loaded(x).numpy(), model(x).numpy())
    config = model.get_layer("halo").get_config()
    assert (config["filters"], config["kernel_size"], config["padding"]) == (3, (3, 3, 3), "same")


@pytest.mark.parametrize("call, match", [
    (lambda: HaloConv3D(2, 3)([np.ones((1, 4, 4, 4, 1)), np.ones((1, 4, 4, 2, 1))]),
     r"input 1 has spatial shape \(4, 4, 2\) but input 0 has \(4, 4, 4\);.*Fix: crop or pad"),
    (lambda: HaloConv3D(2, 3)(np.ones((1, 4, 4, 1))),
     r"input 0 has shape \(1, 4, 4, 1\); expected 5 axes \(batch, 3 spatial, channels\)"),
    (lambda: HaloConv2D(2, 3)([np.ones((1, 4, 4, 1)), np.ones((1, 4, 4, 2, 1))]),
     r"input 1 has shape \(1, 4, 4, 2, 1\); expected 4 axes"),
    (lambda: conv_keeping_input_unpadded(tf.ones((1, 4, 1)), tf.ones((3, 1, 1)), "same"),
     r"x has shape \(1, 4, 1\); expected a batch of 2D \(NHWC\) or 3D \(NDHWC\) inputs"),
])
def test_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# -------------------------------------------------------------------- split on the emulator

def _two_convolutions(conv, size=16):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((size, size, size, 4), dtype="float64")
    x = conv(8, 3, padding="same", dtype="float64", name="c1")(inputs)
    x = keras.layers.ReLU(dtype="float64")(x)
    x = conv(8, 3, padding="same", dtype="float64", name="c2")(x)
    return keras.Model(inputs, x)


def _gradient_step(model, spec):
    def step(image):
        image = spatial_tf.split(image, spec)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(image) ** 2)
        return [loss] + tape.gradient(loss, model.trainable_variables)
    return step


@pytest.mark.emulator
def test_split_gradients_match_and_per_core_memory_falls():
    from spatial_tf.emulator import Emulator

    emulator = Emulator(num_cores_per_replica=4)
    halo, plain = _two_convolutions(HaloConv3D), _two_convolutions(keras.layers.Conv3D)
    plain.set_weights(halo.get_weights())
    image = RNG.normal(size=(1, 16, 16, 16, 4))
    spec = [1, 4, 1, 1, 1]
    got = emulator.run(_gradient_step(halo, spec), args=(image,))
    want = emulator.run(_gradient_step(plain, spec), args=(image,))
    reference = tf.function(_gradient_step(plain, None), jit_compile=True)(image)
    for a, b, c in zip(got, want, reference):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(np.asarray(a), np.asarray(c), rtol=1e-10, atol=1e-12)
    # pieces 4 voxels thick: the padded copy TensorFlow's gradient keeps is 1.5x the piece;
    # in the emulator's memory-optimized schedule that costs the plain step 6% (0.943)
    halo_temp = emulator.report(_gradient_step(halo, spec), args=(image,)).partitioned["temp"]
    plain_temp = emulator.report(_gradient_step(plain, spec), args=(image,)).partitioned["temp"]
    assert halo_temp < 0.96 * plain_temp, (halo_temp, plain_temp)


def test_gradient_ops_are_named_after_the_convolution_they_differentiate():
    """TensorFlow names a gradient op gradient_tape/<forward op>/...; the halo form's do
    the same, so Emulator.report traces a gather there back to the layer's line."""
    from spatial_tf.emulator.diagnose import op_source

    layer = HaloConv2D(2, 3, padding="same", name="edges")
    x = tf.ones([1, 6, 6, 1])
    layer.build(x.shape)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(tf.square(layer(x)))
        return tape.gradient(loss, [x, layer.kernel])

    graph = step.get_concrete_function(x).graph
    forward = [op for op in graph.get_operations() if op.type == "Conv2D"]
    backward = [op for op in graph.get_operations() if "Backprop" in op.type]
    assert len(forward) == 1 and forward[0].name.startswith("edges")
    assert sorted(op.type for op in backward) == ["Conv2DBackpropFilter", "Conv2DBackpropInput"]
    for op in backward:
        assert op.name.startswith(f"gradient_tape/{forward[0].name}/"), op.name
        source = op_source.find(graph, op.name)
        assert source.op is forward[0] and source.gradient
    # eagerly there are no names to give: the gradient is still TensorFlow's
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(x))
    assert tape.gradient(loss, layer.kernel).shape == (3, 3, 1, 2)


def test_the_kernel_gradient_waits_for_the_input_gradient_without_changing_value():
    from spatial_tf.halo_conv import _after

    dw = tf.constant(RNG.normal(size=(3, 3, 2, 4)))
    dx = tf.constant(RNG.normal(size=(1, 5, 5, 2)))
    np.testing.assert_array_equal(_after(dw, dx).numpy(), dw.numpy())
    assert not np.isfinite(_after(dw, dx * np.inf).numpy()).any()  # as documented


def _updating_step(model, optimizer, spec):
    """``_gradient_step``, then ``optimizer`` updates the weights in place."""
    gradient_step = _gradient_step(model, spec)

    def step(image):
        loss, *grads = gradient_step(image)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return step


@pytest.mark.emulator
def test_an_in_place_kernel_update_holds_no_copy_of_the_kernel(monkeypatch):
    """Without the order (_after), XLA keeps copies of the updated kernels for the input
    gradient's read: more temp than the smaller kernel (3x3x3x4x32, 13,824 bytes)."""
    from spatial_tf import halo_conv
    from spatial_tf.emulator import Emulator

    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 8, 4))
    x = HaloConv3D(32, 3, padding="same")(inputs)
    model = keras.Model(inputs, HaloConv3D(32, 3, padding="same")(x))
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)
    image = RNG.normal(size=(1, 8, 8, 8, 4)).astype("float32")
    emulator, spec = Emulator(num_cores_per_replica=2), [1, 2, 1, 1, 1]
    ordered = emulator.compile(_updating_step(model, optimizer, spec), args=(image,)).memory()
    monkeypatch.setattr(halo_conv, "_after", lambda dw, dx: dw)
    unordered = emulator.compile(_updating_step(model, optimizer, spec), args=(image,)).memory()
    assert unordered["temp"] - ordered["temp"] >= 3 * 3 * 3 * 4 * 32 * 4, (ordered, unordered)
