"""Emulator.compare and the error arithmetic behind it."""
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator.parity import ParityError, difference


def test_difference_is_normwise_and_locates_the_worst_element():
    ref = np.array([[1.0, -4.0], [2.0, 0.0]], np.float32)
    got = ref.copy()
    got[1, 1] = 4e-5
    d = difference("x", got, ref)
    assert d.index == (1, 1) and d.max_abs == pytest.approx(4e-5)
    assert d.max_rel == pytest.approx(1e-5) and d.ok  # 4e-5 / max|ref| = 4e-5 / 4
    assert not difference("x", got * 1.001, ref).ok


def test_difference_of_updates_forgives_one_rounding_of_the_new_value():
    old = np.float32([0.5, 0.25])
    new = old + np.float32([1e-6, -1e-6])
    nudged = new.copy()
    nudged[0] = np.nextafter(new[0], np.float32(1))  # one unit in the last place
    assert difference("w", nudged, new, old=old).ok
    nudged[0] = new[0] + 2e-7  # several units: a real difference in a tiny update
    bad = difference("w", nudged, new, old=old)
    assert not bad.ok and bad.index == (0,)


@pytest.mark.parametrize(
    "got, ref, ok",
    [
        (np.int32([1, 2, 3]), np.int32([1, 2, 3]), True),
        (np.int32([1, 2, 4]), np.int32([1, 2, 3]), False),  # integers must be exact
        (np.float32([np.nan, 1]), np.float32([np.nan, 1]), True),  # NaN where NaN is expected
        (np.float32([np.nan, 1]), np.float32([0, 1]), False),
        (np.float32([1, 2]), np.float32([1, 2, 3]), False),  # shape differs
        (np.float32([]), np.float32([]), True),
        (np.array([1.0, 2.0], ml_dtypes.bfloat16), np.array([1.0, 2.0078125], ml_dtypes.bfloat16), True),
    ],
)
def test_difference_by_dtype(got, ref, ok):
    assert difference("x", got, ref).ok is ok


def test_compare_leaves_variables_alone_and_prints_a_table(emulators):
    w = tf.Variable(tf.random.stateless_normal([3, 3, 2, 2], seed=[1, 1]))
    steps = tf.Variable(0, dtype=tf.int64)

    def step(x):
        x = spatial_tf.split(x, [1, 2, 2, 1])
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.conv2d(x, w, 1, "SAME") ** 2)
        w.assign_sub(0.1 * tape.gradient(loss, w))
        steps.assign_add(1)
        return {"loss": loss}

    before = w.numpy()
    x = tf.random.stateless_normal([2, 16, 16, 2], seed=[2, 2])
    for reference in ("unpartitioned", "tensorflow"):
        result = emulators(4).compare(step, args=(x,), reference=reference)
        assert result.ok, str(result)
        assert [r.path for r in result.rows] == ["outputs['loss']", "update of Variable", "update of Variable"]
    np.testing.assert_array_equal(w.numpy(), before)
    assert int(steps) == 0
    text = str(result)
    assert "partitioned vs TensorFlow: all match" in text and "max rel err" in text
    assert result.to_dict()["ok"] is True and result.worst in result.rows


def test_compare_against_tensorflow_catches_semantic_differences(emulators):
    """XLA saturates float->int casts; TensorFlow's CPU kernel wraps to INT_MIN."""

    def step(x):
        return tf.cast(spatial_tf.split(x, [2]) * 1e10, tf.int32)

    x = tf.constant([1.0, -1.0, 0.5, 0.0])
    assert emulators(2).compare(step, args=(x,)).ok  # partitioning itself changes nothing
    result = emulators(2).compare(step, args=(x,), reference="tensorflow")
    assert not result.ok and result.rows[0].index == (0,)
    with pytest.raises(ParityError, match=r"1 of 1 differ") as info:
        emulators(2).compare(step, args=(x,), reference="tensorflow", raise_on_mismatch=True)
    assert info.value.comparison.rows[0].path == "outputs"


def test_compare_checks_its_reference(emulators):
    with pytest.raises(ValueError, match=r"reference is 'tpu'; expected one of \['unpartitioned', 'tensorflow'\]"):
        emulators(2).compare(lambda x: x, args=(tf.ones([2]),), reference="tpu")
