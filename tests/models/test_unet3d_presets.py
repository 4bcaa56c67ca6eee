"""Model Garden's volumetric 3D U-Net by name: its published architecture, counted by hand;
its options and the keyword arguments of earlier releases."""
import keras
import numpy as np
import pytest

from spatial_tf.models import (ModelGardenUNetOptions, UNetOptions, model_garden_unet3d, unet3d,
                               unet3d_presets)


def conv(k, c_in, c_out, bias=True):
    """Weights of a k x k x k convolution (or transposed convolution)."""
    return k**3 * c_in * c_out + (c_out if bias else 0)


def bn(c):
    """gamma, beta, moving mean, moving variance."""
    return 4 * c


def test_parameter_count_of_the_published_architecture():
    # official/projects/volumetric_models, defaults: model_id 4, base_filters 32, batch
    # norm, deconvolution; encoder level l: conv 3x3x3 to 32*2^l then to 2*32*2^l (Conv3D
    # with bias, BN, ReLU each), max pooling between levels; decoder level l: transposed
    # conv 2x2x2 keeping its input's 2*32*2^(l+1) channels, concat with the skip
    # (2*32*2^l), two 3x3x3 convs to 2*32*2^l; head: 1x1x1 conv to the classes.
    encoder = (conv(3, 1, 32) + bn(32) + conv(3, 32, 64) + bn(64)            # level 0
               + conv(3, 64, 64) + bn(64) + conv(3, 64, 128) + bn(128)       # level 1
               + conv(3, 128, 128) + bn(128) + conv(3, 128, 256) + bn(256)   # level 2
               + conv(3, 256, 256) + bn(256) + conv(3, 256, 512) + bn(512))  # level 3
    decoder = (conv(2, 512, 512) + conv(3, 512 + 256, 256) + bn(256) + conv(3, 256, 256) + bn(256)
               + conv(2, 256, 256) + conv(3, 256 + 128, 128) + bn(128) + conv(3, 128, 128) + bn(128)
               + conv(2, 128, 128) + conv(3, 128 + 64, 64) + bn(64) + conv(3, 64, 64) + bn(64))
    head = conv(1, 64, 3)
    assert encoder + decoder + head == 19_078_467  # the sums above, evaluated by hand
    model = unet3d((16, 16, 16, 1), num_classes=3, preset="model_garden")
    assert model.count_params() == 19_078_467
    non_trainable = 2 * (32 + 64 + 64 + 128 + 128 + 256 + 256 + 512 + 256 * 2 + 128 * 2 + 64 * 2)
    assert sum(int(np.prod(w.shape)) for w in model.non_trainable_weights) == non_trainable
    assert model.output_shape == (None, 16, 16, 16, 3)


def test_a_smaller_variant_counted_by_hand():
    # model_id 2, base_filters 4, two input channels, 2 classes, upsampling (no weights)
    expected = (conv(3, 2, 4) + bn(4) + conv(3, 4, 8) + bn(8)
                + conv(3, 8, 8) + bn(8) + conv(3, 8, 16) + bn(16)
                + conv(3, 16 + 8, 8) + bn(8) + conv(3, 8, 8) + bn(8)
                + conv(1, 8, 2))
    model = unet3d((8, 8, 8, 2), 2, depth=2, base_filters=4, preset="model_garden",
                   options=ModelGardenUNetOptions(upsample="nearest"))
    assert model.count_params() == expected == 13_454
    assert model.get_layer("up0_upsample").size == (2, 2, 2)


def test_the_published_layer_settings():
    model = model_garden_unet3d((8, 8, 8, 1), 3, depth=2, base_filters=4)
    norms = [l for l in model.layers if isinstance(l, keras.layers.BatchNormalization)]
    assert len(norms) == 6
    assert {(l.momentum, l.epsilon, l.synchronized) for l in norms} == {(0.99, 1e-3, True)}
    convs = [l for l in model.layers if isinstance(l, keras.layers.Conv3D)]
    assert all(l.use_bias for l in convs)
    assert [l.padding for l in convs] == ["same"] * 6 + ["valid"]  # the head's 1x1x1: valid
    assert [l.filters for l in convs] == [4, 8, 8, 16, 8, 8, 3]
    transpose = model.get_layer("up0_transpose")
    assert (transpose.filters, transpose.kernel_size, transpose.strides) == (16, (2, 2, 2), (2, 2, 2))
    logits = model.get_layer("logits")
    assert isinstance(logits.kernel_initializer, keras.initializers.RandomNormal)
    assert logits.kernel_initializer.stddev == 0.01 and logits.kernel_size == (1, 1, 1)
    assert isinstance(model.get_layer("bottom_relu2"), keras.layers.ReLU)


