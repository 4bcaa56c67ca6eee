import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.summarize import layout_rows


def test_summary_rows_and_bytes():
    inputs = (
        {"image": tf.TensorSpec([8, 256, 256, 3]), "image_mask": tf.TensorSpec([8, 256, 256, 1], tf.uint8)},
        tf.TensorSpec([8], tf.int64),
    )
    spec = [{"image": [1, 4, 1, 1], "image_mask": [1, 2, 2, 1]}, [1]]
    text = spatial_tf.summary(spec, inputs, num_cores_per_replica=4)
    lines = text.splitlines()
    assert lines[0].split() == ["path", "global", "shape", "dtype", "spec", "shard", "shape", "bytes/core"]
    image = next(l for l in lines if l.startswith("features['image'] "))
    assert "(8, 256, 256, 3)" in image and "Tile(1, 4, 1, 1)" in image and "(8, 64, 256, 3)" in image
    assert image.endswith("1.5 MiB")  # 8*64*256*3*4 bytes
    mask = next(l for l in lines if l.startswith("features['image_mask']"))
    assert "(8, 128, 128, 1)" in mask and mask.endswith("128.0 KiB")
    assert next(l for l in lines if l.startswith("labels")).endswith("64 B")
    assert lines[-1].startswith("total per core") and lines[-1].endswith("1.6 MiB")


def test_layout_rows_exact_bytes_and_assign_and_unknown():
    rows = layout_rows(
        [spatial_tf.Assign(2), None],
        (tf.TensorSpec([4, 10], tf.float16), tf.TensorSpec([None, 3])),
        4,
    )
    assert rows[0]["bytes_per_core"] == 80 and rows[0]["leaf"] == spatial_tf.Assign(2)
    assert rows[1]["bytes_per_core"] is None
    text = spatial_tf.summary([spatial_tf.Assign(2), None],
                              (tf.TensorSpec([4, 10], tf.float16), tf.TensorSpec([None, 3])), 4)
    assert "80 B (core 2)" in text and "(?, 3)" in text
    assert text.splitlines()[-1].endswith("?")


def test_summary_validates_first():
    with pytest.raises(ValueError, match=r"inputs: axis 1 has size 5"):
        spatial_tf.summary([1, 2], tf.TensorSpec([2, 5]), 2)
