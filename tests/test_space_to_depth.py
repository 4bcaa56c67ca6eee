"""strided_conv_by_space_to_depth: the strided convolution's values and both gradients
(float64, against XLA's own strided convolution), computed at stride 1 on s**2 times the
channels; clear errors where it cannot."""
import numpy as np
import pytest
import tensorflow as tf

from spatial_tf.space_to_depth import space_to_depth_problem, strided_conv_by_space_to_depth

# (input shape, kernel window, strides, padding): written out, not derived from the code
CASES = [
    ([2, 12, 3], [3], [2], "SAME"),
    ([2, 12, 3], [3], [2], "VALID"),
    ([1, 12, 2], [4], [2], "SAME"),     # even kernel: padding split unevenly
    ([1, 12, 2], [7], [3], "SAME"),     # kernel wider than two strides
    ([1, 12, 2], [1], [3], "SAME"),     # kernel narrower than the stride
    ([2, 8, 8, 3], [3, 3], [2, 2], "SAME"),   # the usual image stem
    ([2, 8, 8, 3], [7, 7], [2, 2], "SAME"),   # ResNet's stem
    ([1, 8, 12, 3], [3, 5], [2, 3], "VALID"),
    ([1, 6, 8, 2], [2, 3], [3, 2], "SAME"),
    ([2, 4, 8, 8, 3], [1, 3, 3], [1, 2, 2], "SAME"),  # MoViNet's stem
    ([1, 6, 6, 6, 2], [3, 3, 3], [2, 2, 2], "SAME"),
    ([1, 6, 6, 6, 2], [1, 1, 1], [3, 3, 3], "SAME"),
    ([1, 6, 8, 8, 2], [3, 2, 5], [3, 2, 2], "VALID"),
]


def _values_and_gradients(convolve, x, kernel, jit_compile=True):
    @tf.function(jit_compile=jit_compile)
    def run(x, kernel):
        with tf.GradientTape() as tape:
            tape.watch([x, kernel])
            y = convolve(x, kernel)
            loss = tf.reduce_sum(y * tf.sin(y))
        return [y] + tape.gradient(loss, [x, kernel])

    return run(x, kernel)


@pytest.mark.parametrize("jit_compile", [True, False], ids=["XLA", "TensorFlow"])
@pytest.mark.parametrize("shape,window,strides,padding", CASES)
def test_values_and_gradients_equal_the_strided_convolutions(shape, window, strides, padding,
                                                              jit_compile):
    rng = np.random.default_rng(len(shape) * 100 + sum(window))
    x = tf.constant(rng.normal(size=shape))
    kernel = tf.constant(rng.normal(size=window + [shape[-1], 4]))
    ours = _values_and_gradients(
        lambda x, k: strided_conv_by_space_to_depth(x, k, strides, padding), x, kernel,
        jit_compile)
    # against XLA's strided convolution (the one a TPU runs): TensorFlow's own CPU Conv3D
    # is wrong for a 1x1x1 kernel at stride 3 (the [1, 6, 6, 6, 2] case; XLA and a direct
    # computation agree)
    theirs = _values_and_gradients(
        lambda x, k: tf.nn.convolution(x, k, strides, padding), x, kernel)
    for name, a, b in zip(("output", "input gradient", "kernel gradient"), ours, theirs):
        assert a.shape == b.shape, name
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-10, err_msg=name)


def test_the_convolution_runs_at_stride_1_on_the_patches_folded_into_channels():
    x = tf.TensorSpec([2, 4, 16, 16, 3], tf.float32)
    kernel = tf.TensorSpec([1, 3, 3, 3, 8], tf.float32)
    graph = tf.function(lambda x, k: strided_conv_by_space_to_depth(
        x, k, [1, 2, 2], "SAME")).get_concrete_function(x, kernel).graph
    fold, conv = [op for op in graph.get_operations() if op.type == "Conv3D"]
    # the fold: each 2x2 patch of 3 channels into 12, by a one-hot kernel
    assert list(fold.get_attr("strides")) == [1, 1, 2, 2, 1]
    assert fold.inputs[1].op.type == "Const"
    assert fold.inputs[1].shape.as_list() == [1, 2, 2, 3, 12]
    assert fold.outputs[0].shape.as_list() == [2, 4, 8, 8, 12]
    # the convolution: stride 1, on the folded input with one block of padding after
    assert list(conv.get_attr("strides")) == [1, 1, 1, 1, 1]
    assert conv.inputs[0].shape.as_list() == [2, 4, 9, 9, 12]
    assert conv.inputs[1].shape.as_list() == [1, 2, 2, 12, 8]
    assert conv.outputs[0].shape.as_list() == [2, 4, 8, 8, 8]


@pytest.mark.parametrize("shape,window,strides,padding,reason", [
    ([1, 7, 8, 3], [3, 3], [2, 2], "SAME", "spatial axis 1 has size 7, not a multiple of its stride 2"),
    ([1, 8, 9, 3], [3, 3], [1, 3], "SAME", None),
    ([1, 8, 10, 3], [3, 3], [1, 3], "VALID", "spatial axis 2 has size 10, not a multiple of its stride 3"),
    ([1, 8, 8, 3], [3, 3], [1, 1], "SAME", "the convolution has stride 1"),
    ([1, 8, 8, 3], [3, 3], [2, 2], "causal", "padding 'causal' is neither 'same' nor 'valid'"),
    ([None, 8, 8, 3], [3, 3], [2, 2], "same", None),
    ([1, None, 8, 3], [3, 3], [2, 2], "SAME", "spatial axis 1 has size None, not a multiple of its stride 2"),
])
def test_what_it_cannot_compute_is_named(shape, window, strides, padding, reason):
    assert space_to_depth_problem(shape, window, strides, padding) == reason


def test_an_unsupported_convolution_raises_with_the_reason_and_the_fix():
    x, kernel = tf.zeros([1, 7, 8, 3]), tf.zeros([3, 3, 3, 4])
    with pytest.raises(ValueError) as raised:
        strided_conv_by_space_to_depth(x, kernel, 2, "SAME")
    assert str(raised.value) == (
        "strided_conv_by_space_to_depth: spatial axis 1 has size 7, not a multiple of its "
        "stride 2. Fix: use tf.nn.convolution for this convolution.")
