"""Emulator.compare and the error arithmetic behind it."""
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator.diagnose.parity import ParityError, difference


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
    assert text.startswith("correct: all 3 results match\n")
    assert "partitioned vs TensorFlow" in text and "max rel err" in text
    assert result.to_dict()["ok"] is True and result.worst in result.rows


def test_compare_against_tensorflow_catches_semantic_differences(emulators):
    """XLA saturates float->int casts; TensorFlow's CPU kernel wraps to INT_MIN."""

    def step(x):
        return tf.cast(spatial_tf.split(x, [2]) * 1e10, tf.int32)

    x = tf.constant([1.0, -1.0, 0.5, 0.0])
    assert emulators(2).compare(step, args=(x,)).ok  # partitioning itself changes nothing
    result = emulators(2).compare(step, args=(x,), reference="tensorflow")
    assert not result.ok and result.rows[0].index == (0,)
    with pytest.raises(ParityError, match=r"^ERROR: 1 of 1 results differ beyond rounding") as info:
        emulators(2).compare(step, args=(x,), reference="tensorflow", raise_on_mismatch=True)
    assert info.value.comparison.rows[0].path == "outputs"


def test_compare_checks_its_reference(emulators):
    with pytest.raises(ValueError, match=r"reference is 'tpu'; expected one of \['unpartitioned', 'tensorflow'\]"):
        emulators(2).compare(lambda x: x, args=(tf.ones([2]),), reference="tpu")


def _conv_bn_step(dtype, spec, bias=True):
    """A train step with ill-conditioned results: gradients through batch norm, and the
    gradient of a convolution bias that batch norm cancels (zero in exact arithmetic)."""
    import keras

    keras.utils.set_random_seed(5)
    model = keras.Sequential([
        keras.Input((16, 16, 3), dtype=dtype),
        keras.layers.Conv2D(8, 3, padding="same", use_bias=bias, dtype=dtype),
        keras.layers.BatchNormalization(dtype=dtype),
        keras.layers.ReLU(dtype=dtype),
        keras.layers.Conv2D(8, 3, padding="same", use_bias=bias, dtype=dtype),
        keras.layers.BatchNormalization(dtype=dtype),
        keras.layers.GlobalAveragePooling2D(dtype=dtype),
        keras.layers.Dense(3, dtype=dtype),
    ])
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)

    def step(x, y):
        x = spatial_tf.split(x, spec)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                y, model(x, training=True), from_logits=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    x = tf.random.stateless_normal([2, 16, 16, 3], seed=[3, 4], dtype=dtype)
    return step, (x, tf.constant([0, 2]))


def test_float32_rounding_is_told_from_error(emulators):
    step, args = _conv_bn_step("float32", [1, 2, 2, 1])
    result = emulators(4).compare(step, args=args)
    assert result.ok, str(result)
    assert result.verdict.startswith("correct: ")
    biases = [r for r in result.rows if r.path.endswith("bias") and "conv" in r.path]
    assert len(biases) == 2
    for row in result.rows:
        if row.dtype != "float32":
            continue
        assert row.float64_rel is not None and row.floor is not None, row
        if row not in biases:
            assert row.float64_rel < 1e-11, row
            assert row.float64_tolerance == 1e-9
    for row in biases:  # pure rounding noise, amplified: allowed by the measured floor
        assert row.floor > 1e3 and row.float64_tolerance > 1e-3


def test_float64_steps_match_tightly(emulators):
    step, args = _conv_bn_step("float64", [1, 4, 1, 1], bias=False)
    result = emulators(4).compare(step, args=args)
    assert result.verdict.startswith("correct: all ") and result.ok
    assert max(r.max_rel for r in result.rows) < 1e-11
    assert all(r.float64_rel is None for r in result.rows)  # float64 already: no second run


@pytest.mark.parametrize("relative_error", [1e-3, 1e-6])
def test_a_corrupted_partitioned_output_is_an_error(emulators, monkeypatch, relative_error):
    step, args = _conv_bn_step("float32", [1, 2, 2, 1])
    emulator = emulators(4)
    compiled = emulator.compile(step, args=args)
    programs = [compiled.program, compiled.float64_program(partitioned=True)]
    for program in programs:
        original = program.execute_replicas

        def corrupted(values, captures, original=original):
            outputs, updates = original(values, captures)
            updates[0][0] = updates[0][0].copy()
            updates[0][0].flat[3] += relative_error * np.abs(updates[0][0]).max()
            return outputs, updates

        monkeypatch.setattr(program, "execute_replicas", corrupted)
    result = emulator.compare(step, args=args)
    assert not result.ok
    bad = [r for r in result.rows if r.verdict == "ERROR"]
    assert len(bad) == 1 and bad[0].path.endswith("kernel") and bad[0].shape == (3, 3, 3, 8) and bad[0].index[-1] == 3
    assert str(result).startswith("ERROR: 1 of ")
    with pytest.raises(ParityError):
        emulator.compare(step, args=args, raise_on_mismatch=True)


def test_compare_with_replicas_compares_each_replica(emulators):
    emulator = emulators(2, 2)
    w = tf.Variable(tf.ones([4]))

    def step(x):
        x = spatial_tf.split(x, [1, 2])
        grad = tf.distribute.get_replica_context().all_reduce("SUM", tf.reduce_sum(x, 0))
        w.assign_sub(0.1 * grad)
        return tf.reduce_sum(x)

    values = emulator.experimental_distribute_values_from_function(
        lambda c: tf.fill([2, 4], float(c.replica_id_in_sync_group + 1)))
    result = emulator.compare(step, args=(values,))
    assert result.ok
    assert [r.path for r in result.rows] == [
        "outputs (replica 0)", "update of Variable (replica 0)",
        "outputs (replica 1)", "update of Variable (replica 1)"]
    with pytest.raises(ValueError, match="reference='tensorflow' runs the step once"):
        emulator.compare(step, args=(values,), reference="tensorflow")
