"""spatial_tf.update_order: the same values and gradients, with the weight's gradient made
to depend on every read of the weight."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from spatial_tf.update_order import (after, is_ordered, ordered_call, ordered_convolution,
                                     ordered_loss, ordered_regularizer)

RNG = np.random.default_rng(0)


def _ancestors(tensor):
    """Every op ``tensor`` depends on through data."""
    seen, pending = set(), [tensor.op]
    while pending:
        op = pending.pop()
        for t in op.inputs:
            if t.op not in seen:
                seen.add(t.op)
                pending.append(t.op)
    return seen


@pytest.mark.parametrize("read_shape", [(), (4,), (1, 5, 5, 2)])
def test_after_keeps_the_value_and_propagates_non_finite_reads(read_shape):
    value = tf.constant(RNG.normal(size=(3, 3, 2, 4)))
    read = tf.constant(RNG.normal(size=read_shape))
    np.testing.assert_array_equal(after(value, read).numpy(), value.numpy())
    assert not np.isfinite(after(value, read * np.inf).numpy()).any()
    assert after(value, tf.cast(read, tf.float32)).dtype == tf.float64


def test_after_makes_the_value_depend_on_the_read():
    graph = tf.function(lambda v, r: after(v * 2, tf.sin(r))).get_concrete_function(
        tf.TensorSpec([2], tf.float32), tf.TensorSpec([3, 1], tf.float32)).graph
    [sin] = [op for op in graph.get_operations() if op.type == "Sin"]
    assert sin in _ancestors(graph.outputs[0])


@pytest.mark.parametrize("strides,dilations", [(2, 1), (1, 2), (1, 1)])
def test_ordered_convolution_has_tensorflows_values_and_gradients(strides, dilations):
    x = tf.constant(RNG.normal(size=(2, 9, 8, 3)))
    w = tf.constant(RNG.normal(size=(3, 3, 3, 4)))

    def conv(x, w):
        return tf.nn.convolution(x, w, strides, "SAME", dilations=dilations)

    def results(convolve):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = convolve(x, w)
            loss = tf.reduce_sum(y * tf.cos(y))
        return [y] + tape.gradient(loss, [x, w])

    expected = results(conv)
    for got in (results(lambda x, w: ordered_convolution(conv, x, w)),
                tf.function(results)(lambda x, w: ordered_convolution(conv, x, w))):
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)


def test_the_ordered_kernel_gradient_depends_on_the_input_gradient():
    def grads(x, w):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = ordered_convolution(lambda x, w: tf.nn.conv2d(x, w, 2, "SAME"), x, w)
        return tape.gradient(y, [x, w])

    graph = tf.function(grads).get_concrete_function(
        tf.TensorSpec([1, 8, 8, 2]), tf.TensorSpec([3, 3, 2, 4])).graph
    [backprop_input] = [op for op in graph.get_operations()
                        if op.type == "Conv2DBackpropInput"]
    assert backprop_input in _ancestors(graph.outputs[1])
    assert backprop_input.name.startswith("gradient_tape/")  # traced to the convolution


def _float64_layer(make, input_shape):
    layer = make(dtype="float64")
    layer.build(input_shape)
    for v in layer.trainable_variables:
        v.assign(RNG.normal(size=v.shape))
    return layer


CALLS = [
    ("conv3d_transpose", lambda **k: keras.layers.Conv3DTranspose(3, 2, strides=2, **k),
     (1, 3, 4, 3, 2)),
    ("conv2d_transpose_3x3_stride2",
     lambda **k: keras.layers.Conv2DTranspose(3, 3, strides=2, padding="same", **k),
     (2, 5, 4, 2)),
    ("separable_conv2d", lambda **k: keras.layers.SeparableConv2D(4, 3, **k), (1, 7, 6, 2)),
]


@pytest.mark.parametrize("make,shape", [c[1:] for c in CALLS], ids=[c[0] for c in CALLS])
def test_ordered_call_has_tensorflows_values_and_weight_gradients(make, shape):
    layer = _float64_layer(make, shape)
    x = tf.constant(RNG.normal(size=shape))

    def results(call):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = call(x)
            loss = tf.reduce_sum(y * tf.cos(y))
        return [y] + tape.gradient(loss, [x] + layer.trainable_variables)

    expected = results(layer)
    assert len(expected) == 2 + len(layer.trainable_variables) and None not in expected
    for got in (results(lambda x: ordered_call(layer, x)),
                tf.function(results)(lambda x: ordered_call(layer, x))):
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)


def test_the_ordered_calls_weight_gradients_depend_on_the_input_gradient():
    layer = keras.layers.Conv2DTranspose(4, 2, strides=2)
    layer.build((1, 4, 4, 2))

    def grads(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = ordered_call(layer, x)
        return tape.gradient(y, [x] + layer.trainable_variables)

    graph = tf.function(grads).get_concrete_function(tf.TensorSpec([1, 4, 4, 2])).graph
    [input_gradient] = [op for op in graph.get_operations() if op.type == "Conv2D"]
    for kernel_or_bias in graph.outputs[1:]:
        assert input_gradient in _ancestors(kernel_or_bias)
    assert input_gradient.name.startswith("gradient_tape/")  # traced to the layer


def test_ordered_call_of_an_input_without_gradient_leaves_the_weight_gradients():
    layer = keras.layers.Conv2DTranspose(2, 2, strides=2)
    layer.build((1, 3, 3, 1))
    x = tf.ones((1, 3, 3, 1), tf.int32)  # an integer input has no gradient

    with tf.GradientTape() as tape:
        y = ordered_call(lambda x: layer(tf.cast(x, tf.float32)), x)
    expected = tf.reduce_sum(tf.ones((1, 3, 3, 1)))  # each kernel tap sees every input once
    np.testing.assert_allclose(tape.gradient(y, layer.kernel.value).numpy(),
                               np.full((2, 2, 2, 1), expected.numpy()))


def _l2(v):
    return lambda: 0.5 * tf.reduce_sum(tf.square(v)) + tf.reduce_sum(v)


def test_ordered_loss_has_the_same_value_and_gradients_eager_and_traced():
    v = tf.Variable(RNG.normal(size=(3, 4)))
    plain, ordered = _l2(v), ordered_loss(_l2(v))

    def value_and_grad(loss):
        with tf.GradientTape() as tape:
            value = loss()
        return value, tape.gradient(value, v)

    expected = value_and_grad(plain)
    np.testing.assert_allclose(expected[1].numpy(), v.numpy() + 1)  # the test's own check
    for got in (value_and_grad(ordered), tf.function(value_and_grad)(ordered)):
        np.testing.assert_allclose(got[0].numpy(), expected[0].numpy(), rtol=1e-14)
        np.testing.assert_allclose(got[1].numpy(), expected[1].numpy(), rtol=1e-14)


def test_the_ordered_losss_weight_gradient_depends_on_its_value():
    v = tf.Variable(tf.ones((3, 4)))
    ordered = ordered_loss(lambda: tf.reduce_sum(tf.exp(v)))

    def grad():
        with tf.GradientTape() as tape:
            value = ordered()
        return tape.gradient(value, v)

    graph = tf.function(grad).get_concrete_function().graph
    [forward_exp] = [op for op in graph.get_operations()
                     if op.type == "Exp" and not op.name.startswith("gradient")]
    assert forward_exp in _ancestors(graph.outputs[0])


def test_ordered_loss_and_regularizer_are_marked_and_wrapped_once():
    loss = _l2(tf.Variable(1.0))
    assert not is_ordered(loss)
    ordered = ordered_loss(loss)
    assert is_ordered(ordered) and ordered_loss(ordered) is ordered
    regularizer = ordered_regularizer(keras.regularizers.L2(0.1))
    assert is_ordered(regularizer) and ordered_regularizer(regularizer) is regularizer


def test_a_loss_that_reads_no_weight_still_gives_its_value():
    assert float(ordered_loss(lambda: tf.constant(3.0))()) == 3.0


def test_ordered_regularizer_keeps_a_keras_variables_value_and_gradient():
    v = keras.Variable(RNG.normal(size=(3, 3)), dtype="float64")
    regularizer = keras.regularizers.L1L2(l1=0.01, l2=0.1)
    ordered = ordered_regularizer(regularizer)
    values, grads = [], []
    for r in (regularizer, ordered):
        with tf.GradientTape() as tape:
            value = r(v)
        values.append(float(value))
        grads.append(tape.gradient(value, v.value).numpy())
    assert values[1] == pytest.approx(values[0], rel=1e-14)
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-14)


def test_ordered_regularizer_on_a_tensor_is_the_regularizer_itself():
    t = tf.constant(RNG.normal(size=(3, 3)))
    with tf.GradientTape() as tape:  # a tensor: the gradient must flow to it as before
        tape.watch(t)
        value = ordered_regularizer(keras.regularizers.L2(0.5))(t)
    np.testing.assert_allclose(tape.gradient(value, t).numpy(), t.numpy(), rtol=1e-14)
