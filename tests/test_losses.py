"""spatial_tf.losses: equal to Keras / NumPy references, and partition-friendly.

References are written independently here: Keras' own losses where they exist, plain
NumPy (log-sum-exp, explicit loops over classes) for masks, class weights and Dice.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf import losses
from spatial_tf.emulator import Emulator

SHAPE = (2, 8, 8, 8)  # batch, depth, height, width
CLASSES = 3
SPEC = [1, 2, 2, 2, 1]


def _data(dtype, seed=0, shape=SHAPE, classes=CLASSES):
    rng = np.random.default_rng(seed)
    logits = (3 * rng.normal(size=shape + (classes,))).astype(dtype)
    labels = rng.integers(0, classes, size=shape).astype("int32")
    mask = (rng.random(shape) < 0.7).astype(dtype)
    return logits, labels, mask


def _np_log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def _np_softmax(x):
    return np.exp(_np_log_softmax(x))


def _np_ce(logits, labels, mask=None, weights=None):
    """Per-voxel cross-entropy by explicit indexing, then the masked weighted mean."""
    logp = _np_log_softmax(logits.astype("float64"))
    ce = -np.take_along_axis(logp, labels[..., None], -1)[..., 0]
    w = np.ones_like(ce) if weights is None else np.asarray(weights, "float64")[labels]
    m = np.ones_like(ce) if mask is None else mask.astype("float64")
    return (ce * w * m).sum() / m.sum()


def _np_dice_loss(probs, labels, mask=None, smooth=1e-5):
    m = np.ones(labels.shape) if mask is None else mask.astype("float64")
    dice = []
    for c in range(probs.shape[-1]):
        p = probs[..., c].astype("float64") * m
        t = (labels == c) * m
        dice.append((2 * (p * t).sum() + smooth) / (p.sum() + t.sum() + smooth))
    return 1 - np.mean(dice)


TOL = {"float32": 1e-5, "float64": 1e-12}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("from_logits", [True, False])
def test_sparse_equals_keras(dtype, from_logits):
    logits, labels, _ = _data(dtype)
    y_pred = logits if from_logits else _np_softmax(logits).astype(dtype)
    ours = losses.sparse_categorical_crossentropy(labels, y_pred, from_logits)
    theirs = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, y_pred, from_logits))
    assert ours.dtype == dtype
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=TOL[dtype])
    if from_logits:
        np.testing.assert_allclose(ours.numpy(), _np_ce(logits, labels), rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("from_logits", [True, False])
def test_categorical_equals_keras(dtype, from_logits):
    logits, labels, _ = _data(dtype, seed=1)
    one_hot = np.eye(CLASSES, dtype=dtype)[labels]
    y_pred = logits if from_logits else _np_softmax(logits).astype(dtype)
    ours = losses.categorical_crossentropy(one_hot, y_pred, from_logits)
    theirs = tf.reduce_mean(keras.losses.categorical_crossentropy(one_hot, y_pred, from_logits))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=TOL[dtype])


def test_probabilities_are_clipped_like_keras():
    probs = np.array([[1.0, 0.0], [0.0, 1.0]], "float32")
    ours = losses.sparse_categorical_crossentropy(np.array([1, 1]), probs)
    theirs = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(np.array([1, 1]), probs))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
    assert 7 < float(ours) < 9  # -log(1e-7) / 2, finite


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mask_and_class_weights_match_numpy(dtype):
    logits, labels, mask = _data(dtype, seed=2)
    weights = [0.2, 1.0, 3.5]
    for kwargs, expected in [
        (dict(mask=mask), _np_ce(logits, labels, mask)),
        (dict(class_weights=weights), _np_ce(logits, labels, None, weights)),
        (dict(mask=mask, class_weights=weights), _np_ce(logits, labels, mask, weights)),
        (dict(mask=mask[..., None]), _np_ce(logits, labels, mask)),  # trailing 1 accepted
    ]:
        got = losses.sparse_categorical_crossentropy(labels, logits, True, **kwargs)
        np.testing.assert_allclose(got.numpy(), expected, rtol=TOL[dtype], err_msg=str(kwargs))
        one_hot = np.eye(CLASSES, dtype=dtype)[labels]
        got = losses.categorical_crossentropy(one_hot, logits, True, **kwargs)
        np.testing.assert_allclose(got.numpy(), expected, rtol=TOL[dtype], err_msg=str(kwargs))


def test_masked_voxels_do_not_matter_and_empty_mask_gives_zero():
    logits, labels, mask = _data("float64", seed=3)
    changed = np.where(mask[..., None] > 0, logits, 1e3)  # garbage where padded
    a = losses.sparse_categorical_crossentropy(labels, logits, True, mask=mask)
    b = losses.sparse_categorical_crossentropy(labels, changed, True, mask=mask)
    assert float(a) == pytest.approx(float(b), rel=1e-12)
    zero = losses.sparse_categorical_crossentropy(labels, logits, True, mask=np.zeros(SHAPE))
    assert float(zero) == 0.0


def test_labels_with_trailing_axis_and_half_precision():
    logits, labels, _ = _data("float32", seed=4)
    a = losses.sparse_categorical_crossentropy(labels[..., None], logits, True)
    b = losses.sparse_categorical_crossentropy(labels, tf.cast(logits, tf.bfloat16), True)
    assert b.dtype == tf.float32
    np.testing.assert_allclose(a.numpy(), _np_ce(logits, labels), rtol=1e-5)
    np.testing.assert_allclose(b.numpy(), _np_ce(logits, labels), rtol=2e-2)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("sparse", [True, False])
def test_dice_loss_matches_numpy(dtype, sparse):
    logits, labels, mask = _data(dtype, seed=5)
    probs = _np_softmax(logits.astype("float64"))
    y_true = labels if sparse else np.eye(CLASSES, dtype=dtype)[labels]
    got = losses.dice_loss(y_true, logits, from_logits=True)
    np.testing.assert_allclose(got.numpy(), _np_dice_loss(probs, labels), rtol=TOL[dtype] * 10)
    got = losses.dice_loss(y_true, probs.astype(dtype), mask=mask, smooth=0.5)
    np.testing.assert_allclose(got.numpy(), _np_dice_loss(probs, labels, mask, 0.5), rtol=TOL[dtype] * 10)


def test_dice_loss_perfect_and_absent_class():
    labels = np.array([[0, 0, 1, 1]])
    perfect = np.eye(3, dtype="float32")[labels]  # class 2 absent from both
    assert float(losses.dice_loss(labels, perfect)) == pytest.approx(0.0, abs=1e-6)
    wrong = np.eye(3, dtype="float32")[1 - labels]
    assert float(losses.dice_loss(labels, wrong, smooth=0.0 + 1e-9)) == pytest.approx(2 / 3, abs=1e-6)


def test_gradients_match_keras():
    logits, labels, _ = _data("float64", seed=6)
    x = tf.constant(logits)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours = losses.sparse_categorical_crossentropy(labels, x, True)
        theirs = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, x, True))
    np.testing.assert_allclose(tape.gradient(ours, x), tape.gradient(theirs, x), rtol=1e-10, atol=1e-14)


# ------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("call, error, message", [
    (lambda: losses.sparse_categorical_crossentropy([[0, 3]], np.zeros((1, 2, 3), "float32")),
     ValueError, r"y_true holds class 3; expected classes in \[0, 3\).*num_classes=4"),
    (lambda: losses.sparse_categorical_crossentropy([[-1, 0]], np.zeros((1, 2, 3), "float32")),
     ValueError, r"y_true holds class -1"),
    (lambda: losses.sparse_categorical_crossentropy([[0.0, 1.5]], np.zeros((1, 2, 3), "float32")),
     TypeError, r"y_true has dtype float32 and values that are not whole numbers; expected "
                r"integer class indices.*categorical_crossentropy for one-hot or soft labels"),
    (lambda: losses.sparse_categorical_crossentropy([["a", "b"]], np.zeros((1, 2, 3), "float32")),
     TypeError, r"y_true has dtype string; expected integer class indices"),
    (lambda: losses.sparse_categorical_crossentropy([[0, 1, 1]], np.zeros((1, 2, 3), "float32")),
     ValueError, r"y_true has shape \(1, 3\); expected y_pred's shape without the class axis"),
    (lambda: losses.sparse_categorical_crossentropy([[0, 1]], np.zeros((1, 2, 3), "int32")),
     TypeError, r"y_pred has dtype int32; expected floating class scores"),
    (lambda: losses.sparse_categorical_crossentropy([[0, 1]], np.zeros((1, 2, 3), "float32"),
                                                    class_weights=[1.0, 2.0]),
     ValueError, r"class_weights has shape \(2,\); expected one weight per class, shape \(3,\)"),
    (lambda: losses.sparse_categorical_crossentropy([[0, 1]], np.zeros((1, 2, 3), "float32"),
                                                    mask=np.ones((1, 3))),
     ValueError, r"mask has shape \(1, 3\); expected y_pred's shape without the class axis"),
    (lambda: losses.sparse_categorical_crossentropy([[0, 1]], np.zeros((1, 2, 3), "float32"), "yes"),
     TypeError, r"from_logits is 'yes'; expected True or False"),
    (lambda: losses.categorical_crossentropy([[0, 1]], np.zeros((1, 2, 3), "float32")),
     ValueError, r"y_true has shape \(1, 2\) and y_pred \(1, 2, 3\); expected the same shape"),
    (lambda: losses.dice_loss([[0, 1]], np.zeros((1, 2, 3), "float32"), smooth=-1),
     ValueError, r"smooth is -1; expected a non-negative number"),
    (lambda: losses.dice_loss([[0, 1]], np.zeros((1, 2, 3), "float32"), 1),
     TypeError, r"dice_loss: from_logits is 1; expected True or False"),
    (lambda: losses.dice_loss(np.zeros((1, 2)), np.zeros((1, 2, 3), "float32")),
     ValueError, r"floating y_true has shape \(1, 2\).*one-hot labels of y_pred's shape"),
])
def test_bad_input(call, error, message):
    with pytest.raises(error, match=message):
        call()


# -------------------------------------------------------------------- partitioned


@pytest.fixture(scope="module")
def emulator():
    return Emulator(num_cores_per_replica=8)


def _loss_step(loss_name, spec=SPEC):
    def step(logits, labels, mask):
        logits, labels, mask = spatial_tf.split((logits, labels, mask), [spec, spec[:-1], spec[:-1]])
        with tf.GradientTape() as tape:
            tape.watch(logits)
            if loss_name == "tensorflow":
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
            elif loss_name == "sparse":
                loss = losses.sparse_categorical_crossentropy(labels, logits, True, mask=mask,
                                                              class_weights=[0.5, 1.0, 2.0])
            elif loss_name == "categorical":
                one_hot = tf.one_hot(labels, CLASSES, dtype=logits.dtype)
                loss = losses.categorical_crossentropy(one_hot, logits, True, mask=mask)
            else:
                loss = losses.dice_loss(labels, logits, True, mask=mask)
        return loss, tape.gradient(loss, logits)
    return step


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("loss_name", ["sparse", "categorical", "dice"])
def test_partitioned_equals_unpartitioned(emulator, loss_name, dtype):
    logits, labels, mask = _data(dtype, seed=7)
    comparison = emulator.compare(_loss_step(loss_name), args=(logits, labels, mask))
    assert comparison.ok, str(comparison)
    assert len(comparison.rows) == 2
    loss, _ = emulator.run(_loss_step(loss_name), args=(logits, labels, mask))
    if loss_name == "sparse":
        expected = _np_ce(logits, labels, mask, [0.5, 1.0, 2.0])
        np.testing.assert_allclose(np.asarray(loss), expected, rtol=TOL[dtype])


@pytest.mark.parametrize("spec", [SPEC, [1, 8, 1, 1, 1], [1, 4, 2, 1, 1], [2, 1, 2, 2, 1]])
def test_no_activation_sized_all_gather(emulator, spec):
    """TensorFlow's fused loss flattens the volume, so XLA gathers it; ours does not."""
    logits, labels, mask = _data("float32", seed=8)
    theirs = emulator.report(_loss_step("tensorflow", spec), args=(logits, labels, mask))
    assert theirs.by_kind().get("all-gather", {}).get("count", 0) >= 1
    assert any("SparseSoftmaxCrossEntropyWithLogits" in w for w in theirs.warnings)
    for name in ("sparse", "categorical", "dice"):
        report = emulator.report(_loss_step(name, spec), args=(logits, labels, mask))
        kinds = report.by_kind()
        assert "all-gather" not in kinds and "all-to-all" not in kinds, (name, kinds)
        assert report.warnings == []
        # what is left: all-reduces of scalars / per-class vectors (XLA may combine the
        # three per-class sums of Dice into one all-reduce: 3 x 3 x 4 bytes)
        assert kinds["all-reduce"]["largest"] <= 3 * CLASSES * 4, (name, kinds)


