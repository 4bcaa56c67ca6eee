"""The detection train step: partitioned equals unpartitioned, no gathered activations,
it learns, and a model that does not fit the anchors is refused."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.detection import (AnchorConfig, iou_matrix, make_detection_predict_step,
                                  make_detection_train_step, postprocess)
from spatial_tf.models import RetinaNetOptions, retinanet
from spatial_tf.testing import assert_no_activation_gather

SPEC = [[1, 2, 2, 1], {"boxes": None, "classes": None}]
SMALL = RetinaNetOptions(backbone_filters=(16, 16, 16, 16), fpn_filters=8, head_convs=1)


def _batch(dtype=tf.float32):
    rng = np.random.default_rng(0)
    image = tf.constant(rng.uniform(size=(2, 64, 64, 3)), dtype)
    labels = {"boxes": tf.constant([[[4, 6, 30, 28], [30, 36, 60, 62], [0, 0, 0, 0]],
                                    [[10, 20, 50, 44], [0, 0, 0, 0], [0, 0, 0, 0]]], tf.float32),
              "classes": tf.constant([[0, 1, -1], [1, -1, -1]], tf.int32)}
    return image, labels


@pytest.fixture
def float64_policy():
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float64")
    yield
    keras.config.set_dtype_policy(previous)


@pytest.mark.slow  # about a minute: two float64 compiles
def test_partitioned_step_matches_unpartitioned_in_float64(float64_policy):
    keras.utils.set_random_seed(1)
    model = retinanet((64, 64, 3), 2, options=SMALL)
    optimizer = keras.optimizers.SGD(0.05)
    optimizer.build(model.trainable_variables)
    step = make_detection_train_step(model, optimizer, SPEC)
    comparison = spatial_tf.Emulator(num_cores_per_replica=4).compare(
        step, args=(_batch(tf.float64),))
    assert comparison.verdict.startswith("correct"), str(comparison)
    floats = [r for r in comparison.rows if r.dtype != "int64"]   # int64: the step counter
    assert {r.dtype for r in floats} == {"float64"}
    assert max(r.max_rel for r in floats) < 1e-9, str(comparison)
    # the three losses and every weight and batch-norm statistic the step writes
    assert len(floats) == 3 + len(model.variables), str(comparison)


@pytest.mark.slow  # about a minute each here
@pytest.mark.parametrize("spec", [[1, 2, 2, 1], [1, 4, 1, 1]])
def test_no_activation_sized_gather(spec):
    keras.utils.set_random_seed(2)
    model = retinanet((128, 128, 3), 2, options=SMALL)
    optimizer = keras.optimizers.SGD(0.05)
    optimizer.build(model.trainable_variables)
    image, labels = _batch()
    image = tf.image.resize(image, (128, 128))
    labels = {"boxes": labels["boxes"] * 2, "classes": labels["classes"]}
    step = make_detection_train_step(model, optimizer, [spec, {"boxes": None, "classes": None}])
    report = assert_no_activation_gather(spatial_tf.Emulator(num_cores_per_replica=4), step,
                                         args=((image, labels),))
    assert "collective-permute" in report.by_kind()       # the halo exchange is there
    assert report.partitioned["temp"] < report.unpartitioned["temp"]


def test_refuses_a_model_whose_levels_do_not_fit_the_anchors():
    model = retinanet((64, 64, 3), 2, options=SMALL)
    with pytest.raises(ValueError, match=r"has levels of \(h, w\) \[\(8, 8\), \(4, 4\), \(2, 2\)\]; "
                                         r"the anchors \(levels 3-6\) expect"):
        make_detection_train_step(model, keras.optimizers.SGD(0.1), anchors=AnchorConfig(max_level=6))
    with pytest.raises(ValueError, match="expected multiples of the anchors per position \\(3"):
        make_detection_train_step(model, keras.optimizers.SGD(0.1),
                                  anchors=AnchorConfig(scales=(1.0,)))
    plain = keras.Sequential([keras.Input((64, 64, 3)), keras.layers.Conv2D(2, 3)])
    with pytest.raises(ValueError, match=r"model 'sequential(_\d+)?' outputs \(None, 62, 62, 2\); expected a dict with 'class_logits'"):
        make_detection_train_step(plain, keras.optimizers.SGD(0.1))


def _squares(n, seed):
    """Bright squares (two sizes, class by size) on noise: images and padded labels."""
    rng = np.random.default_rng(seed)
    images = rng.uniform(0, 0.3, size=(n, 64, 64, 3)).astype(np.float32)
    boxes = np.zeros((n, 2, 4), np.float32)
    classes = -np.ones((n, 2), np.int32)
    for i in range(n):
        size = (28, 44)[i % 2]
        y, x = rng.integers(0, 64 - size, size=2)
        images[i, y:y + size, x:x + size] = 1.0
        boxes[i, 0] = [y, x, y + size, x + size]
        classes[i, 0] = i % 2
    return images, {"boxes": boxes, "classes": classes}


def _recall(detections, labels, threshold=0.5):
    found = total = 0
    for b in range(labels["boxes"].shape[0]):
        n = int(detections["num_detections"][b])
        truth = labels["boxes"][b][labels["classes"][b] >= 0]
        total += len(truth)
        if n:
            overlaps = iou_matrix(truth, detections["boxes"][b, :n]).numpy()
            found += int((overlaps.max(axis=1) >= threshold).sum())
    return found / total


@pytest.mark.slow  # 16 s on an idle 2-core machine, over a minute on a busy one
def test_training_raises_recall_above_chance():
    keras.utils.set_random_seed(6)
    model = retinanet((64, 64, 3), 2, options=RetinaNetOptions(
        backbone_filters=(16, 16, 16, 16), fpn_filters=16, batch_norm_momentum=0.8))
    optimizer = keras.optimizers.Adam(3e-3)
    anchors = AnchorConfig()
    train = tf.function(make_detection_train_step(model, optimizer))
    predict = tf.function(make_detection_predict_step(model))
    images, labels = _squares(8, seed=0)
    test_images, test_labels = _squares(8, seed=1)

    def recall():   # of each image's single best-scoring box (one square per image)
        detections = postprocess(predict(tf.constant(test_images)), anchors, (64, 64),
                                 max_detections=1, score_threshold=0.0)
        return _recall(detections, test_labels)

    chance = recall()      # the untrained model's best box
    losses = [float(train((tf.constant(images), labels))["loss"]) for _ in range(120)]
    after = recall()
    assert losses[-1] < 0.5 * losses[0]
    assert after >= 0.75 and after >= chance + 0.5, (chance, after, losses[::10])


def test_loss_options_of_earlier_releases_fold_into_the_config_with_a_warning():
    from spatial_tf.detection import DetectionLossConfig

    model = retinanet((64, 64, 3), num_classes=2, options=RetinaNetOptions(
        backbone_filters=(16, 16, 16, 16), fpn_filters=8))
    with pytest.warns(DeprecationWarning, match=r"make_detection_train_step\(\.\.\., "
                      r"box_weight=10\.0\) is deprecated; pass "
                      r"loss=DetectionLossConfig\(box_weight=10\.0\)"):
        make_detection_train_step(model, keras.optimizers.SGD(0.1), box_weight=10.0)
    with pytest.raises(TypeError, match=r"make_detection_train_step: 1 unexpected keyword "
                       r"argument box_wieght; expected those of DetectionLossConfig "
                       r"\(alpha, box_weight, gamma, huber_delta, negative_iou, positive_iou, "
                       r"variances\)"):
        make_detection_train_step(model, keras.optimizers.SGD(0.1), box_wieght=10.0)
    assert DetectionLossConfig().box_weight == 50.0
