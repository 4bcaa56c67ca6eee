"""An assign outside a step writes every replica's copy of a per-replica variable,
whatever its value, as TensorFlow's cross-replica assign does (MirroredStrategy as the
oracle): ``set_weights``, an assign in a ``tf.function``, a checkpoint restore."""
import keras
import numpy as np
import pytest
import tensorflow as tf

pytestmark = pytest.mark.emulator

RNG = np.random.default_rng(11)
X, Y = RNG.normal(size=(8, 8, 8, 2)), RNG.normal(size=(8, 1))
X_TEST = RNG.normal(size=(4, 8, 8, 2))


def _model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 2), dtype="float64")
    x = keras.layers.Conv2D(4, 3, padding="same", dtype="float64")(inputs)
    x = keras.layers.BatchNormalization(dtype="float64")(x)
    x = keras.layers.GlobalAveragePooling2D(dtype="float64")(x)
    return keras.Model(inputs, keras.layers.Dense(1, dtype="float64")(x))


def _fitted(strategy):
    """A Conv+BatchNormalization model fit one step on the strategy's replicas: each
    replica's batch-norm moving statistics come from its own half of the batch."""
    with strategy.scope():
        model = _model()
        model.compile(keras.optimizers.SGD(0.1), "mse")
    model.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    return model


def _off_plain_tensorflow(model):
    """The largest difference between the model's predictions (each replica with its
    own copies) and a plain model's with the weights the model reads back."""
    plain = _model()
    plain.set_weights(model.get_weights())
    got = model.predict(X_TEST, batch_size=4, verbose=0)
    return float(np.abs(got - plain.predict(X_TEST, verbose=0)).max())


@pytest.fixture
def mirrored(virtual_cpus):
    return tf.distribute.MirroredStrategy(
        virtual_cpus[:2], cross_device_ops=tf.distribute.ReductionToOneDevice())


def test_replicas_keep_their_own_moving_statistics_after_fit(emulators, mirrored):
    # the premise: without an assign the replicas disagree, on both strategies
    assert _off_plain_tensorflow(_fitted(mirrored)) > 1e-5
    assert _off_plain_tensorflow(_fitted(emulators(1, 2))) > 1e-5


def test_set_weights_in_the_scope_writes_every_replica(emulators, mirrored):
    for strategy in (mirrored, emulators(1, 2)):
        model = _fitted(strategy)
        with strategy.scope():
            model.set_weights(model.get_weights())  # the same values: still an assign
        assert _off_plain_tensorflow(model) < 1e-12, strategy


def test_an_assign_in_a_tf_function_writes_every_replica(emulators, mirrored):
    for strategy in (mirrored, emulators(1, 2)):
        model = _fitted(strategy)
        statistics = [v for v in model.non_trainable_variables if "moving" in v.path]
        assert len(statistics) == 2  # moving mean and variance

        @tf.function
        def agree():
            for v in statistics:
                v.assign(v.value)

        with strategy.scope():
            agree()
        assert _off_plain_tensorflow(model) < 1e-12, strategy


def test_assigning_one_variable_leaves_the_others_per_replica(emulators):
    model = _fitted(emulators(1, 2))
    mean = next(v for v in model.non_trainable_variables if "moving_mean" in v.path)
    mean.assign(mean.value)
    # the moving variance still differs per replica: predictions still disagree
    assert _off_plain_tensorflow(model) > 1e-7
    variance = next(v for v in model.non_trainable_variables if "moving_variance" in v.path)
    variance.assign_add(tf.zeros_like(variance.value))
    assert _off_plain_tensorflow(model) < 1e-12


def test_a_checkpoint_restore_writes_every_replica(emulators, mirrored, tmp_path):
    for n, strategy in enumerate((mirrored, emulators(1, 2))):
        model = _fitted(strategy)
        path = tf.train.Checkpoint(model=model).save(str(tmp_path / f"ckpt{n}" / "c"))
        with strategy.scope():
            tf.train.Checkpoint(model=model).restore(path).assert_consumed()
        assert _off_plain_tensorflow(model) < 1e-12, strategy


def test_the_emulators_own_writes_after_a_step_are_no_assign(emulators):
    # fit twice more: the replicas' statistics stay their own between steps
    emulator = emulators(1, 2)
    model = _fitted(emulator)
    model.fit(X, Y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    assert _off_plain_tensorflow(model) > 1e-5
