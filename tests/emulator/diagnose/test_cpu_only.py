"""The report's notes on memory only XLA:CPU spends: depthwise kernel gradients expanded
to channels x window x channels."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator.diagnose.cpu_only import expanded_depthwise_gradients, notes


def _line(shape, op="convolution"):
    return f"  %x.1 = {shape}{{4,3,2,1,0}} {op}(%a, %b), window={{size=8x1x1}}"


def _mask(shape):
    """The iota XLA masks an expansion's diagonal with."""
    return f"  %iota.2 = {shape}{{4,3,2,1,0}} iota(), iota_dimension=3"


def test_the_expansion_of_a_grouped_depthwise_kernel_is_found_with_its_bytes():
    text = "\n".join([_line("f32[384,5,3,3,384]"), _line("f32[2,8,6,6,384]"),
                      _mask("s32[5,3,3,384,384]")])
    [found] = expanded_depthwise_gradients(text, [[5, 3, 3, 1, 384], [1, 1, 1, 96, 384]])
    assert (found.shape, found.bytes) == ("f32[384,5,3,3,384]", 384 * 45 * 384 * 4)


def test_a_depthwise_conv2d_kernel_with_a_multiplier_is_matched_by_its_outputs():
    text = "\n".join([_line("bf16[8,3,3,16]"), _mask("s32[3,3,8,16]")])
    [found] = expanded_depthwise_gradients(text, [[3, 3, 8, 2]])
    assert (found.shape, found.bytes) == ("bf16[8,3,3,16]", 8 * 9 * 16 * 2)


MASK = _mask("s32[5,3,3,384,384]")


@pytest.mark.parametrize("text,kernels", [
    (_line("f32[384,5,3,3,384]", op="fusion") + "\n" + MASK, [[5, 3, 3, 1, 384]]),  # no conv
    (_line("f32[384,5,3,3,380]") + "\n" + MASK, [[5, 3, 3, 1, 384]]),  # other channels
    (_line("f32[384,3,3,3,384]") + "\n" + MASK, [[5, 3, 3, 1, 384]]),  # another window
    (_line("f32[384,5,3,3,384]") + "\n" + MASK, [[384, 384]]),         # no conv kernel
    (_line("f32[384,5,3,3,384]") + "\n" + MASK, []),
    # a regular kernel gradient shaped like an expansion, with a 1-channel kernel [3,3,3,1,8]
    # beside it (a U-Net's first convolution): no mask, no expansion
    (_line("f32[8,3,3,3,8]"), [[3, 3, 3, 1, 8], [3, 3, 3, 8, 8]]),
], ids=["fusion", "channels", "window", "dense_kernel", "no_variables", "no_mask"])
def test_nothing_else_is_taken_for_an_expansion(text, kernels):
    assert expanded_depthwise_gradients(text, kernels) == []
    assert notes(text, kernels) == []


def test_the_note_names_the_count_and_the_largest_and_points_to_the_tpu_compiler():
    text = "\n".join([_line("f32[80,3,3,3,80]"), _line("f32[384,5,3,3,384]"),
                      _mask("s32[3,3,3,80,80]"), MASK])
    [note] = notes(text, [[3, 3, 3, 1, 80], [5, 3, 3, 1, 384]])
    assert note.startswith("XLA:CPU computes 2 depthwise kernel gradients as dense channels "
                           "x window x channels convolutions (largest f32[384,5,3,3,384], "
                           "25.3 MiB), whole on every core")
    assert "XLA's TPU compiler keeps them grouped" in note
    assert 'report(..., target="v5e")' in note
    [one] = notes(text, [[3, 3, 3, 1, 80]])
    assert one.startswith("XLA:CPU computes 1 depthwise kernel gradient as dense")


def _report(layer, shape, spec):
    emulator = spatial_tf.Emulator(2)
    with emulator.scope():
        keras.utils.set_random_seed(0)
        inputs = keras.Input(shape[1:])
        model = keras.Model(inputs, layer(inputs))

    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(spatial_tf.split(x, spec)) ** 2)
        return tape.gradient(loss, model.trainable_variables)

    x = np.random.default_rng(0).normal(size=shape).astype("float32")
    return emulator.report(step, args=(x,))


@pytest.mark.emulator
@pytest.mark.parametrize("layer,shape,spec,expansion", [
    (lambda: keras.layers.Conv3D(128, 3, padding="same", groups=128), (1, 4, 8, 8, 128),
     [1, 1, 2, 1, 1], "f32[128,3,3,3,128], 1.7 MiB"),
    (lambda: keras.layers.DepthwiseConv2D(3, padding="same"), (2, 8, 8, 64), [1, 2, 1, 1],
     "f32[64,3,3,64], 144.0 KiB"),
], ids=["conv3d_groups_equal_channels", "depthwise_conv2d"])
def test_a_depthwise_step_on_the_emulator_gets_the_note(layer, shape, spec, expansion):
    report = _report(layer(), shape, spec)
    [note] = report.notes
    assert f"1 depthwise kernel gradient as dense channels x window x channels convolutions " \
           f"(largest {expansion})" in note
    assert "\nnotes:\n  - XLA:CPU computes 1 depthwise" in str(report)
    assert report.to_dict()["notes"] == [note]


@pytest.mark.emulator
def test_an_ordinary_convolution_step_gets_no_note():
    report = _report(keras.layers.Conv3D(16, 3, padding="same"), (1, 4, 8, 8, 16),
                     [1, 1, 2, 1, 1])
    assert report.notes == []
    assert "notes:" not in str(report)


@pytest.mark.emulator
def test_a_first_convolution_on_one_channel_is_not_taken_for_a_depthwise_one():
    """A U-Net's first kernel [3, 3, 3, 1, 8] has a depthwise kernel's shape, and the next
    convolution's kernel gradient [8, 3, 3, 3, 8] an expansion's."""
    two = keras.Sequential([keras.layers.Conv3D(8, 3, padding="same"),
                            keras.layers.Conv3D(8, 3, padding="same")])
    report = _report(two, (1, 8, 8, 8, 1), [1, 2, 1, 1, 1])
    assert report.notes == [], report.notes
