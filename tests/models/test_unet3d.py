"""The reference U-Net: shapes, padding and downsampling variants, option checks."""
import keras
import numpy as np
import pytest

from spatial_tf.models import output_size, unet, unet3d


@pytest.mark.parametrize(
    "input_shape, options, out",
    [
        ((64, 64, 64, 1), dict(), (64, 64, 64, 2)),
        ((24, 24, 24, 1), dict(padding="valid", depth=2), (8, 8, 8, 2)),
        ((16, 32, 3), dict(downsample="conv"), (16, 32, 2)),
        ((21, 21, 3), dict(padding="valid", downsample="conv", depth=2), (4, 4, 2)),
        ((44, 44, 1), dict(padding="valid", depth=3), (4, 4, 2)),
    ],
)
def test_output_shapes(input_shape, options, out):
    model = unet(input_shape, **options)
    assert model.output_shape == (None,) + out
    assert output_size(input_shape[0], options.get("depth", 3), options.get("padding", "same"),
                       options.get("downsample", "pool")) == out[0]


@pytest.mark.parametrize("conv, kinds, absent", [
    ("keras", {"Conv3D", "Concatenate"}, "HaloConv3D"),
    ("halo", {"HaloConv3D"}, "Concatenate"),  # the concatenation is folded into up*_conv1
])
def test_structure_has_every_ingredient(conv, kinds, absent):
    model = unet3d((44, 44, 44, 1), depth=3, base_filters=2, padding="valid", conv=conv)
    found = {type(layer).__name__ for layer in model.layers}
    assert {"Conv3DTranspose", "MaxPooling3D", "BatchNormalization", "Cropping3D"} | kinds <= found
    assert absent not in found
    assert type(model.get_layer("logits")) is keras.layers.Conv3D
    convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv3D) and layer.name != "logits"]
    assert len(convs) == 10 and all(not layer.use_bias for layer in convs)  # batch norm follows each


def test_halo_and_keras_convolutions_give_the_same_model():
    """Same weights in the same order, same outputs and gradients (float64)."""
    import tensorflow as tf

    shape = (8, 8, 8, 1)  # stride-2 convolutions: TensorFlow's MaxPool3D has no float64
    options = dict(num_classes=2, depth=2, base_filters=2, dtype_policy="float64",
                   downsample="conv")
    halo, plain = unet3d(shape, **options), unet3d(shape, **options, conv="keras")
    assert [w.shape for w in halo.weights] == [w.shape for w in plain.weights]
    # down0 54 + 8 + 108 + 8 + stride-2 108 + 2, bottom 216 + 16 + 432 + 16,
    # up0 64 + 216 + 8 + 108 + 8, logits 6
    assert halo.count_params() == plain.count_params() == 1378
    plain.set_weights(halo.get_weights())
    x = tf.constant(np.random.default_rng(0).normal(size=(2,) + shape))
    results = []
    for model in (halo, plain):
        @tf.function(jit_compile=True)
        def loss_and_gradients(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(x, training=True) ** 2)
            return [loss] + tape.gradient(loss, model.trainable_variables)
        results.append(loss_and_gradients(x))
    assert len(results[0]) == 1 + 23  # 10 kernels, 2 biases, 6 x (gamma, beta)
    for a, b in zip(*results):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-10)


def test_conv_keras_keeps_the_layer_structure_of_older_checkpoints():
    model = unet3d((8, 8, 8, 1), depth=2, base_filters=2, conv="keras")
    names = [layer.name for layer in model.layers]
    assert names.index("up0_transpose") + 1 == names.index("up0_concat") == \
        names.index("up0_conv1") - 1


def test_forward_and_filters():
    model = unet3d((16, 16, 16, 1), num_classes=3, depth=3, base_filters=4, batch_norm=False)
    assert model.get_layer("bottom_conv1").filters == 16 and model.get_layer("up0_conv2").filters == 4
    y = model(np.ones((1, 16, 16, 16, 1), "float32"), training=True)
    assert y.shape == (1, 16, 16, 16, 3)
    assert not any(isinstance(layer, keras.layers.BatchNormalization) for layer in model.layers)


def test_norm_momentum_reaches_every_batch_norm():
    model = unet3d((8, 8, 8, 1), depth=2, base_filters=2, norm_momentum=0.9)
    momenta = [layer.momentum for layer in model.layers
               if isinstance(layer, keras.layers.BatchNormalization)]
    assert len(momenta) == 6 and set(momenta) == {0.9}
    default = unet3d((8, 8, 8, 1), depth=2, base_filters=2)
    assert {layer.momentum for layer in default.layers
            if isinstance(layer, keras.layers.BatchNormalization)} == {0.99}
    assert unet((8, 8, 1), depth=1, norm_momentum=0).get_layer("bottom_bn1").momentum == 0


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: unet3d((64, 64, 1)), r"unet3d: input_shape is \(64, 64, 1\); expected 4 sizes"),
        (lambda: unet((8,)), "expected \\(height, width, channels\\)"),
        (lambda: unet((16, 16, 1), depth=0), "depth is 0; expected a positive int"),
        (lambda: unet((16, 16, 1), base_filters=2.5), "base_filters is 2.5"),
        (lambda: unet((16, 16, 1), padding="causal"), "padding is 'causal'; expected 'same' or 'valid'"),
        (lambda: unet((16, 16, 1), downsample="stride"), "downsample is 'stride'"),
        (lambda: unet((16, 16, 1), conv="Conv3D"), "unet: conv is 'Conv3D'; expected 'halo'.*or 'keras'"),
        (lambda: unet((18, 16, 1), depth=3), r"spatial size 18 \(axis 0\) does not halve cleanly 2 time\(s\).*Fix: use a size such as 16 or 20"),
        (lambda: unet((20, 20, 1), depth=3, padding="valid"), r"spatial size 20.*such as \d+"),
        (lambda: unet((16, 16, 1), norm_momentum=1.0), r"norm_momentum is 1.0; expected a number in \[0, 1\)"),
        (lambda: unet((16, 16, 1), norm_momentum=-0.1), "norm_momentum is -0.1"),
        (lambda: unet((16, 16, 1), norm_momentum="0.9"), "norm_momentum is '0.9'"),
        (lambda: unet((16, 16, 1), norm_momentum=True), "norm_momentum is True"),
    ],
)
def test_bad_options(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call()
