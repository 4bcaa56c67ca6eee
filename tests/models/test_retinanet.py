"""The RetinaNet model: per-level output shapes, shared heads, float64, argument checks,
its options and the keyword arguments of earlier releases."""
import dataclasses

import keras
import numpy as np
import pytest

from spatial_tf.detection import AnchorConfig
from spatial_tf.models import RetinaNetOptions, UNetOptions, retinanet

SMALL = RetinaNetOptions(backbone_filters=(16, 16, 16, 16), fpn_filters=8)


@pytest.mark.parametrize("max_level,size,classes", [(5, (64, 96), 2), (6, (128, 64), 1), (7, (128, 128), 4)])
def test_outputs_per_level_fit_the_anchors(max_level, size, classes):
    model = retinanet(size + (3,), classes, options=dataclasses.replace(SMALL, max_level=max_level))
    outputs = model(np.zeros((2,) + size + (3,), np.float32))
    shapes = AnchorConfig(max_level=max_level).level_shapes(size)
    assert [tuple(t.shape) for t in outputs["class_logits"]] == [(2, h, w, 9 * classes) for h, w in shapes]
    assert [tuple(t.shape) for t in outputs["box_deltas"]] == [(2, h, w, 36) for h, w in shapes]


def test_heads_are_shared_across_levels_and_start_at_the_prior():
    model = retinanet((64, 64, 3), 3, options=dataclasses.replace(SMALL, head_convs=2))
    names = [layer.name for layer in model.layers]
    for kind in ("class", "box"):
        assert names.count(f"{kind}_output") == 1
        assert sum(n.startswith(f"{kind}_head_") for n in names) == 2
    outputs = model(np.random.default_rng(0).uniform(size=(1, 64, 64, 3)).astype(np.float32))
    probabilities = 1 / (1 + np.exp(-np.concatenate([np.ravel(t) for t in outputs["class_logits"]])))
    assert abs(float(np.mean(probabilities)) - 0.01) < 0.005
    assert any(isinstance(layer, keras.layers.BatchNormalization) for layer in model.layers)


def test_builds_in_float64():
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float64")
    try:
        model = retinanet((64, 64, 3), 2, options=SMALL)
        outputs = model(np.zeros((1, 64, 64, 3)))
    finally:
        keras.config.set_dtype_policy(previous)
    assert {str(t.dtype) for t in outputs["class_logits"] + outputs["box_deltas"]} == {"<dtype: 'float64'>"}


