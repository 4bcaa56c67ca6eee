"""TensorFlow's SPMD model-parallelism tests for TPUStrategy, rewritten against the emulator.

Each test names the test of tensorflow/python/distribute/
tpu_strategy_model_parallelism_test.py it rewrites and keeps its expected values, in
terms of ``num_replicas_in_sync``. TensorFlow builds its strategy with
``computation_shape=[1, 1, 1, 2]`` and ``experimental_spmd_xla_partitioning=True``: two
logical cores per replica, as ``Emulator(2, num_replicas=R)`` here, R in {1, 2}.
``test_spmd_with_summary`` is rewritten in tests/emulator/summaries/; the tests without
SPMD (logical-device assignment) cannot run under SPMD partitioning, on TPU or here.
TensorFlow's file itself runs, unchanged but for the strategy, in
test_tf_tpu_strategy_model_parallelism.py.
"""
import numpy as np
import pytest
import tensorflow as tf

pytestmark = pytest.mark.emulator


@pytest.fixture(params=[1, 2], ids=lambda r: f"replicas{r}")
def strategy(request, emulators):
    return emulators(2, request.param)


def _sum(strategy, result):
    return strategy.reduce("SUM", result, axis=None).numpy()


def test_spmd_cannot_assign_tensor_to_logical_device(strategy):
    with pytest.raises(ValueError):
        strategy.experimental_assign_to_logical_device(tf.constant([0, 1]), 0)


def test_spmd_variable_created_from_callable(strategy):
    # every replica's (and logical core's) copy starts from the one initial value
    with strategy.scope():
        w = tf.Variable(lambda: tf.random.normal((16, 16)))
    first = w.numpy()

    @tf.function
    def read():
        return w.read_value()

    for value in strategy.experimental_local_results(strategy.run(read)):
        np.testing.assert_array_equal(value.numpy(), first)


def test_spmd_variable_read(strategy):
    x = tf.random.uniform((32, 16))
    w_init = tf.random.uniform((16, 8))
    with strategy.scope():
        w = tf.Variable(w_init)
    assert w.shape.as_list() == [16, 8]

    @tf.function
    def train_fn(batch_features):
        return strategy.run(lambda features: tf.matmul(features, w), args=(batch_features,))

    np.testing.assert_allclose(
        _sum(strategy, train_fn(x)),
        tf.matmul(x, w_init).numpy() * strategy.num_replicas_in_sync, rtol=5e-3, atol=5e-3)


def test_spmd_variable_read_init_scope(strategy):
    with strategy.scope():
        v = tf.Variable(tf.ones((4, 4)))

    @tf.function
    def read_v():
        with tf.init_scope():
            return v.read_value()

    result = strategy.reduce("MEAN", strategy.run(read_v), axis=None)
    np.testing.assert_allclose(result.numpy(), v.read_value().numpy())


def test_spmd_variable_update(strategy):
    x = tf.random.uniform((1024, 256))
    with strategy.scope():
        w = tf.Variable(tf.random.uniform((1024, 256)))

    def make_strategy_run(fn):
        return tf.function(lambda value: strategy.run(fn, args=(value,)))

    replicas = strategy.num_replicas_in_sync
    np.testing.assert_allclose(_sum(strategy, make_strategy_run(w.assign)(x)),
                               x.numpy() * replicas, rtol=1e-6)
    delta = tf.random.uniform((1024, 256))
    x -= delta
    np.testing.assert_allclose(_sum(strategy, make_strategy_run(w.assign_sub)(delta)),
                               x.numpy() * replicas, rtol=1e-5, atol=1e-6)
    delta = tf.random.uniform((1024, 256))
    x += delta
    np.testing.assert_allclose(_sum(strategy, make_strategy_run(w.assign_add)(delta)),
                               x.numpy() * replicas, rtol=1e-5, atol=1e-6)


def test_spmd_variable_eager_update(strategy):
    x = tf.random.uniform((32, 16))
    with strategy.scope():
        w = tf.Variable(tf.random.uniform((32, 16)))
    w.assign(x)
    np.testing.assert_allclose(w.numpy(), x.numpy())
    x1 = tf.random.uniform((32, 16))
    w.assign_sub(x1)
    np.testing.assert_allclose(w.numpy(), (x - x1).numpy())
    x2 = tf.random.uniform((32, 16))
    w.assign(x)
    w.assign_add(x2)
    np.testing.assert_allclose(w.numpy(), (x + x2).numpy())


def test_spmd_model_checkpointing(strategy, tmp_path):
    class LinearModel(tf.Module):
        def __init__(self, w):
            super().__init__()
            self.w = tf.Variable(w)

        def __call__(self, x):
            return tf.matmul(x, self.w)

    w1, w2 = tf.random.uniform((16, 8)), tf.random.uniform((16, 8))
    x = tf.random.uniform((32, 16))
    with strategy.scope():
        model = LinearModel(w1)
    checkpoint = tf.train.Checkpoint(model=model)
    checkpoint.save(str(tmp_path / "ckpt"))

    @tf.function
    def step_fn(features):
        return model(strategy.experimental_split_to_logical_devices(features, [1, 2]))

    replicas = strategy.num_replicas_in_sync
    model.w.assign(w2)
    np.testing.assert_allclose(_sum(strategy, strategy.run(step_fn, args=(x,))),
                               tf.matmul(x, w2).numpy() * replicas, rtol=5e-3, atol=5e-3)
    status = checkpoint.restore(tf.train.latest_checkpoint(str(tmp_path)))
    status.assert_consumed()
    status.assert_existing_objects_matched()
    np.testing.assert_allclose(_sum(strategy, strategy.run(step_fn, args=(x,))),
                               tf.matmul(x, w1).numpy() * replicas, rtol=5e-3, atol=5e-3)


@pytest.mark.parametrize("split", [False, True])
def test_spmd_with_outside_comp(strategy, split):
    @tf.function
    def fn(x):
        if split:
            x = strategy.experimental_split_to_logical_devices(x, [1, 2])
        z = tf.compat.v1.tpu.outside_compilation(lambda t: t + 1, x + 1)
        return z + 1

    arg = tf.constant(0, shape=(2, 2), dtype=tf.int64)
    np.testing.assert_array_equal(_sum(strategy, strategy.run(fn, args=(arg,))),
                                  (arg.numpy() + 3) * strategy.num_replicas_in_sync)
