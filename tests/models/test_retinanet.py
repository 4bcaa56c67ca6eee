"""The RetinaNet model: per-level output shapes, shared heads, float64, argument checks."""
import keras
import numpy as np
import pytest

from spatial_tf.detection import AnchorConfig
from spatial_tf.models import retinanet

SMALL = dict(backbone_filters=(16, 16, 16, 16), fpn_filters=8)


@pytest.mark.parametrize("max_level,size,classes", [(5, (64, 96), 2), (6, (128, 64), 1), (7, (128, 128), 4)])
def test_outputs_per_level_fit_the_anchors(max_level, size, classes):
    model = retinanet(size + (3,), classes, max_level=max_level, **SMALL)
    outputs = model(np.zeros((2,) + size + (3,), np.float32))
    shapes = AnchorConfig(max_level=max_level).level_shapes(size)
    assert [tuple(t.shape) for t in outputs["class_logits"]] == [(2, h, w, 9 * classes) for h, w in shapes]
    assert [tuple(t.shape) for t in outputs["box_deltas"]] == [(2, h, w, 36) for h, w in shapes]


def test_heads_are_shared_across_levels_and_start_at_the_prior():
    model = retinanet((64, 64, 3), 3, head_convs=2, **SMALL)
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
        model = retinanet((64, 64, 3), 2, **SMALL)
        outputs = model(np.zeros((1, 64, 64, 3)))
    finally:
        keras.config.set_dtype_policy(previous)
    assert {str(t.dtype) for t in outputs["class_logits"] + outputs["box_deltas"]} == {"<dtype: 'float64'>"}


@pytest.mark.parametrize("kwargs,message", [
    ({"image_shape": (100, 64, 3)}, r"retinanet: image_shape=\(100, 64, 3\); expected .* multiples "
                                    r"of 32 \(2 \*\* max_level\)"),
    ({"image_shape": (64, 64, 3), "max_level": 7}, r"multiples of 128 .* Fix: pad or resize"),
    ({"max_level": 4}, r"retinanet: max_level=4; expected 5, 6 or 7"),
    ({"num_classes": 0}, r"retinanet: num_classes=0; expected a positive int"),
    ({"backbone_filters": (8, 16)}, r"backbone_filters=\(8, 16\), blocks=\(1, 1, 1, 1\); expected 4"),
])
def test_refuses_bad_arguments(kwargs, message):
    arguments = {"image_shape": (64, 64, 3), "num_classes": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        retinanet(**arguments)
