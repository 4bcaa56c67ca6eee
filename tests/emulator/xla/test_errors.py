"""Steps XLA cannot compile fail with a message naming the TensorFlow op and the fix;
spec errors from split() reach the user unchanged."""
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator import CompileError
from spatial_tf.emulator.xla.errors import from_tensorflow_error


def _unique(x):
    return tf.unique(tf.reshape(x, [-1]))[0]


def _where(x):
    return tf.where(x > 0)


def _boolean_mask(x):
    return tf.boolean_mask(x, x > 0)


def _py_function(x):
    return tf.py_function(lambda a: a * 2, [x], tf.float32)


def _as_string(x):
    return tf.strings.length(tf.strings.as_string(x))


def _data_dependent_reshape(x):
    n = tf.cast(tf.reduce_sum(tf.abs(x)), tf.int32)
    return tf.reshape(x, [n, -1])


@pytest.mark.parametrize(
    "step, op, problem",
    [
        (_unique, "Unique", "size depends on the data"),
        (_where, "Where", "size depends on the data"),
        (_boolean_mask, "Where", "size depends on the data"),
        (_py_function, "EagerPyFunc", "has no XLA kernel"),
        (_as_string, "AsString", "has no XLA kernel"),
        (_data_dependent_reshape, "Reshape", "known at compile time"),
    ],
)
def test_uncompilable_op_is_named(emulators, step, op, problem):
    with pytest.raises(CompileError, match=rf"{step.__name__}: TensorFlow op {op}\b.*{problem}.*Fix: ") as info:
        emulators(2).run(step, args=(tf.ones([4, 4]),))
    assert info.value.op_type == op and info.value.function == step.__name__


def test_source_line_of_the_op_is_given(emulators):
    with pytest.raises(CompileError, match=r"created at .*test_errors\.py:\d+ \(_py_function\)"):
        emulators(2).run(_py_function, args=(tf.ones([4, 4]),))


def test_spec_errors_from_split_reach_the_user_unchanged(emulators):
    def step(batch):
        return spatial_tf.split(batch, {"image": [1, 4, 1, 1]})["image"]

    with pytest.raises(ValueError, match=r"inputs\['image'\].*(divisible|divide)") as info:
        emulators(4).run(step, args=({"image": tf.ones([2, 6, 8, 3])},))
    assert not isinstance(info.value, CompileError)


def test_unrelated_tensorflow_errors_are_not_rewritten():
    assert from_tensorflow_error("f", ValueError("something else")) is None