@pytest.mark.slow
def test_unet_train_step_keeps_the_split(emulator):
    """An 8^3 3D U-Net train step (depth 2, 4^3 per core, halos at both levels): TF's loss
    makes XLA gather activations, ours not (16^3 at depth 3 gives the same counts, and
    compiles longer: the compile time grows with the depth)."""
    from spatial_tf.models import unet3d

    keras.utils.set_random_seed(0)
    model = unet3d((8, 8, 8, 1), num_classes=CLASSES, depth=2, base_filters=4)
    optimizer = keras.optimizers.SGD(0.01)
    optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(9)
    image = rng.normal(size=(1, 8, 8, 8, 1)).astype("float32")
    labels = rng.integers(0, CLASSES, size=(1, 8, 8, 8)).astype("int32")
    mask = np.ones(labels.shape, "float32")

    def make(loss_fn):
        def train_step(image, labels, mask):
            image, labels, mask = spatial_tf.split((image, labels, mask), [SPEC, SPEC[:-1], SPEC[:-1]])
            with tf.GradientTape() as tape:
                loss = loss_fn(labels, model(image, training=True), mask)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        return train_step

    theirs = emulator.report(make(lambda y, p, m: tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(y, p))), args=(image, labels, mask))
    assert theirs.by_kind()["all-gather"]["count"] == 4
    ours = make(lambda y, p, m: losses.sparse_categorical_crossentropy(y, p, True, mask=m)
                + losses.dice_loss(y, p, True, mask=m))
    report = emulator.report(ours, args=(image, labels, mask))
    assert not {"all-gather", "all-to-all"} & set(report.by_kind()) and not report.warnings
    comparison = emulator.compare(ours, args=(image, labels, mask))
    assert comparison.ok, str(comparison)


def test_whole_number_float_labels_are_class_indices_as_keras_compile_passes_them():
    logits = tf.constant(np.random.default_rng(0).normal(size=(2, 4, 4, 3)), tf.float32)
    labels = np.random.default_rng(1).integers(0, 3, (2, 4, 4))
    want = losses.sparse_categorical_crossentropy(labels.astype("int32"), logits, True)
    got = losses.sparse_categorical_crossentropy(labels.astype("float32"), logits, True)
    traced = tf.function(losses.sparse_categorical_crossentropy)(
        tf.constant(labels, tf.float32), logits, True)
    assert float(got) == float(want) == float(traced)

    model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Conv2D(3, 1)])
    model.compile(optimizer="sgd", loss=lambda y, p: losses.sparse_categorical_crossentropy(
        y, p, from_logits=True))
    history = model.fit(np.ones((2, 4, 4, 1), "float32"), labels, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
