"""Checkpointer: numbered by global step, restores the data position, refuses other models."""
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from spatial_tf.train import CheckpointMismatchError, Checkpointer


def _dense(units):
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(units)])


def test_numbers_and_restores_weights_step_and_iterator(tmp_path):
    model = _dense(2)
    iterator = iter(tf.data.Dataset.range(100))
    ckpt = Checkpointer(tmp_path, model=model, iterator=iterator)
    assert ckpt.restore() == 0
    [next(iterator) for _ in range(7)]
    ckpt.save(7)
    saved = [w.numpy() for w in model.weights]
    assert os.path.basename(ckpt.manager.latest_checkpoint) == "ckpt-7"

    other_model = _dense(2)
    other_model.weights[0].assign(tf.zeros_like(other_model.weights[0]))
    other_iterator = iter(tf.data.Dataset.range(100))
    again = Checkpointer(tmp_path, model=other_model, iterator=other_iterator)
    assert again.restore() == 7
    assert int(next(other_iterator)) == 7
    for a, b in zip(other_model.weights, saved):
        np.testing.assert_array_equal(a.numpy(), b)


def test_keeps_max_to_keep(tmp_path):
    ckpt = Checkpointer(tmp_path, max_to_keep=2, model=_dense(1))
    for step in (1, 2, 3):
        ckpt.save(step)
    assert [os.path.basename(p) for p in ckpt.manager.checkpoints] == ["ckpt-2", "ckpt-3"]


def test_checkpoint_of_another_model(tmp_path):
    Checkpointer(tmp_path, model=_dense(2)).save(3)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(CheckpointMismatchError, match=r"ckpt-3: does not fit this model.*Fix: use "
                                                      r"another model dir \("):
        Checkpointer(tmp_path, model=_dense(5)).restore()
    assert sorted(os.listdir(tmp_path)) == before


def test_optional_object_missing_from_the_checkpoint(tmp_path):
    Checkpointer(tmp_path, model=_dense(2)).save(4)  # written without a data iterator
    iterator = iter(tf.data.Dataset.range(100))
    ckpt = Checkpointer(tmp_path, optional=("iterator",), model=_dense(2), iterator=iterator)
    assert ckpt.restore() == 4 and ckpt.restored == {"model"}
    assert int(next(iterator)) == 0  # untouched: the caller positions it
    ckpt.save(5)  # saved with the iterator from now on
    again = Checkpointer(tmp_path, optional=("iterator",), model=_dense(2),
                         iterator=iter(tf.data.Dataset.range(100)))
    assert again.restore() == 5 and again.restored == {"model", "iterator"}
    assert int(next(again.objects["iterator"])) == 1


def test_required_object_missing_from_the_checkpoint(tmp_path):
    Checkpointer(tmp_path, model=_dense(2)).save(4)
    with pytest.raises(CheckpointMismatchError, match=r"ckpt-4: does not fit this model"):
        Checkpointer(tmp_path, model=_dense(2), iterator=iter(tf.data.Dataset.range(3))).restore()