@pytest.mark.parametrize("kwargs,message", [
    ({"image_shape": (100, 64, 3)}, r"retinanet: image_shape=\(100, 64, 3\); expected .* multiples "
                                    r"of 32 \(2 \*\* max_level\)"),
    ({"image_shape": (64, 64, 3), "options": RetinaNetOptions(max_level=7)},
     r"multiples of 128 .* Fix: pad or resize"),
    ({"num_classes": 0}, r"retinanet: num_classes=0; expected a positive int"),
])
def test_refuses_bad_arguments(kwargs, message):
    arguments = {"image_shape": (64, 64, 3), "num_classes": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        retinanet(**arguments)


# -- RetinaNetOptions, and the keyword arguments of earlier releases ----------------------

def _conv(k, c_in, c_out, bias):
    return k * k * c_in * c_out + (c_out if bias else 0)


def _small_params(head_convs):
    """SMALL with 2 classes, 9 anchors, P3-P5, counted by hand."""
    stem = _conv(3, 3, 16, False) + 4 * 16
    # every stage's first block has stride 2, so a 1x1 shortcut; 3 convs, 3 batch norms
    block = _conv(1, 16, 16, False) + 2 * _conv(3, 16, 16, False) + 3 * 4 * 16
    pyramid = 3 * _conv(1, 16, 8, True) + 3 * _conv(3, 8, 8, True)
    heads = (2 * head_convs * _conv(3, 8, 8, True)
             + _conv(3, 8, 9 * 2, True) + _conv(3, 8, 9 * 4, True))
    return stem + 4 * block + pyramid + heads


def test_the_hand_counts_add_up():
    assert (_small_params(1), _small_params(2)) == (27_990, 29_158)


# (options, image size, parameters, layers); layers by hand: image, stem (conv, bn, ReLU),
# per stride-2 block 9 (shortcut conv + bn, two conv + bn, ReLU after the first, add,
# ReLU; 7 without the shortcut), the pyramid 10 (3 laterals, 2 upsamplings, 2 sums, 3
# smoothing convs; P6: + its conv, P7: + a ReLU and its conv), per head head_convs + 1
SMALL_LAYERS = 1 + 3 + 4 * 9 + 10 + 2 * 3
SETTINGS = [
    (SMALL, 64, _small_params(2), SMALL_LAYERS),
    (dataclasses.replace(SMALL, head_convs=1), 64, _small_params(1), SMALL_LAYERS - 2),
    # P6: stride-2 conv 16->8 on C5; P7: conv 8->8; the heads are shared
    (dataclasses.replace(SMALL, max_level=7), 128,
     _small_params(2) + _conv(3, 16, 8, True) + _conv(3, 8, 8, True), SMALL_LAYERS + 3),
    # a second C3 block: stride 1, 16 -> 16 filters, so no shortcut convolution
    (dataclasses.replace(SMALL, blocks=(1, 2, 1, 1)), 64,
     _small_params(2) + 2 * _conv(3, 16, 16, False) + 2 * 4 * 16, SMALL_LAYERS + 7),
    (dataclasses.replace(SMALL, num_anchors=3), 64,
     _small_params(2) - _conv(3, 8, 9 * 2, True) - _conv(3, 8, 9 * 4, True)
     + _conv(3, 8, 3 * 2, True) + _conv(3, 8, 3 * 4, True), SMALL_LAYERS),
    (dataclasses.replace(SMALL, prior_probability=0.1, batch_norm_momentum=0.9), 64,
     _small_params(2), SMALL_LAYERS),
]


@pytest.mark.parametrize("options, size, params, layers", SETTINGS)
def test_options_build_the_model_of_earlier_releases(options, size, params, layers):
    model = retinanet((size, size, 3), 2, options=options)
    assert (model.count_params(), len(model.layers)) == (params, layers)
    norms = {l.momentum for l in model.layers if isinstance(l, keras.layers.BatchNormalization)}
    assert norms == {options.batch_norm_momentum}
    bias = model.get_layer("class_output").bias.numpy()
    prior = 1 / (1 + np.exp(-bias))
    np.testing.assert_allclose(prior, options.prior_probability, rtol=1e-5)
    changed = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)
               if getattr(options, f.name) != getattr(RetinaNetOptions(), f.name)}
    with pytest.warns(DeprecationWarning, match=r"^retinanet\(\.\.\., .*\) is deprecated; pass "
                      r"options=RetinaNetOptions\(.*\)\.$"):
        old = retinanet((size, size, 3), 2, **changed)
    assert old.count_params() == params
    assert [l.get_config() for l in old.layers] == [l.get_config() for l in model.layers]


@pytest.mark.parametrize("keyword, value", [
    ("backbone_filters", (16, 16, 16, 32)), ("blocks", (1, 1, 2, 1)), ("fpn_filters", 16),
    ("head_convs", 0), ("num_anchors", 3), ("max_level", 6), ("prior_probability", 0.05),
    ("batch_norm_momentum", 0.9),
])
def test_each_keyword_of_earlier_releases_still_works_and_warns(keyword, value):
    with pytest.warns(DeprecationWarning) as caught:
        old = retinanet((64, 64, 3), 2, **{keyword: value})
    assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [
        f"retinanet(..., {keyword}={value!r}) is deprecated; pass "
        f"options=RetinaNetOptions({keyword}={value!r})."]
    assert caught[0].filename == __file__
    new = retinanet((64, 64, 3), 2, options=RetinaNetOptions(**{keyword: value}))
    assert old.count_params() == new.count_params()
    assert [l.get_config() for l in old.layers] == [l.get_config() for l in new.layers]


