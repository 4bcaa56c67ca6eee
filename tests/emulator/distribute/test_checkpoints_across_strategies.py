"""A checkpoint the emulator writes restores into MirroredStrategy and into plain
TensorFlow, and theirs into the emulator, with equal values.

The emulator's variables are TensorFlow's distributed variables, so they save and
restore as TensorFlow's do: a checkpoint holds one value per variable (replica 0's for
ON_WRITE, the aggregate for ON_READ), and a restore writes every replica's copy (an
ON_READ ``SUM`` variable gets value / R on each, so that it reads back as the value).
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

pytestmark = pytest.mark.emulator

AGG = tf.VariableAggregation


class _Model(tf.Module):
    """Variables of each kind a training loop keeps."""

    def __init__(self, scale):
        super().__init__()
        self.kernel = tf.Variable(tf.fill([3, 2], scale))        # ON_WRITE, NONE
        self.moving = tf.Variable(tf.fill([2], scale), aggregation=AGG.MEAN)
        self.total = tf.Variable(scale, synchronization=tf.VariableSynchronization.ON_READ,
                                 aggregation=AGG.SUM)
        self.steps = tf.Variable(0, dtype=tf.int64, aggregation=AGG.ONLY_FIRST_REPLICA)


def _train(emulator, model):
    """A step whose replicas write different values: the copies of ``kernel`` and
    ``total`` differ between replicas afterwards."""
    def step():
        r = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
        model.kernel.assign_add(tf.fill([3, 2], r + 1.0))
        model.moving.assign(tf.fill([2], r))
        model.total.assign_add(r + 1.0)
        model.steps.assign_add(1)

    emulator.run(step)


def _read(model):
    """What each variable reads outside a step."""
    return [np.asarray(v.read_value()).tolist()
            for v in (model.kernel, model.moving, model.total, model.steps)]


def _copies(model):
    return [[np.asarray(tf.convert_to_tensor(c)).tolist() for c in v.values]
            for v in (model.kernel, model.moving, model.total, model.steps)]


def _restore(model, path):
    tf.train.Checkpoint(model=model).restore(path).assert_consumed()


@pytest.fixture
def mirrored(virtual_cpus):
    return tf.distribute.MirroredStrategy(
        virtual_cpus[:2], cross_device_ops=tf.distribute.ReductionToOneDevice())


def test_emulator_checkpoint_restores_into_mirrored_and_plain_tensorflow(
        emulators, mirrored, tmp_path):
    emulator = emulators(2, 2)
    with emulator.scope():
        model = _Model(1.0)
    _train(emulator, model)
    saved = _read(model)
    # replica 0's kernel; the mean of 0 and 1; each replica's 1.0 plus 1 and 2; one step
    assert saved == [[[2.0] * 2] * 3, [0.5, 0.5], 5.0, 1]
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "emulator" / "ckpt"))
    with mirrored.scope():
        in_mirrored = _Model(0.0)
    _restore(in_mirrored, path)
    plain = _Model(0.0)
    _restore(plain, path)
    assert _read(in_mirrored) == saved and _read(plain) == saved
    # every replica's copy restored, ON_READ SUM as value / R
    assert _copies(in_mirrored)[2] == [2.5, 2.5]
    assert _copies(in_mirrored)[0] == [saved[0]] * 2


@pytest.mark.parametrize("source", ["plain", "mirrored"])
def test_plain_and_mirrored_checkpoints_restore_into_the_emulator(
        emulators, mirrored, tmp_path, source):
    if source == "plain":
        other = _Model(3.0)
    else:
        with mirrored.scope():
            other = _Model(3.0)
    other.kernel.assign(tf.reshape(tf.range(6, dtype=tf.float32), [3, 2]))
    other.total.assign(8.0)
    other.steps.assign(7)
    path = tf.train.Checkpoint(model=other).save(str(tmp_path / source / "ckpt"))
    emulator = emulators(2, 4)
    with emulator.scope():
        model = _Model(0.0)
    _train(emulator, model)  # replicas' copies differ before the restore
    _restore(model, path)
    want = _read(other)
    assert _read(model) == want
    copies = _copies(model)
    assert copies[0] == [want[0]] * 4 and copies[1] == [want[1]] * 4
    assert copies[2] == [2.0] * 4 and copies[3] == [7] * 4


def _keras_model():
    keras.utils.set_random_seed(4)
    return keras.Sequential([keras.Input((4, 4, 2)), keras.layers.Conv2D(3, 3),
                             keras.layers.BatchNormalization(), keras.layers.Flatten(),
                             keras.layers.Dense(1)])


def test_a_keras_model_fit_on_the_emulator_restores_elsewhere_and_back(
        emulators, mirrored, tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 4, 4, 2)), rng.normal(size=(8, 1))
    emulator = emulators(1, 2)
    with emulator.scope():
        model = _keras_model()
        model.compile(keras.optimizers.SGD(0.1, momentum=0.9), "mse")
    model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    weights = [np.asarray(w) for w in model.weights]
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "keras" / "ckpt"))
    with mirrored.scope():
        in_mirrored = _keras_model()
    plain = _keras_model()
    for other in (in_mirrored, plain):
        tf.train.Checkpoint(model=other).restore(path).assert_existing_objects_matched()
        for got, want in zip(other.weights, weights):
            np.testing.assert_array_equal(np.asarray(got), want)
    # and back: the plain model's weights, changed, into the emulator's model
    for w in plain.weights:
        w.assign(np.asarray(w) + 1.0)
    path = tf.train.Checkpoint(model=plain).save(str(tmp_path / "back" / "ckpt"))
    # the plain model has no optimizer: its checkpoint restores the weights only
    tf.train.Checkpoint(model=model).restore(path).expect_partial()
    for got, want in zip(model.weights, plain.weights):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        for copy in got.value.values:  # every replica's copy
            np.testing.assert_array_equal(np.asarray(tf.convert_to_tensor(copy)),
                                          np.asarray(want))