def test_the_command_line_knows_the_same_presets():
    from spatial_tf.commands.options import UNET_PRESETS

    assert {name: (p["depth"], p["base_filters"]) for name, p in unet3d_presets.PRESETS.items()} \
        == {name: v for name, v in UNET_PRESETS.items() if name}


def test_the_preset_table_and_overrides():
    assert unet3d_presets.PRESETS == {"model_garden": {"depth": 4, "base_filters": 32}}
    model = unet3d((8, 8, 8, 1), preset="model_garden", depth=2, base_filters=2,
                   options=ModelGardenUNetOptions(batch_norm=False), dtype_policy="mixed_bfloat16")
    assert not any(isinstance(l, keras.layers.BatchNormalization) for l in model.layers)
    assert model.get_layer("down0_conv2").filters == 4
    assert model.get_layer("down0_conv1").compute_dtype == "bfloat16"
    assert model.get_layer("logits").compute_dtype == "float32"
    y = model(np.ones((1, 8, 8, 8, 1), "float32"), training=True)
    assert y.shape == (1, 8, 8, 8, 2) and y.dtype == "float32"


def test_the_default_unet_is_unchanged_without_a_preset():
    model = unet3d((16, 16, 16, 1))
    assert model.get_layer("bottom_conv1").filters == 32  # depth 3, 8 base filters
    assert model.get_layer("down0_conv2").filters == 8


@pytest.mark.parametrize("call, error, match", [
    (lambda: unet3d((8, 8, 8, 1), preset="garden"), ValueError,
     r"unet3d: preset is 'garden'; expected one of 'model_garden' or None\. Fix: e\.g\. "
     r"preset='model_garden'\."),
    (lambda: unet3d((8, 8, 8, 1), preset="model_garden", padding="valid"), TypeError,
     r"unet3d: padding is not an option of preset 'model_garden'; expected only the fields of "
     r"ModelGardenUNetOptions \(batch_norm, norm_momentum, norm_epsilon, sync_batch_norm, "
     r"upsample\)\. Fix: leave it out \(the preset fixes it\) or use preset=None\."),
    (lambda: unet3d((8, 8, 8, 1), preset="model_garden", options=UNetOptions()), TypeError,
     r"unet3d: options is UNetOptions\(.*\) \(UNetOptions\); expected a ModelGardenUNetOptions "
     r"or None\. Fix: unet3d\(\.\.\., preset='model_garden', "
     r"options=ModelGardenUNetOptions\(\.\.\.\)\); UNetOptions go with preset=None\."),
    (lambda: model_garden_unet3d((8, 8, 8, 1), 2, options=UNetOptions()), TypeError,
     r"model_garden_unet3d: options is UNetOptions\(.*\); expected a ModelGardenUNetOptions"),
    (lambda: unet3d((12, 16, 16, 1), preset="model_garden"), ValueError,
     r"model_garden_unet3d: spatial size 12 \(axis 0\) does not halve cleanly 3 times\. "
     r"Fix: use a size such as 8 or 16\."),
    (lambda: model_garden_unet3d((8, 8, 1), 2), ValueError,
     r"model_garden_unet3d: input_shape is \(8, 8, 1\); expected 4 sizes"),
    (lambda: model_garden_unet3d((8, 8, 8, 1), 2, depth=2,
                                 options=ModelGardenUNetOptions(upsample="linear")), ValueError,
     r"ModelGardenUNetOptions: upsample is 'linear'; expected 'transpose' \(a transposed "
     r"convolution, Model Garden's default\) or 'nearest' \(UpSampling3D\)\. Fix: e\.g\. "
     r"ModelGardenUNetOptions\(upsample='transpose'\)\."),
    (lambda: model_garden_unet3d((8, 8, 8, 1), 0, depth=2), (TypeError, ValueError),
     r"num_classes is 0"),
])
def test_bad_preset_options(call, error, match):
    with pytest.raises(error, match=match):
        call()


# -- ModelGardenUNetOptions, and the keyword arguments of earlier releases ----------------

def _small(c_in, bias_bn):
    """model_id 2, base_filters 4, c_in input channels, 2 classes, transposed conv 16->16;
    ``bias_bn(c)``: the batch norm weights after a conv with c filters."""
    return (conv(3, c_in, 4) + bias_bn(4) + conv(3, 4, 8) + bias_bn(8)
            + conv(3, 8, 8) + bias_bn(8) + conv(3, 8, 16) + bias_bn(16)
            + conv(2, 16, 16) + conv(3, 16 + 8, 8) + bias_bn(8) + conv(3, 8, 8) + bias_bn(8)
            + conv(1, 8, 2))


