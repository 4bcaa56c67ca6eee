import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.summarize import core_totals, layout_rows


def test_summary_rows_and_bytes():
    inputs = (
        {"image": tf.TensorSpec([8, 256, 256, 3]), "image_mask": tf.TensorSpec([8, 256, 256, 1], tf.uint8)},
        tf.TensorSpec([8], tf.int64),
    )
    spec = [{"image": [1, 4, 1, 1], "image_mask": [1, 2, 2, 1]}, [1]]
    text = spatial_tf.summary(inputs, spec, num_cores_per_replica=4)
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
    inputs = (tf.TensorSpec([4, 10], tf.float16), tf.TensorSpec([None, 3]))
    rows = layout_rows(inputs, [spatial_tf.Assign(2), None], 4)
    assert rows[0]["bytes_per_core"] == 80 and rows[0]["leaf"] == spatial_tf.Assign(2)
    assert rows[1]["bytes_per_core"] is None
    text = spatial_tf.summary(inputs, [spatial_tf.Assign(2), None], 4)
    assert "80 B (core 2)" in text and "(?, 3)" in text
    assert core_totals(rows, 4) == [None] * 4
    assert text.splitlines()[-1].split() == ["most", "on", "one", "core", "?"]


def test_totals_are_true_for_every_core_with_assigned_tensors():
    x = tf.TensorSpec([1024], tf.float32)  # 4 KiB
    image = tf.TensorSpec([2, 8, 8, 4], tf.float32)  # 2 KiB, split over 2 cores: 1 KiB each
    inputs = {"a": x, "b": x, "c": x, "image": image}
    spec = {"a": spatial_tf.Assign(0), "b": spatial_tf.Assign(1), "c": spatial_tf.Assign(1),
            "image": spatial_tf.PartialTile(1, 2, 1, 1)}
    rows = layout_rows(inputs, spec, 4)
    assert core_totals(rows, 4) == [5 * 1024, 9 * 1024, 1024, 1024]
    lines = spatial_tf.summary(inputs, spec, 4).splitlines()[-4:]
    assert [l.rsplit("  ", 1)[0].strip() for l in lines] == [
        "total on core 0", "total on core 1", "total on cores 2-3", "most on one core"]
    assert [l.rsplit(" ", 2)[-2:] for l in lines] == [
        ["5.0", "KiB"], ["9.0", "KiB"], ["1.0", "KiB"], ["9.0", "KiB"]]


def test_one_assigned_core_among_two_lists_the_other_core():
    x = tf.TensorSpec([256], tf.float32)
    text = spatial_tf.summary((x, x), [spatial_tf.Assign(1), None], 2)
    assert [" ".join(l.split()) for l in text.splitlines()[-3:]] == [
        "total on core 1 2.0 KiB", "total on core 0 1.0 KiB", "most on one core 2.0 KiB"]


def test_summary_validates_first():
    with pytest.raises(ValueError, match=r"inputs: axis 1 has size 5"):
        spatial_tf.summary(tf.TensorSpec([2, 5]), [1, 2], 2)


def test_spec_first_order_is_refused():
    inputs = {"image": tf.TensorSpec([2, 8, 8, 3])}
    spec = {"image": [1, 2, 1, 1]}
    with pytest.raises(TypeError, match=r"spatial_tf\.summary\(spec, inputs, \.\.\.\): the first "
                       r"argument is a spec .* the order is summary\(inputs, spec, \.\.\.\)"):
        spatial_tf.summary(spec, inputs, 2)
    assert "(2, 4, 8, 3)" in spatial_tf.summary(inputs, spec, 2)
