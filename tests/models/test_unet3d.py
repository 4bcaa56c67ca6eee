"""The reference U-Net: shapes, padding and downsampling variants, option checks, and
the keyword arguments of earlier releases."""
import warnings

import keras
import numpy as np
import pytest

from spatial_tf.models import ModelGardenUNetOptions, UNetOptions, output_size, unet, unet3d


@pytest.mark.parametrize(
    "input_shape, depth, options, out",
    [
        ((64, 64, 64, 1), 3, UNetOptions(), (64, 64, 64, 2)),
        ((24, 24, 24, 1), 2, UNetOptions(padding="valid"), (8, 8, 8, 2)),
        ((16, 32, 3), 3, UNetOptions(downsample="conv"), (16, 32, 2)),
        ((21, 21, 3), 2, UNetOptions(padding="valid", downsample="conv"), (4, 4, 2)),
        ((44, 44, 1), 3, UNetOptions(padding="valid"), (4, 4, 2)),
    ],
)
def test_output_shapes(input_shape, depth, options, out):
    model = unet(input_shape, depth=depth, options=options)
    assert model.output_shape == (None,) + out
    assert output_size(input_shape[0], depth, options.padding, options.downsample) == out[0]


@pytest.mark.parametrize("conv, kinds, absent", [
    ("keras", {"Conv3D", "Concatenate"}, "HaloConv3D"),
    ("halo", {"HaloConv3D"}, "Concatenate"),  # the concatenation is folded into up*_conv1
])
def test_structure_has_every_ingredient(conv, kinds, absent):
    model = unet3d((44, 44, 44, 1), depth=3, base_filters=2,
                   options=UNetOptions(padding="valid", conv=conv))
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
    sizes = dict(num_classes=2, depth=2, base_filters=2, dtype_policy="float64")
    halo = unet3d(shape, **sizes, options=UNetOptions(downsample="conv"))
    plain = unet3d(shape, **sizes, options=UNetOptions(downsample="conv", conv="keras"))
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
    model = unet3d((8, 8, 8, 1), depth=2, base_filters=2, options=UNetOptions(conv="keras"))
    names = [layer.name for layer in model.layers]
    assert names.index("up0_transpose") + 1 == names.index("up0_concat") == \
        names.index("up0_conv1") - 1


def test_forward_and_filters():
    model = unet3d((16, 16, 16, 1), num_classes=3, depth=3, base_filters=4,
                   options=UNetOptions(batch_norm=False))
    assert model.get_layer("bottom_conv1").filters == 16 and model.get_layer("up0_conv2").filters == 4
    y = model(np.ones((1, 16, 16, 16, 1), "float32"), training=True)
    assert y.shape == (1, 16, 16, 16, 3)
    assert not any(isinstance(layer, keras.layers.BatchNormalization) for layer in model.layers)


