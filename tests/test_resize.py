"""spatial_tf.resize: tf.image.resize's values (bilinear, nearest, area; by integer factors
2, 3 and 4, both ways, odd and even sizes, images and volumes, float32 and float64), its
gradients, and no gather of the image when the resized axes are split.

TensorFlow's ResizeBilinear and ResizeArea compute in float32 whatever the input's dtype,
so float64 is checked against the textbook formulas in NumPy float64 (``_axis_matrix``),
which ``test_the_numpy_reference_is_tf_image_resize`` checks against TensorFlow first."""
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator import Emulator
from spatial_tf.resize import double, downsample, factor_hint, halve, resize, upsample

METHODS = ("bilinear", "nearest", "area")


def _image(shape, seed=0, dtype=tf.float64):
    return tf.constant(np.random.default_rng(seed).normal(size=shape), dtype)


def _axis_matrix(n, m, method):
    """The (m, n) matrix resampling an axis of size n to m, half-pixel centres, in NumPy
    float64, from each method's definition (not from spatial_tf's code):
    bilinear: source (o + 0.5) n / m - 0.5 clamped to [0, n - 1], the two nearest inputs
    weighted by distance; nearest: input floor((o + 0.5) n / m); area: each input weighted
    by the length of [i, i + 1) inside [o n / m, (o + 1) n / m), over n / m."""
    o = np.arange(m)
    matrix = np.zeros((m, n))
    if method == "bilinear":
        source = np.clip((o + 0.5) * n / m - 0.5, 0, n - 1)
        low = np.floor(source).astype(int)
        high = np.minimum(low + 1, n - 1)
        np.add.at(matrix, (o, low), 1 - (source - low))
        np.add.at(matrix, (o, high), source - low)
    elif method == "nearest":
        matrix[o, np.minimum(np.floor((o + 0.5) * n / m).astype(int), n - 1)] = 1
    else:
        lo, hi = o[:, None] * n / m, (o[:, None] + 1) * n / m
        i = np.arange(n)[None, :]
        matrix = np.clip(np.minimum(hi, i + 1) - np.maximum(lo, i), 0, None) / (n / m)
    return matrix


def _reference(x, size, method, transpose=False):
    """``x`` resized to ``size`` (every spatial axis) by ``_axis_matrix``; with
    ``transpose``, ``x`` is an output gradient and this the input gradient."""
    x = np.asarray(x, np.float64)
    axes = range(1, x.ndim - 1)
    for axis in reversed(axes) if transpose else axes:
        n, m = (size[axis - 1], x.shape[axis]) if transpose else (x.shape[axis], size[axis - 1])
        matrix = _axis_matrix(n, m, method)
        moved = np.tensordot(matrix.T if transpose else matrix, np.moveaxis(x, axis, 0), 1)
        x = np.moveaxis(moved, 0, axis)
    return x


def _tf_resize(x, size, method):
    """TensorFlow's own resize: ``tf.image.resize`` for an image; for a volume, the height
    and width of each depth slice, then the depth (a resize to the same size leaves an
    axis as it is)."""
    if len(size) == 2:
        return tf.image.resize(x, size, method)
    b, d, h, w, c = x.shape
    planes = tf.image.resize(tf.reshape(x, [b * d, h, w, c]), size[1:], method)
    y = tf.image.resize(tf.reshape(planes, [b, d, size[1] * size[2], c]),
                        (size[0], size[1] * size[2]), method)
    return tf.reshape(y, [b, *size, c])


def _cases():
    """(input shape, output sizes): each factor 2, 3, 4 down and up, odd and even input
    and output sizes, a size-1 axis, images and volumes."""
    cases = []
    for k in (2, 3, 4):
        cases += [((2, 3 * k, 2 * k, 3), (3, 2)), ((1, 2 * k, k, 2 * k, 2), (2, 1, 2)),
                  ((2, 3, 2, 3), (3 * k, 2 * k)), ((1, 2, 1, 3, 2), (2 * k, k, 3 * k)),
                  ((1, 5 * k, 4, 2), (5, 4 * k))]
    return cases


CASES = [pytest.param(shape, size, method, id=f"{method}-{shape}->{size}")
         for shape, size in _cases() for method in METHODS]


@pytest.mark.parametrize("shape, size, method", CASES)
def test_the_numpy_reference_is_tf_image_resize(shape, size, method):
    x = _image(shape, dtype=tf.float32)
    np.testing.assert_allclose(_reference(x, size, method), _tf_resize(x, size, method),
                               rtol=0, atol=3e-6)


