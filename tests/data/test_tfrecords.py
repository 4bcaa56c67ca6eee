"""TFRecord writer and reader: the documented schema, round trips, bad records."""
import numpy as np
import pytest
import tensorflow as tf

from spatial_tf.data import FEATURES, synthetic_ct, tfrecord_dataset, write_tfrecords


def test_round_trip_and_schema(tmp_path):
    examples = [synthetic_ct((8, 10, 12), seed=s) for s in range(3)]
    path = tmp_path / "train.tfrecord"
    assert write_tfrecords(path, examples) == 3
    ds = tfrecord_dataset(path, num_classes=3)
    assert [s.shape.as_list() for s in ds.element_spec] == [[8, 10, 12, 1], [8, 10, 12]]
    for (image, labels), (want_image, want_labels) in zip(ds, examples):
        np.testing.assert_array_equal(image, want_image)
        np.testing.assert_array_equal(labels, want_labels)
    # the schema, read with plain TensorFlow
    record = next(iter(tf.data.TFRecordDataset(str(path))))
    parsed = tf.io.parse_single_example(record, FEATURES)
    assert parsed["shape"].numpy().tolist() == [8, 10, 12]
    raw = np.frombuffer(parsed["labels"].numpy(), "<i4").reshape(8, 10, 12)
    np.testing.assert_array_equal(raw, examples[0][1])


def test_bad_records(tmp_path):
    path = tmp_path / "mixed.tfrecord"
    write_tfrecords(path, [(np.zeros((2, 2, 2)), np.zeros((2, 2, 2), int)),
                           (np.zeros((2, 2, 3)), np.zeros((2, 2, 3), int))])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"a record has a shape other than \(2, 2, 2\)"):
        list(tfrecord_dataset(path, num_classes=2))
    path = tmp_path / "labels.tfrecord"
    write_tfrecords(path, [(np.zeros((2, 2, 2)), np.full((2, 2, 2), 5))])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"a label is >= num_classes=2"):
        list(tfrecord_dataset(path, num_classes=2))


def test_missing_corrupt_and_mismatched(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"none\.tfrecord: no such TFRecord file"):
        tfrecord_dataset(tmp_path / "none.tfrecord", 2)
    (tmp_path / "junk.tfrecord").write_bytes(b"\x01" * 64)
    with pytest.raises(ValueError, match=r"junk\.tfrecord: cannot read it as TFRecords of volumes"):
        tfrecord_dataset(tmp_path / "junk.tfrecord", 2)
    with pytest.raises(ValueError, match=r"example 0 has image shape \(2, 2, 2\) and labels \(2, 2\)"):
        write_tfrecords(tmp_path / "x.tfrecord", [(np.zeros((2, 2, 2)), np.zeros((2, 2)))])


def test_records_of_different_sizes(tmp_path):
    examples = [synthetic_ct(shape, seed=1) for shape in ((8, 10, 12), (13, 10, 9))]
    path = tmp_path / "mixed.tfrecord"
    write_tfrecords(path, examples)
    ds = tfrecord_dataset(path, num_classes=3, same_shape=False)
    assert [s.shape.as_list() for s in ds.element_spec] == [[None, None, None, 1],
                                                            [None, None, None]]
    for (image, labels), (want_image, want_labels) in zip(ds, examples):
        np.testing.assert_array_equal(image, want_image)
        np.testing.assert_array_equal(labels, want_labels)
    with pytest.raises(tf.errors.InvalidArgumentError, match="a record has a shape other than"):
        list(tfrecord_dataset(path, num_classes=3))
