"""Several replicas behave as on TPUStrategy: TensorFlow's MirroredStrategy is the oracle.

MirroredStrategy over R virtual CPU devices implements per-replica semantics
unpartitioned: each replica gets global_batch / R examples, batch norm takes per-replica
statistics, ``compute_average_loss`` divides by the global batch, Keras optimizers sum
gradients across replicas. The same loop on ``Emulator(C, R)`` must give the same
per-replica losses and variables, in float64 to 1e-9 (reduction order cannot hide a
semantic difference there) and in float32 at the usual tolerance.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator.xla import replicas


def _net(dtype):
    keras.utils.set_random_seed(1)
    return keras.Sequential([
        keras.Input((16, 16, 2), dtype=dtype),
        keras.layers.Conv2D(4, 3, padding="same", use_bias=False, dtype=dtype),
        keras.layers.BatchNormalization(dtype=dtype),
        keras.layers.ReLU(dtype=dtype),
        keras.layers.Conv2D(1, 3, strides=2, padding="same", dtype=dtype),
    ])


def _batches(dtype, steps=3, global_batch=8):
    rng = np.random.default_rng(7)
    return [(rng.normal(size=(global_batch, 16, 16, 2)).astype(dtype),
             rng.normal(size=(global_batch, 8, 8, 1)).astype(dtype)) for _ in range(steps)]


def _train(strategy, spec, optimizer_name, dtype, batches):
    """The loop a TPU user writes; returns per-step per-replica losses and variables."""
    with strategy.scope():
        model = _net(dtype)
        optimizer = {"sgd": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
                     "adam": lambda: keras.optimizers.Adam(0.01)}[optimizer_name]()
        optimizer.build(model.trainable_variables)

    def step_fn(batch):
        image, target = batch
        if spec is not None:
            image = spatial_tf.split(image, spec)
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean((model(image, training=True) - target) ** 2, axis=[1, 2, 3])
            loss = tf.nn.compute_average_loss(per_example)  # no global batch size given
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_step(iterator):
        return strategy.run(step_fn, args=(next(iterator),))

    dataset = tf.data.Dataset.from_tensor_slices(
        (np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches]))
    ).batch(len(batches[0][0]), drop_remainder=True)
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    losses = [[float(x) for x in strategy.experimental_local_results(train_step(iterator))]
              for _ in batches]
    return np.array(losses), [v.numpy() for v in model.variables]


def _mirrored(num_replicas, virtual_cpus):
    # reductions through one device: collectives of strategies with different replica
    # counts in one process would share group keys
    return tf.distribute.MirroredStrategy(
        virtual_cpus[:num_replicas], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )


CASES = [
    # (cores per replica, replicas, spec of the image, optimizer)
    (1, 2, None, "sgd"),
    (2, 2, [1, 2, 1, 1], "sgd"),
    (4, 2, [1, 2, 2, 1], "sgd"),
    (4, 2, [1, 4, 1, 1], "adam"),
    (2, 4, [1, 1, 2, 1], "sgd"),
]


@pytest.mark.parametrize("cores, num_replicas, spec, optimizer", CASES)
def test_same_losses_and_variables_as_mirrored_strategy_in_float64(
        emulators, virtual_cpus, cores, num_replicas, spec, optimizer):
    batches = _batches("float64")
    want_losses, want_vars = _train(_mirrored(num_replicas, virtual_cpus), None, optimizer,
                                    "float64", batches)
    got_losses, got_vars = _train(emulators(cores, num_replicas), spec, optimizer,
                                  "float64", batches)
    assert got_losses.shape == (3, num_replicas)
    assert np.ptp(want_losses[0]) > 1e-3  # replicas saw different data
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-9, atol=0)
    for got, want in zip(got_vars, want_vars):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_same_losses_and_variables_as_mirrored_strategy_in_float32(emulators, virtual_cpus):
    batches = _batches("float32")
    want_losses, want_vars = _train(_mirrored(2, virtual_cpus), None, "sgd", "float32", batches)
    got_losses, got_vars = _train(emulators(4, 2), [1, 2, 2, 1], "sgd", "float32", batches)
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5)
    for got, want in zip(got_vars, want_vars):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_a_semantic_difference_is_caught(emulators, virtual_cpus):
    """Global-batch statistics (what the emulator computed before) are not per-replica."""
    batches = _batches("float64", steps=1)
    want_losses, _ = _train(_mirrored(2, virtual_cpus), None, "sgd", "float64", batches)
    got_losses, _ = _train(emulators(2, 1), [1, 2, 1, 1], "sgd", "float64", batches)
    assert abs(got_losses[0][0] - want_losses[0].sum()) > 1e-6


def test_replica_context_inside_the_step(emulators):
    emulator = emulators(2, 2)
    seen = {}

    def step(x):
        ctx = tf.distribute.get_replica_context()
        seen["strategy"] = ctx.strategy
        seen["replicas"] = ctx.num_replicas_in_sync
        x = spatial_tf.split(x, [1, 2])
        total = ctx.all_reduce("SUM", tf.reduce_sum(x, axis=0))
        mean = ctx.all_reduce(tf.distribute.ReduceOp.MEAN, tf.reduce_sum(x))
        return ctx.replica_id_in_sync_group, total, mean

    values = emulator.experimental_distribute_values_from_function(
        lambda c: tf.fill([2, 4], float(c.replica_id_in_sync_group + 1))
    )
    ids, total, mean = emulator.run(step, args=(values,))
    assert seen == {"strategy": emulator, "replicas": 2}
    assert [int(i) for i in emulator.experimental_local_results(ids)] == [0, 1]
    for t in emulator.experimental_local_results(total):
        assert t.numpy().tolist() == [6.0] * 4  # 2 rows of 1s + 2 rows of 2s
    assert [float(m) for m in emulator.experimental_local_results(mean)] == [12.0, 12.0]
    assert float(emulator.reduce("SUM", ids, axis=None)) == 1
    assert float(emulator.reduce("MEAN", mean, axis=None)) == 12.0


def test_one_replica_returns_plain_tensors(emulators):
    emulator = emulators(2, 1)
    result = emulator.run(lambda x: tf.reduce_sum(spatial_tf.split(x, [1, 2])), args=(tf.ones([2, 4]),))
    assert isinstance(result, tf.Tensor) and float(result) == 8.0
    assert emulator.experimental_local_results(result) == (result,)


def test_each_replica_gets_its_slice_of_the_global_batch(emulators):
    emulator = emulators(1, 4)
    dataset = tf.data.Dataset.range(16).batch(8, drop_remainder=True)
    batch = next(iter(emulator.experimental_distribute_dataset(dataset)))
    parts = [t.numpy().tolist() for t in emulator.experimental_local_results(batch)]
    assert parts == [[0, 1], [2, 3], [4, 5], [6, 7]]
    out = emulator.run(lambda x: x * 10, args=(batch,))
    assert [t.numpy().tolist() for t in emulator.experimental_local_results(out)] == [
        [0, 10], [20, 30], [40, 50], [60, 70]]


@pytest.mark.parametrize("batch, message", [
    (lambda: tf.data.Dataset.range(9).batch(3, drop_remainder=True),
     r"dataset has batch size 3, which does not split evenly over num_replicas=2.*"
     r"Fix: use a global batch size that is a multiple of 2"),
    (lambda: tf.data.Dataset.range(9),
     r"dataset is a scalar; with num_replicas=2"),
])
def test_datasets_that_cannot_split_are_refused(emulators, batch, message):
    with pytest.raises(ValueError, match=message):
        emulators(1, 2).experimental_distribute_dataset(batch())


def test_per_replica_datasets_feed_each_replica(emulators):
    emulator = emulators(2, 2)
    contexts = []

    def dataset_fn(ctx):
        contexts.append((ctx.num_replicas_in_sync, ctx.get_per_replica_batch_size(8)))
        return tf.data.Dataset.range(100).batch(ctx.get_per_replica_batch_size(8),
                                                drop_remainder=True)

    batch = next(iter(emulator.distribute_datasets_from_function(dataset_fn)))
    assert contexts == [(2, 4)]
    assert [t.numpy().tolist() for t in emulator.experimental_local_results(batch)] == [
        [0, 1, 2, 3], [4, 5, 6, 7]]


def test_mean_aggregated_variable_written_in_the_step_is_averaged(emulators):
    emulator = emulators(1, 2)
    with emulator.scope():
        v = tf.Variable(0.0, aggregation=tf.VariableAggregation.MEAN)

    def step(x):
        v.assign(tf.reduce_sum(x))
        return v.read_value()

    values = emulator.experimental_distribute_values_from_function(
        lambda c: tf.constant([1.0, 2.0]) * (c.replica_id_in_sync_group + 1)
    )
    emulator.run(step, args=(values,))
    assert float(v.numpy()) == 4.5  # (3 + 6) / 2


def test_run_with_mismatched_per_replica_values_is_refused(emulators):
    values = emulators(1, 2).experimental_distribute_values_from_function(
        lambda c: tf.zeros([2])
    )
    with pytest.raises(ValueError, match=r"holds 2 per-replica values but the emulator runs "
                                         r"num_replicas=4"):
        emulators(1, 4).run(lambda x: x, args=(values,))


def test_a_merge_function_that_needs_values_is_explained(emulators):
    emulator = emulators(1, 2)
    v = tf.Variable(1.0)

    def step(x):
        ctx = tf.distribute.get_replica_context()
        return ctx.merge_call(lambda strategy, t: float(t.numpy()), args=(tf.reduce_sum(x),))

    with pytest.raises(AttributeError, match=r"merge_call\(.*<lambda>\): the merge function "
                                             r"failed while the emulator traced.*Fix: no \.numpy\(\)"):
        emulator.run(step, args=(tf.ones([2]),))
    assert float(v) == 1.0
