"""The emulator is a tf.distribute strategy: what code that asks the context sees."""
import gc
import weakref

import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator.distribute import strategy as strategy_module


def test_it_is_the_current_strategy_inside_its_scope(emulators):
    emulator = emulators(2)
    assert isinstance(emulator, tf.distribute.Strategy)
    assert not tf.distribute.has_strategy()
    with emulator.scope():
        assert tf.distribute.has_strategy() and tf.distribute.get_strategy() is emulator
        assert tf.distribute.in_cross_replica_context()
        assert tf.distribute.get_replica_context() is None
        v = tf.Variable(1.0)
    assert isinstance(v, tf.Variable) and v.device.endswith("CPU:0")
    assert emulator.extended.should_checkpoint and emulator.extended.should_save_summary
    assert emulator.cluster_resolver is None
    assert emulator.extended.worker_devices == ("/job:localhost/replica:0/task:0/device:CPU:0",)
    assert emulators(2, 2).extended.worker_devices == emulator.extended.worker_devices * 2


def test_compute_average_loss_divides_by_the_global_batch(emulators):
    def step(per_example):
        return tf.nn.compute_average_loss(per_example)

    for replicas in (1, 2, 4):
        emulator = emulators(1, replicas)
        dataset = tf.data.Dataset.from_tensors(tf.range(8, dtype=tf.float32))
        batch = next(iter(emulator.experimental_distribute_dataset(dataset)))
        total = emulator.reduce("SUM", emulator.run(step, args=(batch,)), axis=None)
        assert float(total) == pytest.approx(28.0 / 8)  # the mean over the global batch


def _model(dtype="float64"):
    keras.utils.set_random_seed(3)
    return keras.Sequential([
        keras.Input((8, 8, 2), dtype=dtype),
        spatial_tf_split_layer([1, 2, 1, 1]),
        keras.layers.Conv2D(4, 3, padding="same", dtype=dtype),
        keras.layers.BatchNormalization(dtype=dtype),
        keras.layers.Conv2D(1, 3, padding="same", dtype=dtype),
    ])


class _Split(keras.layers.Layer):
    def __init__(self, spec, **kwargs):
        super().__init__(**kwargs)
        self.spec = spec

    def call(self, x):
        return spatial_tf.split(x, self.spec)


def spatial_tf_split_layer(spec):
    return _Split(spec, dtype="float64")


def test_keras_fit_evaluate_predict_run_emulated(emulators):
    x = np.random.RandomState(0).randn(8, 8, 8, 2)
    y = np.random.RandomState(1).randn(8, 8, 8, 1)

    def fit(strategy):
        with strategy.scope():
            model = _model()
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        history = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
        return (history.history["loss"], model.evaluate(x, y, batch_size=4, verbose=0),
                model.predict(x, batch_size=4, verbose=0), [v.numpy() for v in model.variables])

    want = fit(tf.distribute.get_strategy())
    emulator = spatial_tf.Emulator(2)  # its own, to count what it compiled
    got = fit(emulator)
    names = sorted(step.traced.name for step in emulator._steps.values())
    # Keras' own step functions: train_step, test_step and predict's one_step_on_data
    assert names == ["TensorFlowTrainer.test_step", "TensorFlowTrainer.train_step",
                     "one_step_on_data"]
    # Keras tracks the loss in a float32 metric; the model itself is float64
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    assert got[1] == pytest.approx(want[1], rel=1e-6)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-9, atol=1e-12)
    for g, w in zip(got[3], want[3]):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)


def test_compiled_steps_do_not_keep_functions_alive(emulators):
    emulator = emulators(2)

    def make():
        return lambda x: x * 2.0

    fn = make()
    ref = weakref.ref(fn)
    emulator.run(fn, args=(tf.ones([2]),))
    del fn
    gc.collect()
    assert ref() is None


def test_the_step_cache_is_bounded(emulators, monkeypatch):
    emulator = spatial_tf.Emulator(1)
    monkeypatch.setattr(strategy_module, "MAX_CACHED_STEPS", 3)
    keep = [lambda x, i=i: x + i for i in range(5)]
    for f in keep:
        emulator.run(f, args=(tf.ones([2]),))
    assert len(emulator._steps) == 3
    step = emulator.compile(keep[-1], args=(tf.ones([2]),))  # still cached: no new entry
    assert len(emulator._steps) == 3 and step is list(emulator._steps.values())[-1].compile()


def test_bound_methods_share_one_compiled_step(emulators):
    emulator = spatial_tf.Emulator(1)

    class Model:
        def step(self, x):
            return x + 1.0

    m = Model()
    emulator.run(m.step, args=(tf.ones([2]),))
    emulator.run(m.step, args=(tf.ones([2]),))  # a new bound method object each time
    assert len(emulator._steps) == 1