@pytest.mark.parametrize("shape, size, method", CASES)
def test_float32_equals_tf_image_resize(shape, size, method):
    x = _image(shape, dtype=tf.float32)
    y = resize(x, size, method)
    assert y.dtype == tf.float32 and y.shape == _tf_resize(x, size, method).shape
    np.testing.assert_allclose(y, _tf_resize(x, size, method), rtol=0, atol=3e-6)


@pytest.mark.parametrize("shape, size, method", CASES)
def test_float64_values_and_gradients_equal_the_formula(shape, size, method):
    x = _image(shape)
    weights = _image((shape[0], *size, shape[-1]), seed=1)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = resize(x, size, method)
        loss = tf.reduce_sum(y * weights)
    assert y.dtype == tf.float64
    np.testing.assert_allclose(y, _reference(x, size, method), rtol=0, atol=1e-12)
    np.testing.assert_allclose(tape.gradient(loss, x),
                               _reference(weights, shape[1:-1], method, transpose=True),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("method", ["bilinear", "nearest"])  # TF has no gradient for area
@pytest.mark.parametrize("shape, size", [((2, 9, 6, 2), (3, 2)), ((2, 3, 2, 2), (12, 8)),
                                         ((1, 8, 3, 1), (2, 9))])
def test_float32_gradients_equal_tensorflows(shape, size, method):
    x = _image(shape, dtype=tf.float32)
    weights = _image((shape[0], *size, shape[-1]), seed=1, dtype=tf.float32)

    def gradient(fn):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(fn(x) * weights)
        return tape.gradient(loss, x)

    np.testing.assert_allclose(gradient(lambda x: resize(x, size, method)),
                               gradient(lambda x: tf.image.resize(x, size, method)),
                               rtol=0, atol=1e-5)


def test_nearest_down_takes_the_element_k_over_2_of_each_block_and_keeps_integers():
    x = tf.reshape(tf.range(24), [1, 24, 1, 1])
    for k in (2, 3, 4):
        y = downsample(x, (k, 1), "nearest")
        assert y.dtype == tf.int32
        assert y[0, :, 0, 0].numpy().tolist() == list(range(k // 2, 24, k))
        np.testing.assert_array_equal(y, tf.image.resize(x, (24 // k, 1), "nearest"))


def test_factors_per_axis_and_chosen_axes():
    x = _image((1, 6, 4, 2))
    np.testing.assert_allclose(upsample(x, (1, 3)), _reference(x, (6, 12), "bilinear"),
                               atol=1e-12)
    np.testing.assert_allclose(downsample(x, 2, "area", axes=[1]),
                               _reference(x, (3, 4), "area"), atol=1e-12)
    assert upsample(x, 2, "nearest", axes=[2]).shape == (1, 6, 8, 2)


@pytest.mark.parametrize("shape", [(1, 2, 2, 1), (2, 4, 6, 3), (1, 16, 10, 2), (3, 8, 2, 5),
                                   (2, 4, 6, 8, 3), (1, 2, 4, 2, 2, 1)])
def test_halve_and_double_equal_the_bilinear_formula(shape):
    x = _image(shape)
    spatial = shape[1:-1]
    np.testing.assert_allclose(halve(x), _reference(x, [n // 2 for n in spatial], "bilinear"),
                               rtol=0, atol=1e-12)
    np.testing.assert_allclose(double(x), _reference(x, [2 * n for n in spatial], "bilinear"),
                               rtol=0, atol=1e-12)
    assert halve(x).dtype == double(x).dtype == tf.float64


def test_halve_and_double_equal_keras_resizing():
    import keras

    x = _image((1, 16, 10, 2), dtype=tf.float32)
    np.testing.assert_allclose(double(x), keras.layers.Resizing(32, 20)(x), atol=1e-6)
    np.testing.assert_allclose(halve(x), keras.layers.Resizing(8, 5)(x), atol=1e-6)
    np.testing.assert_allclose(double(x, axes=[2]), tf.image.resize(x, (16, 20)), atol=1e-6)


def test_factor_hint_names_the_nearest_integer_factors():
    assert factor_hint(224, 112) == factor_hint(7, 21) == factor_hint(5, 5) == ""
    assert factor_hint(224, 100) == ("224 -> 100 is not an integer factor: resize to 112 "
                                     "(1/2) or 56 (1/4)")
    assert factor_hint(10, 25) == "10 -> 25 is not an integer factor: resize to 20 (x2) or 30 (x3)"
    assert factor_hint(7, 3) == "7 -> 3 is not an integer factor: resize to 1 (1/7) or 7 (as it is)"


def _escaped(message):
    return "".join("\\" + c if c in "[]()*." else c for c in message)


@pytest.mark.parametrize("call, message", [
    (lambda: halve(tf.zeros([1, 5, 4, 1])), "halve: axis 1 of shape [1, 5, 4, 1] has odd size "
                                            "5; expected an even size. Fix: pad or crop"),
    (lambda: double(tf.zeros([4, 4])), "double: x has shape (4, 4); expected (batch, "
                                       "*spatial, channels), rank 3 or more"),
    (lambda: halve(tf.zeros([1, 4, 4, 1]), axes=[3]),
     "halve: axis 3 of shape [1, 4, 4, 1] is not a spatial axis of known size; expected "
     "axes among [1, 2]. Fix: axes=[1, 2]."),
    (lambda: resize(tf.zeros([1, 224, 8, 1]), (100, 8)),
     "resize: axis 1 of shape [1, 224, 8, 1]: 224 -> 100 is not an integer factor: resize "
     "to 112 (1/2) or 56 (1/4). Fix: resize to such a size here"),
    (lambda: resize(tf.zeros([1, 8, 8, 1]), (4,)),
     "resize: size is (4,); expected 2 positive ints, one per resized spatial axis. "
     "Fix: e.g. size=(2, 2)."),
    (lambda: downsample(tf.zeros([1, 10, 8, 1]), 3, axes=[1]),
     "downsample: axis 1 of shape [1, 10, 8, 1] has size 10, which factor 3 does not "
     "divide; expected a multiple of 3. Fix: pad or crop it to 9 or 12 first."),
    (lambda: upsample(tf.zeros([1, 4, 4, 1]), 2, "bicubic"),
     "upsample: method is 'bicubic'; expected one of 'bilinear', 'nearest', 'area'. Fix:"),
    (lambda: upsample(tf.zeros([1, 4, 4, 1], tf.int32), 2),
     "upsample: x has dtype int32; expected a floating dtype for method 'bilinear'. Fix: "
     "tf.cast(x, tf.float32) first, or method='nearest'."),
    (lambda: upsample(tf.zeros([1, 4, 4, 1]), (2, 0)),
     "upsample: factors is (2, 0); expected 2 positive ints"),
])
def test_bad_input_is_refused_with_the_fix(call, message):
    with pytest.raises(ValueError, match=_escaped(message)):
        call()


@pytest.mark.emulator
def test_a_split_image_is_resized_without_a_gather():
    x = _image((1, 24, 24, 8)).numpy().astype(np.float32)

    def ours(x):
        x = spatial_tf.split(x, [1, 2, 2, 1])
        y = upsample(downsample(x, 3, "bilinear"), 3, "bilinear")
        return tf.reduce_sum(downsample(upsample(y, 2, "nearest"), 4, "area") ** 2)

    def tensorflows(x):
        x = spatial_tf.split(x, [1, 2, 2, 1])
        return tf.reduce_sum(tf.image.resize(tf.image.resize(x, (8, 8)), (24, 24)) ** 2)

    emulator = Emulator(4)
    theirs = emulator.report(tensorflows, (x,))
    assert [w for w in theirs.warnings if "ResizeBilinear" in w]  # what the test is about
    report = emulator.report(ours, (x,))
    assert report.warnings == [], report.warnings
    assert "all-gather" not in report.by_kind()
    expected = _reference(np.repeat(np.repeat(_reference(_reference(x, (8, 8), "bilinear"),
                                                         (24, 24), "bilinear"), 2, 1), 2, 2),
                          (12, 12), "area")
    np.testing.assert_allclose(emulator.run(ours, (x,)), np.sum(expected ** 2), rtol=1e-5)


@pytest.mark.emulator
def test_a_split_volume_is_resized_without_a_gather():
    x = _image((1, 8, 8, 8, 2)).numpy().astype(np.float32)

    def step(x):
        x = spatial_tf.split(x, [1, 2, 2, 1, 1])
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = resize(resize(x, (4, 4, 16), "bilinear"), (8, 12, 8), "bilinear")
            loss = tf.reduce_sum(y ** 2)
        return loss, tape.gradient(loss, x)

    report = Emulator(4).report(step, (x,))
    assert report.warnings == [], report.warnings
    assert "all-gather" not in report.by_kind()