def test_an_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError, match=(
            r"^retinanet: 1 unexpected keyword argument fpn_channels; expected those of "
            r"RetinaNetOptions \(backbone_filters, batch_norm_momentum, blocks, fpn_filters, "
            r"head_convs, max_level, num_anchors, prior_probability\)\. Fix: "
            r"retinanet\(\.\.\., options=RetinaNetOptions\(\.\.\.\)\)\.$")):
        retinanet((64, 64, 3), 2, fpn_channels=8)
    with pytest.raises(TypeError, match=r"retinanet: options is UNetOptions\(.*\); expected a "
                       r"RetinaNetOptions or None"):
        retinanet((64, 64, 3), 2, options=UNetOptions())


@pytest.mark.parametrize("field, value, error, message", [
    ("max_level", 4, ValueError,
     r"^RetinaNetOptions: max_level is 4; expected 5, 6 or 7, the top pyramid level\. Fix: "
     r"e\.g\. RetinaNetOptions\(max_level=5\) \(6 or 7 add P6 and P7 for large images\)\.$"),
    ("max_level", 5.0, ValueError, r"RetinaNetOptions: max_level is 5\.0; expected 5, 6 or 7"),
    ("backbone_filters", (8, 16), ValueError,
     r"^RetinaNetOptions: backbone_filters is \(8, 16\); expected 4 positive ints, one per "
     r"backbone stage \(C2-C5\)\. Fix: e\.g\. "
     r"RetinaNetOptions\(backbone_filters=\(16, 32, 64, 128\)\)\.$"),
    ("blocks", (1, 0, 1, 1), ValueError,
     r"RetinaNetOptions: blocks is \(1, 0, 1, 1\); expected 4 positive ints.*"
     r"RetinaNetOptions\(blocks=\(1, 1, 1, 1\)\)"),
    ("blocks", 1, ValueError, r"RetinaNetOptions: blocks is 1; expected 4 positive ints"),
    ("fpn_filters", 0, ValueError,
     r"^RetinaNetOptions: fpn_filters is 0; expected a positive int\. Fix: e\.g\. "
     r"RetinaNetOptions\(fpn_filters=64\)\.$"),
    ("fpn_filters", 8.5, TypeError, r"RetinaNetOptions: fpn_filters is 8\.5 \(float\)"),
    ("head_convs", -1, ValueError,
     r"RetinaNetOptions: head_convs is -1; expected an int >= 0\. Fix: e\.g\. "
     r"RetinaNetOptions\(head_convs=2\)\."),
    ("num_anchors", 0, ValueError, r"RetinaNetOptions: num_anchors is 0; expected a positive"),
    ("prior_probability", 0, ValueError,
     r"^RetinaNetOptions: prior_probability is 0; expected a number in \(0, 1\), the class "
     r"outputs' initial foreground probability\. Fix: e\.g\. "
     r"RetinaNetOptions\(prior_probability=0\.01\)\.$"),
    ("prior_probability", 1.0, ValueError, r"prior_probability is 1\.0; expected"),
    ("batch_norm_momentum", 1.5, ValueError,
     r"^RetinaNetOptions: batch_norm_momentum is 1\.5; expected a number in \[0, 1\)\. Fix: "
     r"e\.g\. RetinaNetOptions\(batch_norm_momentum=0\.99\) \(Keras' default\), or 0\.9 for "
     r"short runs\.$"),
])
def test_a_bad_option_names_its_field(field, value, error, message):
    with pytest.raises(error, match=message):
        RetinaNetOptions(**{field: value})


def test_options_hold_tuples():
    options = RetinaNetOptions(backbone_filters=[16, 16, 32, 32], blocks=np.array([1, 1, 2, 1]))
    assert options.backbone_filters == (16, 16, 32, 32) and options.blocks == (1, 1, 2, 1)
    assert hash(options) == hash(RetinaNetOptions(backbone_filters=(16, 16, 32, 32),
                                                  blocks=(1, 1, 2, 1)))
