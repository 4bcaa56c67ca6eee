"""A step with no split, run on several cores per replica, is named in one warning."""
import warnings

import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.emulator.distribute.strategy import UnsplitStepWarning, _step_name

pytestmark = pytest.mark.emulator


def _unsplit_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, UnsplitStepWarning)]


def _run_twice(emulator, step):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(2):
            emulator.run(step, args=(tf.ones([2, 8]),))
    return _unsplit_warnings(record)


def test_a_step_without_split_warns_once_with_its_name_and_the_fix(emulators):
    def my_step(x):
        return tf.reduce_sum(x * 2.0)

    [message] = _run_twice(emulators(2), my_step)
    assert message.startswith("spatial_tf.Emulator: the step 'my_step' has no split in it, so "
                              "each of the 2 cores of a replica computes all of it")
    assert "spatial_tf.layers.Split([1, 2, 1, 1])" in message
    assert "spatial_tf.split(features, spec)" in message


def test_a_split_step_and_a_one_core_emulator_do_not_warn(emulators):
    def split_step(x):
        return tf.reduce_sum(spatial_tf.split(x, [1, 2]))

    def replicated_step(x):  # a deliberate annotation is a choice, not a forgotten split
        return tf.reduce_sum(spatial_tf.split(x, None))

    def plain_step(x):
        return tf.reduce_sum(x)

    assert _run_twice(emulators(2), split_step) == []
    assert _run_twice(emulators(2), replicated_step) == []
    assert _run_twice(emulators(1), plain_step) == []


def test_keras_steps_are_named_as_keras_runs_them():
    class TensorFlowTrainer:  # the qualname Keras 3's TensorFlow trainer gives its steps
        def train_step(self, data):
            return data

    name = _step_name(TensorFlowTrainer().train_step, "TensorFlowTrainer.train_step")
    assert name == "'TensorFlowTrainer.train_step' (Model.train_step, run by Keras' fit)"
    assert _step_name(lambda x: x, "my_step") == "'my_step'"
