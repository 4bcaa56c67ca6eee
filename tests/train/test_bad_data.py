"""train() on bad data: refused before anything is written to the model dir, in one line,
and a --nonfinite replacement said once per file."""
import logging
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from spatial_tf import data, train
from spatial_tf.models import unet3d

OPTIONS = train.TrainOptions(progress=False, checkpoint_every=1)


def _model():
    keras.utils.set_random_seed(0)
    return unet3d((8, 8, 8, 1), num_classes=3, depth=2, base_filters=2), \
        keras.optimizers.SGD(0.05)


def _pair(folder, nan=True):
    image, labels = data.synthetic_ct((8, 8, 8), seed=0)
    image = image[..., 0].copy()
    if nan:
        image[0, 0, 0], image[1, 2, 3] = np.nan, -np.inf
    pair = os.path.join(folder, "ct.npy"), os.path.join(folder, "ct_labels.npy")
    np.save(pair[0], image)
    np.save(pair[1], labels)
    return pair


def _batches(ds):
    return ds.map(lambda image, labels: (image, labels, tf.ones(labels.shape))).repeat().batch(1)


def _contents(folder):
    return {name: os.path.getmtime(os.path.join(folder, name)) for name in os.listdir(folder)}


def test_a_volume_dataset_of_a_bad_file_stops_train_before_it_writes(tmp_path):
    pair = _pair(str(tmp_path))
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "notes.txt").write_text("mine")
    before = _contents(model_dir)
    model, optimizer = _model()
    with pytest.raises(ValueError) as e:   # the dataset is made (and checked) in train()
        train.train(tf.distribute.get_strategy(), model, optimizer,
                    lambda done: _batches(data.volume_dataset([pair], 3)), steps=2,
                    model_dir=model_dir, options=OPTIONS)
    assert str(e.value) == (
        f"{pair[0]}: 2 of 512 voxels are not finite (1 NaN, 1 infinite); expected finite "
        f"intensities. Fix: repair the file, or replace them by a value you choose: "
        f"read_volume(path, nonfinite=0.0), or --nonfinite 0 on the command line.")
    assert _contents(model_dir) == before


def test_a_pipeline_failing_in_the_first_step_is_one_line_and_writes_nothing(tmp_path):
    pair = _pair(str(tmp_path))

    def read():   # a pipeline of one's own, unchecked: it fails in the step
        yield data.load_example(*pair, num_classes=3)

    ds = tf.data.Dataset.from_generator(read, output_signature=(
        tf.TensorSpec([8, 8, 8, 1], tf.float32), tf.TensorSpec([8, 8, 8], tf.int32)))
    model, optimizer = _model()
    model_dir = tmp_path / "model"
    with pytest.raises(ValueError) as e:
        train.train(tf.distribute.get_strategy(), model, optimizer, _batches(ds), steps=2,
                    model_dir=model_dir, options=OPTIONS)
    assert str(e.value) == (
        f"train: step 1: the dataset raised ValueError: {pair[0]}: 2 of 512 voxels are not "
        f"finite (1 NaN, 1 infinite); expected finite intensities. Fix: repair the file, or "
        f"replace them by a value you choose: read_volume(path, nonfinite=0.0), or "
        f"--nonfinite 0 on the command line.")
    assert e.value.__suppress_context__   # no 75-line TensorFlow error chained to it
    assert not model_dir.exists() or os.listdir(model_dir) == []   # no events file either


def test_replaced_voxels_are_said_once_over_every_step(tmp_path, caplog):
    pair = _pair(str(tmp_path))
    model, optimizer = _model()
    with caplog.at_level(logging.WARNING, logger="spatial_tf"):
        last = train.train(tf.distribute.get_strategy(), model, optimizer,
                           lambda done: _batches(data.volume_dataset([pair], 3, nonfinite=0.0)),
                           steps=3, model_dir=tmp_path / "model", options=OPTIONS)
    assert last["step"] == 3 and np.isfinite(last["loss"])
    notices = [r.getMessage() for r in caplog.records if "replaced by" in r.getMessage()]
    assert notices == [f"spatial_tf: {pair[0]}: 2 NaN or infinite voxels replaced by 0.0 "
                       f"(--nonfinite)."]
