"""num_replicas > 1: one SPMD program over replicas x cores, the batch split over replicas."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator import replicas
from spatial_tf.emulator.trace import trace


def test_composed_tile_stacks_one_tiling_per_replica():
    tile = np.arange(8).reshape(1, 2, 4, 1)
    composed = replicas.composed_tile(tile, num_replicas=2, num_cores=8)
    assert composed.shape == (2, 2, 4, 1)
    assert composed[0].tolist() == tile[0].tolist() and (composed[1] == tile[0] + 8).all()


def test_compose_rewrites_annotations_and_batch_arguments():
    def step(image, label, scale):
        image = spatial_tf.split(image, [1, 2, 2, 1], num_cores_per_replica=4)
        return tf.reduce_sum(image) * scale + tf.reduce_sum(label)

    traced = trace(step, (tf.ones([4, 8, 8, 2]), tf.ones([4]), tf.constant(2.0)))
    module = type(traced.module).FromString(replicas.compose(traced, 2, 4))
    entry = next(c for c in module.computations if c.id == module.entry_computation_id)
    by_name = {i.name: i for i in entry.instructions}
    annotated = next(i for i in entry.instructions if i.custom_call_target == "Sharding")
    assert list(annotated.sharding.tile_assignment_dimensions) == [2, 2, 2, 1]
    assert list(annotated.sharding.tile_assignment_devices) == list(range(8))
    params = sorted((i for i in by_name.values() if i.opcode == "parameter"), key=lambda i: i.parameter_number)
    label = params[1].sharding  # batch split over replicas, whole within each replica
    assert list(label.tile_assignment_dimensions) == [2, 4] and label.replicate_on_last_tile_dim
    assert not params[2].HasField("sharding")  # a scalar has no batch axis


def _bn_net():
    keras.utils.set_random_seed(1)
    return keras.Sequential([
        keras.Input((16, 16, 2)),
        keras.layers.Conv2D(4, 3, padding="same", use_bias=False),
        keras.layers.BatchNormalization(),
        keras.layers.ReLU(),
        keras.layers.Conv2D(1, 3, strides=2, padding="same"),
    ])


def _train_step(model, optimizer, spec):
    def step_fn(batch):
        image, target = spatial_tf.split(batch, [spec, None])
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean((model(image, training=True) - target) ** 2, axis=[1, 2, 3])
            loss = tf.nn.compute_average_loss(per_example)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step_fn


@pytest.mark.parametrize("cores, replicas_, spec", [(4, 2, [1, 2, 2, 1]), (1, 4, [1, 1, 1, 1])])
def test_data_parallel_matches_one_device_on_the_global_batch(emulators, cores, replicas_, spec):
    rng = np.random.default_rng(0)
    batches = [(rng.normal(size=(8, 16, 16, 2)).astype("float32"),
                rng.normal(size=(8, 8, 8, 1)).astype("float32")) for _ in range(2)]

    def train(strategy):
        model = _bn_net()
        optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
        optimizer.build(model.trainable_variables)
        step_fn = _train_step(model, optimizer, spec)
        losses = [float(strategy.run(step_fn, args=(b,))) for b in batches]
        return losses, [v.numpy() for v in model.variables]

    want_losses, want_vars = train(tf.distribute.get_strategy())  # TensorFlow, one device
    emulator = emulators(cores, replicas=replicas_)
    got_losses, got_vars = train(emulator)

    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5)
    for got, want in zip(got_vars, want_vars):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    step = next(iter(emulator._steps.values()))
    params, _ = step.program.compiled.sharding_strings()
    assert params[0].startswith(f"{{devices=[{replicas_ * spec[0]},{spec[1]},{spec[2]},1")
    assert emulator.num_replicas_in_sync == replicas_


def test_per_replica_datasets_feed_a_training_loop(emulators):
    emulator = emulators(2, replicas=2)
    model = _bn_net()
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)
    step_fn = _train_step(model, optimizer, [1, 2, 1, 1])

    def dataset_fn(ctx):
        rng = np.random.default_rng(ctx.input_pipeline_id)
        images = rng.normal(size=(16, 16, 16, 2)).astype("float32")
        targets = (images[:, ::2, ::2, :1] > 0).astype("float32")
        batch = ctx.get_per_replica_batch_size(8)
        return tf.data.Dataset.from_tensor_slices((images, targets)).repeat().batch(batch, drop_remainder=True)

    iterator = iter(emulator.distribute_datasets_from_function(dataset_fn))

    @tf.function
    def train_step(it):
        return emulator.reduce("SUM", emulator.run(step_fn, args=(next(it),)), axis=None)

    losses = [float(train_step(iterator)) for _ in range(6)]
    assert losses[-1] < losses[0]
    assert int(optimizer.iterations) == 6