# (options, parameters, layers); the layers counted by hand: 3 blocks (down0, bottom, up0)
# of (conv, batch norm, ReLU) x 2 = 18, a pool, an upsampling layer, a concat, the logits,
# the image: 23 (17 without batch norm)
SETTINGS = [
    (ModelGardenUNetOptions(), _small(1, bn), 23),
    (ModelGardenUNetOptions(upsample="nearest"), _small(1, bn) - conv(2, 16, 16), 23),
    (ModelGardenUNetOptions(batch_norm=False), _small(1, lambda c: 0), 17),
    (ModelGardenUNetOptions(norm_momentum=0.9, norm_epsilon=1e-5, sync_batch_norm=False),
     _small(1, bn), 23),
]


def test_the_hand_counts_add_up():
    assert [s[1] for s in SETTINGS] == [15_410, 13_346, 15_202, 15_410]


@pytest.mark.parametrize("options, params, layers", SETTINGS)
def test_options_build_the_model_of_earlier_releases(options, params, layers):
    for model in (model_garden_unet3d((8, 8, 8, 1), 2, depth=2, base_filters=4, options=options),
                  unet3d((8, 8, 8, 1), 2, 2, 4, preset="model_garden", options=options)):
        assert (model.count_params(), len(model.layers)) == (params, layers)
        norms = [l for l in model.layers if isinstance(l, keras.layers.BatchNormalization)]
        assert {(l.momentum, l.epsilon, l.synchronized) for l in norms} == (
            {(options.norm_momentum, options.norm_epsilon, options.sync_batch_norm)}
            if options.batch_norm else set())


@pytest.mark.parametrize("name", ["model_garden_unet3d", "unet3d"])
@pytest.mark.parametrize("keyword, value", [
    ("batch_norm", False), ("norm_momentum", 0.9), ("norm_epsilon", 1e-5),
    ("sync_batch_norm", False), ("upsample", "nearest"),
])
def test_each_keyword_of_earlier_releases_still_works_and_warns(name, keyword, value):
    def build(**kwargs):
        if name == "unet3d":
            return unet3d((8, 8, 8, 1), 2, 2, 4, preset="model_garden", **kwargs)
        return model_garden_unet3d((8, 8, 8, 1), 2, depth=2, base_filters=4, **kwargs)

    with pytest.warns(DeprecationWarning) as caught:
        old = build(**{keyword: value})
    assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [
        f"{name}(..., {keyword}={value!r}) is deprecated; pass "
        f"options=ModelGardenUNetOptions({keyword}={value!r})."]
    new = build(options=ModelGardenUNetOptions(**{keyword: value}))
    assert old.count_params() == new.count_params()
    assert [l.get_config() for l in old.layers] == [l.get_config() for l in new.layers]


@pytest.mark.parametrize("call, name", [
    (lambda: model_garden_unet3d((8, 8, 8, 1), 2, upsampling="nearest"), "model_garden_unet3d"),
    (lambda: unet3d((8, 8, 8, 1), preset="model_garden", upsampling="nearest"), "unet3d"),
])
def test_an_unknown_keyword_is_a_type_error(call, name):
    with pytest.raises(TypeError, match=(
            rf"^{name}: 1 unexpected keyword argument upsampling; expected those of "
            rf"ModelGardenUNetOptions \(batch_norm, norm_epsilon, norm_momentum, "
            rf"sync_batch_norm, upsample\)\. Fix: {name}\(\.\.\., "
            rf"options=ModelGardenUNetOptions\(\.\.\.\)\)\.$")):
        call()


@pytest.mark.parametrize("field, value, error, message", [
    ("upsample", "bilinear", ValueError,
     r"ModelGardenUNetOptions: upsample is 'bilinear'; expected 'transpose'"),
    ("norm_momentum", 1, ValueError,
     r"ModelGardenUNetOptions: norm_momentum is 1; expected a number in \[0, 1\)\. Fix: e\.g\. "
     r"ModelGardenUNetOptions\(norm_momentum=0\.99\), Model Garden's default\."),
    ("norm_epsilon", 0.0, ValueError,
     r"ModelGardenUNetOptions: norm_epsilon is 0\.0; expected a number > 0\. Fix: e\.g\. "
     r"ModelGardenUNetOptions\(norm_epsilon=1e-3\), Model Garden's default\."),
    ("norm_epsilon", "1e-3", ValueError, r"ModelGardenUNetOptions: norm_epsilon is '1e-3'"),
    ("batch_norm", None, TypeError,
     r"ModelGardenUNetOptions: batch_norm is None; expected True or False\. Fix: "
     r"ModelGardenUNetOptions\(batch_norm=True\), Model Garden's default, or False\."),
    ("sync_batch_norm", 1, TypeError,
     r"ModelGardenUNetOptions: sync_batch_norm is 1; expected True or False"),
])
def test_a_bad_option_names_its_field(field, value, error, message):
    with pytest.raises(error, match=message):
        ModelGardenUNetOptions(**{field: value})
