"""Wrong use of variables fails before anything is written, in one line with the fix."""
import numpy as np
import pytest
import tensorflow as tf

pytestmark = pytest.mark.emulator


def _copies(v):
    return [np.asarray(tf.convert_to_tensor(c)).tolist() for c in v.values]


@pytest.mark.parametrize("method", ["assign", "assign_add", "assign_sub"])
def test_an_assign_of_another_shape_names_the_variable_and_writes_nothing(emulators, method):
    emulator = emulators(2, 2)
    with emulator.scope():
        w = tf.Variable([1.0, 2.0], name="weights")
    with pytest.raises(ValueError) as e:
        getattr(w, method)([1.0, 2.0, 3.0])
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"{method} to the variable 'weights' (float32, shape (2,)): "
                              f"the value has shape (3,)")
    assert "No replica's copy was written. Fix:" in message
    assert _copies(w) == [[1.0, 2.0], [1.0, 2.0]]


def test_an_assign_of_another_dtype_names_the_variable_and_writes_nothing(emulators):
    emulator = emulators(1, 2)
    with emulator.scope():
        count = tf.Variable(0, dtype=tf.int64, name="count")
    with pytest.raises(ValueError, match=r"^assign_add to the variable 'count' \(int64, shape "
                                         r"\(\)\): the value \(float32\) is not convertible "
                                         r"to int64\. .*Fix: tf\.cast") as e:
        count.assign_add(tf.constant(1.5))
    assert "\n" not in str(e.value)
    assert _copies(count) == [0, 0]


def test_a_wrong_assign_in_a_step_fails_while_tracing_and_writes_nothing(emulators):
    emulator = emulators(2, 2)
    with emulator.scope():
        w = tf.Variable(tf.zeros([2, 2]), name="kernel")

    def step(x):
        w.assign(x)  # x is [2, 3]
        return tf.reduce_sum(x)

    with pytest.raises(ValueError, match=r"assign to the variable 'kernel' \(float32, shape "
                                         r"\(2, 2\)\): the value has shape \(2, 3\)"):
        emulator.run(step, args=(tf.ones([2, 3]),))
    assert _copies(w) == [[[0.0, 0.0], [0.0, 0.0]]] * 2


@pytest.mark.parametrize("outer_function", [False, True], ids=["eager", "tf_function"])
def test_a_step_writing_a_variable_made_outside_the_scope_is_refused(emulators,
                                                                      outer_function):
    emulator = emulators(1, 2)
    v = tf.Variable(1.0, name="outside")

    def step():
        v.assign_add(1.0)
        return v.read_value()

    run = (lambda: emulator.run(step))
    if outer_function:
        run = tf.function(run)
    with pytest.raises(ValueError) as e:
        run()
    # the last line: inside a tf.function TensorFlow adds where the call was made above it
    message = str(e.value).splitlines()[-1].strip().removeprefix("ValueError: ")
    assert message.startswith("step: the step writes the variable 'outside:0', which was "
                              "created outside the emulator's scope")
    assert message.endswith("Fix: create it (the model, optimizer and metrics too) inside "
                            "`with strategy.scope():`.")
    assert float(v) == 1.0


def test_a_variable_made_outside_the_scope_is_read_by_every_replica_and_written_by_one(
        emulators):
    v = tf.Variable(2.0)
    out = emulators(1, 2).run(lambda: v + 1.0)
    assert [float(t) for t in emulators(1, 2).experimental_local_results(out)] == [3.0, 3.0]
    emulators(1, 1).run(lambda: v.assign_add(1.0))  # one replica: one copy, written
    assert float(v) == 3.0
