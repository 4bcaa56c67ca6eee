"""Variables reached only through their handle (legacy tf_keras optimizers) are variables."""
import numpy as np
import pytest
import tensorflow as tf

from spatial_tf.emulator.xla.handles import HandleVariable


def _run_both(emulator, make_step):
    """Run the step eagerly in TensorFlow and on the emulator from the same values."""
    results = []
    for run in (lambda f: f(), emulator.run):
        variables, step = make_step()
        run(step)
        results.append([v.numpy() for v in variables])
    return results


def test_raw_momentum_and_adam_updates_match_tensorflow(emulators):
    def make_step():
        var = tf.Variable(np.linspace(-1, 1, 8).reshape(2, 4))
        accum = tf.Variable(np.full((2, 4), 0.5))
        m, v = tf.Variable(np.zeros((2, 4))), tf.Variable(np.full((2, 4), 0.1))
        adam_var = tf.Variable(np.ones((2, 4)))
        iterations = tf.Variable(np.int64(3))
        grad = tf.constant(np.arange(8.0).reshape(2, 4))

        def step():  # what tf_keras' SGD(momentum) and Adam emit: handles only
            tf.raw_ops.ResourceApplyKerasMomentum(
                var=var.handle, accum=accum.handle, lr=tf.constant(0.1, tf.float64),
                grad=grad, momentum=tf.constant(0.9, tf.float64))
            tf.raw_ops.ResourceApplyAdam(
                var=adam_var.handle, m=m.handle, v=v.handle,
                beta1_power=tf.constant(0.9, tf.float64), beta2_power=tf.constant(0.999, tf.float64),
                lr=tf.constant(0.01, tf.float64), beta1=tf.constant(0.9, tf.float64),
                beta2=tf.constant(0.999, tf.float64), epsilon=tf.constant(1e-7, tf.float64), grad=grad)
            iterations.assign_add(1, read_value=False)

        return [var, accum, m, v, adam_var, iterations], step

    want, got = _run_both(emulators(2), make_step)
    assert int(got[-1]) == 4
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=0)
    assert not np.allclose(got[0], np.linspace(-1, 1, 8).reshape(2, 4))  # it did update


def test_a_step_with_one_write_and_no_outputs(emulators):
    u = tf.Variable(0.0)

    def bump():
        u.assign_add(1.0)

    assert emulators(2).run(bump) is None
    assert float(u) == 1.0

    @tf.function
    def twice():
        emulators(2).run(bump)
        emulators(2).run(bump)

    twice()
    assert float(u) == 3.0


def test_handle_variable_reads_and_writes_through_the_handle():
    v = tf.Variable(np.arange(6, dtype=np.int32).reshape(2, 3))
    h = HandleVariable.from_handle(v.handle)
    assert (h.dtype, h.shape.as_list()) == (tf.int32, [2, 3])
    assert h.aggregation == tf.VariableAggregation.NONE and "reached by handle" in h.name
    h.assign(np.ones((2, 3), np.int32))
    assert v.numpy().tolist() == [[1, 1, 1], [1, 1, 1]]


def test_a_lookup_table_is_not_a_variable(emulators):
    table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer([1], [2]), 0)
    assert HandleVariable.from_handle(table.resource_handle) is None
    with pytest.raises(TypeError, match="resource that is not a variable.*lookup table"):
        emulators(2).run(lambda k: table.lookup(k), args=(tf.constant([1]),))


def test_tf_keras_optimizers_train_as_in_tensorflow(emulators):
    tf_keras = pytest.importorskip("tf_keras", reason="tf_keras (legacy Keras 2) is not installed")
    import spatial_tf

    def train(strategy, spec):
        with strategy.scope():
            tf.keras.utils.set_random_seed(1)
            model = tf_keras.Sequential([
                tf_keras.layers.Conv2D(4, 3, padding="same", input_shape=(8, 8, 2), dtype="float64"),
                tf_keras.layers.BatchNormalization(dtype="float64"),
                tf_keras.layers.Conv2D(1, 3, padding="same", dtype="float64")])
            optimizers = [tf_keras.optimizers.SGD(0.1, momentum=0.9), tf_keras.optimizers.Adam(0.01)]
        x = np.random.RandomState(0).randn(4, 8, 8, 2)
        y = np.random.RandomState(1).randn(4, 8, 8, 1)

        def step(xx, yy, optimizer):
            if spec:
                xx = spatial_tf.split(xx, spec)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(xx, training=True) - yy) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        losses = [float(strategy.run(step, args=(x, y, opt))) for opt in optimizers for _ in range(2)]
        return losses, [v.numpy() for v in model.variables], [int(o.iterations) for o in optimizers]

    want = train(tf.distribute.get_strategy(), None)
    got = train(emulators(2), [1, 2, 1, 1])
    assert got[2] == want[2] == [2, 2]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)
