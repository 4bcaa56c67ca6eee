"""ON_READ variables hold one value per replica (Keras' metrics): logs as MirroredStrategy's.

A distributed variable has no ``float()`` (as under TPUStrategy and MirroredStrategy):
its value outside a step is ``numpy()``."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf

pytestmark = pytest.mark.emulator


class _BatchLogs(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.logs = []

    def on_train_batch_end(self, batch, logs=None):
        self.logs.append((logs["loss"], logs["mae"]))


def _fit(strategy):
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(24, 8, 8, 2)), rng.normal(size=(24, 8, 8, 1))
    with strategy.scope():
        keras.utils.set_random_seed(5)
        model = keras.Sequential([keras.Input((8, 8, 2), dtype="float64"),
                                  keras.layers.Conv2D(3, 3, padding="same", dtype="float64"),
                                  keras.layers.Conv2D(1, 3, padding="same", dtype="float64")])
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    logs = _BatchLogs()
    history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0,
                        callbacks=[logs])
    evaluated = model.evaluate(x, y, batch_size=8, verbose=0, return_dict=True)
    return np.array(logs.logs), history.history, evaluated


def test_keras_per_batch_logs_equal_mirrored_strategys(emulators, virtual_cpus):
    mirrored = tf.distribute.MirroredStrategy(
        virtual_cpus[:2], cross_device_ops=tf.distribute.ReductionToOneDevice())
    want_batches, want_history, want_evaluated = _fit(mirrored)
    got_batches, got_history, got_evaluated = _fit(emulators(1, 2))
    assert want_batches.shape == (6, 2)  # 3 batches x 2 epochs, (loss, mae)
    # a running mean that differs from the last batch's: the second step reads the first
    assert abs(want_batches[1, 0] - want_batches[0, 0]) > 1e-3
    # Keras keeps metrics in float32 whatever the model's dtype: equal to its rounding
    np.testing.assert_allclose(got_batches, want_batches, rtol=1e-6)
    for key in ("loss", "mae"):
        np.testing.assert_allclose(got_history[key], want_history[key], rtol=1e-6)
        np.testing.assert_allclose(got_evaluated[key], want_evaluated[key], rtol=1e-6)


def _on_read_variable(emulator, aggregation):
    with emulator.scope():
        return tf.Variable(0.0, synchronization=tf.VariableSynchronization.ON_READ,
                           aggregation=aggregation)


@pytest.mark.parametrize("aggregation, outside", [
    (tf.VariableAggregation.SUM, 3.0 + 6.0),
    (tf.VariableAggregation.MEAN, (3.0 + 6.0) / 2),
    (tf.VariableAggregation.ONLY_FIRST_REPLICA, 3.0),
])
def test_each_replica_keeps_its_own_value_and_a_read_outside_aggregates(
        emulators, aggregation, outside):
    emulator = emulators(1, 2)
    v = _on_read_variable(emulator, aggregation)
    values = emulator.experimental_distribute_values_from_function(
        lambda c: tf.constant([1.0, 2.0], tf.float32) * (c.replica_id_in_sync_group + 1))

    def step(x):
        v.assign_add(tf.reduce_sum(x))
        return v.read_value()

    first = [float(t) for t in emulator.experimental_local_results(emulator.run(step, (values,)))]
    assert first == [3.0, 6.0] and float(v.numpy()) == outside
    second = emulator.experimental_local_results(
        tf.function(lambda: emulator.run(step, (values,)))())
    assert [float(t) for t in second] == [6.0, 12.0] and float(v.numpy()) == 2 * outside


def test_an_assignment_outside_a_step_is_spread_as_tensorflow_spreads_it(emulators):
    emulator = emulators(1, 2)
    total = _on_read_variable(emulator, tf.VariableAggregation.SUM)

    def step():
        total.assign_add(1.0)
        return total.read_value()

    emulator.run(step)
    assert float(total.numpy()) == 2.0
    total.assign(10.0)  # e.g. a checkpoint restore: SUM gives each replica 10 / 2
    got = [float(t) for t in emulator.experimental_local_results(emulator.run(step))]
    assert got == [6.0, 6.0] and float(total.numpy()) == 12.0
    total.assign(0.0)  # Keras' reset_state
    assert [float(t) for t in emulator.experimental_local_results(emulator.run(step))] == [1.0, 1.0]


def _moving_statistics_run(strategy):
    """A step training batch norm on each replica's own data, then inference with the
    moving statistics each replica has: Keras 3 keeps them with aggregation NONE."""
    with strategy.scope():
        keras.utils.set_random_seed(2)
        model = keras.Sequential([keras.Input((4, 4, 2), dtype="float64"),
                                  keras.layers.BatchNormalization(momentum=0.5, dtype="float64")])
    values = strategy.experimental_distribute_values_from_function(
        lambda c: tf.constant(np.random.default_rng(c.replica_id_in_sync_group).normal(
            size=(2, 4, 4, 2)) * (c.replica_id_in_sync_group + 1)))
    train = tf.function(lambda: strategy.run(lambda x: model(x, training=True), (values,)))
    infer = tf.function(lambda: strategy.run(lambda x: model(x, training=False), (values,)))
    train()
    outputs = [t.numpy() for t in strategy.experimental_local_results(infer())]
    return outputs, [v.numpy() for v in model.variables]


def test_variables_without_aggregation_keep_one_copy_per_replica_as_mirrored_strategy(
        emulators, virtual_cpus):
    mirrored = tf.distribute.MirroredStrategy(
        virtual_cpus[:2], cross_device_ops=tf.distribute.ReductionToOneDevice())
    want_outputs, want_variables = _moving_statistics_run(mirrored)
    got_outputs, got_variables = _moving_statistics_run(emulators(1, 2))
    # the replicas' moving statistics differ, so their inference outputs do too
    assert np.abs(want_outputs[0] - want_outputs[1]).max() > 0.1
    for got, want in zip(got_outputs, want_outputs):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    for got, want in zip(got_variables, want_variables):   # read outside: replica 0's copy
        np.testing.assert_allclose(got, want, rtol=1e-12)
