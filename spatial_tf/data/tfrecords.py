"""TFRecord files of volumes: a documented schema, a writer and a reader.

Each record is a ``tf.train.Example`` with these features:

=========  ======================  ===================================================
key        type                    content
=========  ======================  ===================================================
``image``  bytes                   the volume, raw float32, little-endian, C order
``labels`` bytes                   the label mask, raw int32, little-endian, C order
``shape``  int64 list of 3         ``(depth, height, width)`` of both
=========  ======================  ===================================================

The image has no channel axis on disk; the reader adds one.

>>> import numpy as np, os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "train.tfrecord")
>>> write_tfrecords(path, [(np.ones((2, 3, 4), np.float32), np.zeros((2, 3, 4), np.int32))])
1
>>> image, labels = next(iter(tfrecord_dataset(path, num_classes=2)))
>>> image.shape.as_list(), labels.shape.as_list()
([2, 3, 4, 1], [2, 3, 4])
"""
from typing import Any, Iterable, Optional, Sequence, Tuple, Union
import os

import numpy as np
import tensorflow as tf

__all__ = ["write_tfrecords", "tfrecord_dataset", "FEATURES"]

FEATURES = {
    "image": tf.io.FixedLenFeature([], tf.string),
    "labels": tf.io.FixedLenFeature([], tf.string),
    "shape": tf.io.FixedLenFeature([3], tf.int64),
}


def write_tfrecords(path: Union[str, os.PathLike], examples: Iterable[Tuple[Any, Any]]) -> int:
    """Write ``(image, labels)`` pairs (image ``(d, h, w)`` or ``(d, h, w, 1)``) to ``path``.

    Returns the number of records written.
    """
    count = 0
    with tf.io.TFRecordWriter(os.fspath(path)) as writer:
        for i, (image, labels) in enumerate(examples):
            image = np.asarray(image, "<f4")
            labels = np.asarray(labels)
            if image.ndim == 4 and image.shape[-1] == 1:
                image = image[..., 0]
            if image.ndim != 3 or image.shape != labels.shape:
                raise ValueError(
                    f"write_tfrecords: example {i} has image shape {image.shape} and labels "
                    f"{labels.shape}; expected both (depth, height, width) and equal."
                )
            feature = {
                "image": _bytes(image.tobytes()),
                "labels": _bytes(labels.astype("<i4").tobytes()),
                "shape": tf.train.Feature(int64_list=tf.train.Int64List(value=list(image.shape))),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
            count += 1
    return count


def _bytes(value):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def tfrecord_dataset(paths: Any, num_classes: int, shape: Optional[Sequence[int]] = None, *,
                     same_shape: bool = True) -> tf.data.Dataset:
    """Unbatched ``(image (d, h, w, 1) float32, labels (d, h, w) int32)`` from TFRecords.

    ``shape`` fixes the static ``(depth, height, width)``; by default the first record's.
    A record of another shape or with a label outside ``[0, num_classes)`` stops the
    pipeline with an error saying so. With ``same_shape=False`` records may differ in
    size (unknown sizes in the element spec; ``shape`` is ignored): fit them to one
    shape with ``spatial_tf.data.crop_or_pad`` or ``pad_to_shape``.
    """
    paths = [os.fspath(paths)] if isinstance(paths, (str, os.PathLike)) else [os.fspath(p) for p in paths]
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: no such TFRecord file. Fix: check the path, or write "
                                    f"one with spatial_tf.data.write_tfrecords.")
    records = tf.data.TFRecordDataset(paths)
    if not same_shape:
        return records.map(lambda r: _parse(r, None, num_classes),
                           num_parallel_calls=tf.data.AUTOTUNE)
    if shape is None:
        try:
            first = next(iter(records.take(1)), None)
            if first is None:
                raise ValueError(f"{paths[0]}: holds no records; expected at least one.")
            shape = tuple(int(s) for s in tf.io.parse_single_example(first, FEATURES)["shape"])
        except tf.errors.OpError as e:
            raise ValueError(
                f"{paths[0]}: cannot read it as TFRecords of volumes ({e.message.splitlines()[0]}). "
                f"Expected records written by spatial_tf.data.write_tfrecords. Fix: rewrite the file."
            ) from e
    shape = tuple(shape)
    return records.map(lambda r: _parse(r, shape, num_classes), num_parallel_calls=tf.data.AUTOTUNE)


def _parse(record, shape, num_classes):
    """One record as ``(image, labels)``: of ``shape`` (checked), or its own (None)."""
    f = tf.io.parse_single_example(record, FEATURES)
    checks = []
    if shape is not None:
        checks.append(tf.debugging.assert_equal(
            f["shape"], tf.constant(shape, tf.int64),
            message=f"tfrecord_dataset: a record has a shape other than {shape}; expected one "
                    f"size for the dataset. Fix: pass same_shape=False and fit the volumes to "
                    f"one shape with spatial_tf.data.crop_or_pad or pad_to_shape"))
    with tf.control_dependencies(checks):  # checked before the reshapes can fail
        size = f["shape"] if shape is None else shape
        image = tf.reshape(tf.io.decode_raw(f["image"], tf.float32, little_endian=True), size)
        labels = tf.reshape(tf.io.decode_raw(f["labels"], tf.int32, little_endian=True), size)
    tf.debugging.assert_less(
        tf.reduce_max(labels), num_classes,
        message=f"tfrecord_dataset: a label is >= num_classes={num_classes}. Fix: pass the "
                f"model's class count or remap the labels")
    tf.debugging.assert_non_negative(labels, message="tfrecord_dataset: a label is negative")
    return image[..., None], labels