def test_norm_momentum_reaches_every_batch_norm():
    model = unet3d((8, 8, 8, 1), depth=2, base_filters=2,
                   options=UNetOptions(norm_momentum=0.9))
    momenta = [layer.momentum for layer in model.layers
               if isinstance(layer, keras.layers.BatchNormalization)]
    assert len(momenta) == 6 and set(momenta) == {0.9}
    default = unet3d((8, 8, 8, 1), depth=2, base_filters=2)
    assert {layer.momentum for layer in default.layers
            if isinstance(layer, keras.layers.BatchNormalization)} == {0.99}
    assert unet((8, 8, 1), depth=1, options=UNetOptions(norm_momentum=0)).get_layer(
        "bottom_bn1").momentum == 0


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: unet3d((64, 64, 1)), r"unet3d: input_shape is \(64, 64, 1\); expected 4 sizes"),
        (lambda: unet((8,)), "expected \\(height, width, channels\\)"),
        (lambda: unet((16, 16, 1), depth=0), "depth is 0; expected a positive int"),
        (lambda: unet((16, 16, 1), base_filters=2.5), "base_filters is 2.5"),
        (lambda: unet((16, 16, 1), num_classes=0), "unet: num_classes is 0; expected a positive int"),
        (lambda: unet((18, 16, 1), depth=3), r"spatial size 18 \(axis 0\) does not halve cleanly 2 times.*Fix: use a size such as 16 or 20"),
        (lambda: unet((20, 20, 1), depth=3, options=UNetOptions(padding="valid")),
         r"spatial size 20 \(axis 0\) does not halve cleanly 2 times with padding='valid', "
         r"downsample='pool'\. Fix: use a size such as \d+"),
    ],
)
def test_bad_sizes(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call()


# -- UNetOptions, and the keyword arguments of earlier releases ---------------------------

def _conv(k, ndim, c_in, c_out, bias):
    """Weights of a k^ndim convolution (or transposed convolution)."""
    return k**ndim * c_in * c_out + (c_out if bias else 0)


def _unet_params(ndim, batch_norm=True, downsample="pool"):
    """A depth-2 U-Net with 2 base filters, 1 input channel and 2 classes, counted by hand:
    down0 conv 1->2, 2->2; bottom 2->4, 4->4; up0 transpose 4->2, conv (2+2)->2, 2->2;
    1x1 logits 2->2 (with bias); batch norm: 4 weights per channel."""
    bias = not batch_norm
    bn = (lambda c: 4 * c) if batch_norm else (lambda c: 0)
    down = _conv(3, ndim, 1, 2, bias) + bn(2) + _conv(3, ndim, 2, 2, bias) + bn(2)
    if downsample == "conv":
        down += _conv(3, ndim, 2, 2, True)
    bottom = _conv(3, ndim, 2, 4, bias) + bn(4) + _conv(3, ndim, 4, 4, bias) + bn(4)
    up = (_conv(2, ndim, 4, 2, bias) + _conv(3, ndim, 4, 2, bias) + bn(2)
          + _conv(3, ndim, 2, 2, bias) + bn(2))
    return down + bottom + up + _conv(1, ndim, 2, 2, True)


# (input shape, options, parameters, layers): layers = image + 3 blocks of conv, batch
# norm, ReLU twice + downsampling + transposed conv + logits (22), + a Concatenate for
# conv="keras", + a Cropping layer for padding="valid", - 6 without batch norm
SETTINGS = [
    ((8, 8, 8, 1), UNetOptions(), 1268, 22),
    ((8, 8, 8, 1), UNetOptions(conv="keras"), 1268, 23),
    ((8, 8, 8, 1), UNetOptions(batch_norm=False), 1222, 16),
    ((8, 8, 8, 1), UNetOptions(downsample="conv"), 1378, 22),
    ((8, 8, 8, 1), UNetOptions(norm_momentum=0.9), 1268, 22),
    ((20, 20, 1), UNetOptions(padding="valid"), 480, 23),
]


def test_the_hand_counts_add_up():
    assert [_unet_params(3), _unet_params(3, batch_norm=False),
            _unet_params(3, downsample="conv"), _unet_params(2)] == [1268, 1222, 1378, 480]


@pytest.mark.parametrize("shape, options, params, layers", SETTINGS)
def test_options_build_the_model_of_earlier_releases(shape, options, params, layers):
    build = unet3d if len(shape) == 4 else unet
    model = build(shape, 2, 2, 2, options=options)
    assert (model.count_params(), len(model.layers)) == (params, layers)
    changed = {k: v for k, v in vars(options).items() if v != getattr(UNetOptions(), k)}
    if changed:
        with pytest.warns(DeprecationWarning, match=r"is deprecated; pass options=UNetOptions\("):
            old = build(shape, 2, 2, 2, **changed)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            old = build(shape, 2, 2, 2)
    assert [(l.name, type(l).__name__) for l in old.layers] == \
        [(l.name, type(l).__name__) for l in model.layers]
    assert old.count_params() == params
    momenta = {l.momentum for l in model.layers if isinstance(l, keras.layers.BatchNormalization)}
    assert momenta == (set() if not options.batch_norm else {options.norm_momentum})


@pytest.mark.parametrize("build", [unet, unet3d])
@pytest.mark.parametrize("keyword, value, shape", [
    ("batch_norm", False, (8, 8, 8, 1)),
    ("padding", "valid", (20, 20, 20, 1)),
    ("downsample", "conv", (8, 8, 8, 1)),
    ("conv", "keras", (8, 8, 8, 1)),
    ("norm_momentum", 0.9, (8, 8, 8, 1)),
])
def test_each_keyword_of_earlier_releases_still_works_and_warns(build, keyword, value, shape):
    name = build.__name__
    with pytest.warns(DeprecationWarning) as caught:
        old = build(shape, 2, 2, 2, **{keyword: value})
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert messages == [f"{name}(..., {keyword}={value!r}) is deprecated; pass "
                        f"options=UNetOptions({keyword}={value!r})."]
    assert caught[0].filename == __file__  # reported at the caller's line
    new = build(shape, 2, 2, 2, options=UNetOptions(**{keyword: value}))
    assert old.count_params() == new.count_params()
    assert [l.get_config() for l in old.layers] == [l.get_config() for l in new.layers]


def test_a_keyword_of_earlier_releases_joins_the_options_given():
    with pytest.warns(DeprecationWarning, match=r"unet\(\.\.\., batch_norm=False\)"):
        model = unet((8, 8, 1), 2, 2, 2, options=UNetOptions(conv="keras"), batch_norm=False)
    names = {type(l).__name__ for l in model.layers}
    assert "Concatenate" in names and "BatchNormalization" not in names


@pytest.mark.parametrize("call, name", [
    (lambda: unet((8, 8, 1), paddng="same"), "unet"),
    (lambda: unet3d((8, 8, 8, 1), depth=2, upsample="nearest"), "unet3d"),
])
def test_an_unknown_keyword_is_a_type_error(call, name):
    with pytest.raises(TypeError, match=(
            rf"^{name}: 1 unexpected keyword argument \w+; expected those of UNetOptions "
            rf"\(batch_norm, conv, downsample, masked_batch_norm, norm_momentum, padding\)\. "
            rf"Fix: "
            rf"{name}\(\.\.\., options=UNetOptions\(\.\.\.\)\)\.$")):
        call()


def test_options_of_another_builder_are_a_type_error():
    with pytest.raises(TypeError, match=r"unet: options is \{'padding': 'valid'\} \(dict\); "
                       r"expected a UNetOptions or None\. Fix: unet\(\.\.\., "
                       r"options=UNetOptions\(\.\.\.\)\)\."):
        unet((8, 8, 1), options={"padding": "valid"})
    with pytest.raises(TypeError, match=r"unet3d: options is ModelGardenUNetOptions\(.*\) "
                       r"\(ModelGardenUNetOptions\); expected a UNetOptions or None\. Fix: "
                       r"unet3d\(\.\.\., options=UNetOptions\(\.\.\.\)\); "
                       r"ModelGardenUNetOptions go with preset='model_garden'\."):
        unet3d((8, 8, 8, 1), options=ModelGardenUNetOptions())


@pytest.mark.parametrize("field, value, error, message", [
    ("padding", "causal", ValueError,
     r"UNetOptions: padding is 'causal'; expected 'same' \(output size = input size\) or "
     r"'valid' .* Fix: e\.g\. UNetOptions\(padding='same'\)\."),
    ("downsample", "stride", ValueError,
     r"UNetOptions: downsample is 'stride'; expected 'pool' \(2x max pooling\) or 'conv' "
     r"\(a stride-2 3x3 convolution\)\. Fix: e\.g\. UNetOptions\(downsample='pool'\)\."),
    ("conv", "Conv3D", ValueError,
     r"UNetOptions: conv is 'Conv3D'; expected 'halo' \(spatial_tf's HaloConv layers, the "
     r"default\) or 'keras'\. Fix: UNetOptions\(conv='keras'\) rebuilds"),
    ("norm_momentum", 1.0, ValueError,
     r"UNetOptions: norm_momentum is 1\.0; expected a number in \[0, 1\)\. Fix: e\.g\. "
     r"UNetOptions\(norm_momentum=0\.99\)"),
    ("norm_momentum", -0.1, ValueError, r"UNetOptions: norm_momentum is -0\.1; expected"),
    ("norm_momentum", "0.9", ValueError, r"UNetOptions: norm_momentum is '0\.9'; expected"),
    ("norm_momentum", True, ValueError, r"UNetOptions: norm_momentum is True; expected"),
    ("batch_norm", "yes", TypeError,
     r"UNetOptions: batch_norm is 'yes'; expected True or False\. Fix: "
     r"UNetOptions\(batch_norm=False\) leaves batch norm out"),
])
def test_a_bad_option_names_its_field(field, value, error, message):
    with pytest.raises(error, match=message):
        UNetOptions(**{field: value})
    # the keyword of earlier releases reaches the same check, after its warning
    with pytest.warns(DeprecationWarning), pytest.raises(error, match=message):
        unet((16, 16, 1), **{field: value})


def test_options_are_frozen():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        UNetOptions().padding = "valid"
