"""fit_shape, pad_to_shape, crop_or_pad, split_multiples and fit_examples: volumes of any
size to one shape, with masks."""
import numpy as np
import pytest
import tensorflow as tf

from spatial_tf import losses
from spatial_tf.data import (crop_or_pad, fit_examples, fit_shape, pad_to_shape,
                             split_multiples)


@pytest.mark.parametrize("sizes, multiples, expected", [
    ((50, 59, 48), (8, 8, 8), (56, 64, 48)),
    ((13, 10, 9), (4, 2, 2), (16, 10, 10)),
    ((1, 1, 1), (8, 4, 2), (8, 4, 2)),
    ((16,), (16,), (16,)),
])
def test_fit_shape_is_the_smallest_multiple_at_least_the_size(sizes, multiples, expected):
    got = fit_shape(sizes, multiples)
    assert got == expected
    for size, m, g in zip(sizes, multiples, got):
        assert g % m == 0 and size <= g < size + m


@pytest.mark.parametrize("sizes, multiples, message", [
    ((13, 10), (4, 2, 2), r"sizes \(13, 10\) and multiples \(4, 2, 2\) differ in length"),
    ((13, 0, 9), (4, 2, 2), r"sizes is \(13, 0, 9\); expected ints >= 1"),
    ((13, 10, 9), (4, 2, 2.0), r"multiples is \(4, 2, 2.0\); expected ints >= 1"),
])
def test_fit_shape_refuses_bad_sizes(sizes, multiples, message):
    with pytest.raises(ValueError, match=message):
        fit_shape(sizes, multiples)


def test_pad_to_shape_pads_at_the_end_with_a_mask_of_the_volume():
    volume = np.arange(13 * 10 * 9, dtype=np.float32).reshape(13, 10, 9, 1) + 1
    padded, mask = pad_to_shape(volume, (16, 10, 12), value=-5)
    assert padded.shape == (16, 10, 12, 1) and mask.shape == (16, 10, 12)
    padded, mask = padded.numpy(), mask.numpy()
    np.testing.assert_array_equal(padded[:13, :, :9], volume)
    assert (padded[13:] == -5).all() and (padded[:, :, 9:] == -5).all()
    expected = np.zeros((16, 10, 12), np.float32)
    expected[:13, :10, :9] = 1
    np.testing.assert_array_equal(mask, expected)


def test_pad_to_shape_in_a_map_over_volumes_of_different_sizes():
    sizes = [(3, 5), (6, 2), (6, 6)]
    ds = tf.data.Dataset.from_generator(
        lambda: (np.ones(s, np.int32) for s in sizes),
        output_signature=tf.TensorSpec([None, None], tf.int32))
    ds = ds.map(lambda v: pad_to_shape(v, (6, 6), channel_axis=None))
    assert ds.element_spec[0].shape.as_list() == [6, 6]
    got = [(int(p.numpy().sum()), int(m.numpy().sum())) for p, m in ds]
    assert got == [(15, 15), (12, 12), (36, 36)]


def test_pad_to_shape_refuses_a_larger_volume():
    with pytest.raises(ValueError, match=r"axis 1 of the volume has size 7, larger than 6; "
                                         r"expected sizes up to shape \(8, 6\)"):
        pad_to_shape(np.zeros((5, 7, 1)), (8, 6))
    with pytest.raises(ValueError, match=r"shape is \(8,\); expected 2 sizes"):
        pad_to_shape(np.zeros((5, 7, 1)), (8,))
    with pytest.raises(ValueError, match=r"channel_axis is 0; expected -1"):
        pad_to_shape(np.zeros((5, 7, 1)), (8, 8), channel_axis=0)
    ds = tf.data.Dataset.from_generator(lambda: iter([np.zeros((9, 2), np.float32)]),
                                        output_signature=tf.TensorSpec([None, None]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="larger than shape"):
        list(ds.map(lambda v: pad_to_shape(v, (8, 8), channel_axis=None)))


def test_the_mask_makes_the_loss_of_the_padded_volume_the_loss_of_the_volume():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(13, 10, 9, 3)).astype(np.float32)
    labels = rng.integers(0, 3, size=(13, 10, 9)).astype(np.int32)
    padded_logits, mask = pad_to_shape(logits, (16, 12, 12), value=9.0)
    padded_labels, _ = pad_to_shape(labels, (16, 12, 12), channel_axis=None)
    plain = losses.segmentation_loss(labels[None], logits[None])
    masked = losses.segmentation_loss(padded_labels[None], padded_logits[None], mask[None])
    assert float(masked) == pytest.approx(float(plain), rel=1e-6)
    unmasked = losses.segmentation_loss(padded_labels[None], padded_logits[None])
    assert abs(float(unmasked) - float(plain)) > 0.01  # the padding would count


def _volume(shape):
    """An image whose voxels are all different and labels equal to them: a crop's values
    tell where it came from."""
    values = np.arange(np.prod(shape), dtype=np.int32).reshape(shape) + 1
    return values[..., None].astype(np.float32), values


def test_a_larger_volume_is_cropped_to_a_window_of_it():
    image, labels = _volume((9, 5, 7))
    got_image, got_labels, mask = crop_or_pad(image, labels, (4, 5, 3), seed=(0, 3))
    assert got_image.shape == (4, 5, 3, 1) and got_labels.shape == (4, 5, 3)
    got_labels = got_labels.numpy()
    np.testing.assert_array_equal(got_image.numpy()[..., 0], got_labels.astype(np.float32))
    d, h, w = np.unravel_index(got_labels[0, 0, 0] - 1, labels.shape)
    assert h == 0 and 0 <= d <= 5 and 0 <= w <= 4
    np.testing.assert_array_equal(got_labels, labels[d:d + 4, :, w:w + 3])
    assert float(tf.reduce_min(mask)) == 1.0


def test_every_window_position_is_drawn_and_the_same_seed_gives_the_same_one():
    image, labels = _volume((7, 2, 2))
    starts = set()
    for i in range(200):
        _, got, _ = crop_or_pad(image, labels, (4, 2, 2), seed=(0, i))
        starts.add(int(np.unravel_index(got.numpy()[0, 0, 0] - 1, labels.shape)[0]))
    assert starts == {0, 1, 2, 3}  # 7 - 4 + 1 positions, none outside
    a = crop_or_pad(image, labels, (4, 2, 2), seed=(5, 6))[1].numpy()
    b = crop_or_pad(image, labels, (4, 2, 2), seed=(5, 6))[1].numpy()
    np.testing.assert_array_equal(a, b)


def test_a_smaller_axis_is_padded_and_masked_while_a_larger_one_is_cropped():
    image, labels = _volume((3, 8, 4))
    got_image, got_labels, mask = crop_or_pad(image, labels, (5, 6, 4), seed=(1, 2))
    got_labels, mask = got_labels.numpy(), mask.numpy()
    assert got_labels.shape == (5, 6, 4)
    assert (got_labels[3:] == 0).all() and (got_image.numpy()[3:] == 0).all()
    expected = np.zeros((5, 6, 4), np.float32)
    expected[:3] = 1
    np.testing.assert_array_equal(mask, expected)
    h = np.unravel_index(got_labels[0, 0, 0] - 1, labels.shape)[1]
    np.testing.assert_array_equal(got_labels[:3], labels[:, h:h + 6, :])


def test_crop_or_pad_in_a_dataset_map_gives_static_shapes():
    sizes = [(3, 9, 4), (12, 2, 5)]
    ds = tf.data.Dataset.from_generator(
        lambda: (_volume(s) for s in sizes),
        output_signature=(tf.TensorSpec([None, None, None, 1]),
                          tf.TensorSpec([None, None, None], tf.int32)))
    ds = ds.enumerate().map(lambda i, ex: crop_or_pad(
        ex[0], ex[1], (8, 4, 4), seed=tf.stack([tf.constant(0, tf.int64), i])))
    assert [s.shape.as_list() for s in ds.element_spec] == [[8, 4, 4, 1], [8, 4, 4], [8, 4, 4]]
    masks = [int(m.numpy().sum()) for _, _, m in ds]
    assert masks == [3 * 4 * 4, 8 * 2 * 4]


def test_crop_or_pad_refuses_mismatched_ranks():
    with pytest.raises(ValueError, match=r"crop_or_pad: image has shape \(4, 4\) and labels "
                                         r"\(4, 4\); expected \(\*spatial, channels\)"):
        crop_or_pad(np.zeros((4, 4)), np.zeros((4, 4), np.int32), (4, 4), seed=(0, 0))


@pytest.mark.parametrize("spec, depth, expected", [
    ([1, 2, 2, 2, 1], 1, (2, 2, 2)),
    ([1, 2, 2, 2, 1], 3, (8, 8, 8)),
    ([1, 8, 1, 1, 1], 2, (16, 2, 2)),
    ([2, 1, 4, 1], 4, (8, 32)),      # 2D: [batch, h, w, channels]
])
def test_split_multiples_is_split_count_times_the_poolings(spec, depth, expected):
    assert split_multiples(spec, depth) == expected


@pytest.mark.parametrize("spec, depth, error, message", [
    ([1, 2], 1, ValueError, r"split_multiples: spec is \[1, 2\]; expected the image's "
                            r"partition dims \[batch, \*spatial, channels\], positive ints"),
    ([1, 0, 2, 1], 1, ValueError, r"split_multiples: spec is \[1, 0, 2, 1\]; expected"),
    ([1, 2.0, 2, 1], 1, ValueError, r"split_multiples: spec is \[1, 2\.0, 2, 1\]; expected"),
    ([1, 2, 2, 1], 0, ValueError, r"split_multiples: depth is 0; expected a positive int\. "
                                  r"Fix: e\.g\. depth=3\."),
    ([1, 2, 2, 1], 2.0, TypeError, r"split_multiples: depth is 2\.0 \(float\); expected a "
                                   r"positive int"),
])
def test_split_multiples_refuses_bad_input(spec, depth, error, message):
    with pytest.raises(error, match=message):
        split_multiples(spec, depth)


def _odd_volumes(sizes):
    return tf.data.Dataset.from_generator(
        lambda: (_volume(s) for s in sizes),
        output_signature=(tf.TensorSpec([None, None, None, 1]),
                          tf.TensorSpec([None, None, None], tf.int32)))


def test_fit_examples_pads_smaller_and_crops_larger_volumes_with_masks():
    ds = fit_examples(_odd_volumes([(3, 9, 4), (12, 2, 5)]), (8, 4, 4), seed=5)
    assert [s.shape.as_list() for s in ds.element_spec] == [[8, 4, 4, 1], [8, 4, 4], [8, 4, 4]]
    got = list(ds)
    assert [int(m.numpy().sum()) for _, _, m in got] == [3 * 4 * 4, 8 * 2 * 4]
    # the windows are crop_or_pad's with seed (seed, index): the same as by hand
    for i, ((image, labels), (fit_image, fit_labels, _)) in enumerate(
            zip(_odd_volumes([(3, 9, 4), (12, 2, 5)]), got)):
        by_hand = crop_or_pad(image, labels, (8, 4, 4), seed=(5, i))
        np.testing.assert_array_equal(fit_image.numpy(), by_hand[0].numpy())
        np.testing.assert_array_equal(fit_labels.numpy(), by_hand[1].numpy())


def test_fit_examples_resumed_at_first_crops_as_the_uninterrupted_stream():
    sizes = [(12, 9, 9), (10, 11, 9), (13, 9, 12)]
    whole = [x[0].numpy() for x in fit_examples(_odd_volumes(sizes), (8, 8, 8), seed=1)]
    later = [x[0].numpy() for x in fit_examples(_odd_volumes(sizes[1:]), (8, 8, 8), seed=1,
                                                first=1)]
    for a, b in zip(whole[1:], later, strict=True):
        np.testing.assert_array_equal(a, b)
    other_seed = [x[0].numpy() for x in fit_examples(_odd_volumes(sizes), (8, 8, 8), seed=2)]
    assert any(not np.array_equal(a, b) for a, b in zip(whole, other_seed))


def test_fit_examples_without_crop_pads_only_and_refuses_a_larger_volume():
    (image, labels, mask), = fit_examples(_odd_volumes([(3, 4, 2)]), (4, 4, 4), crop=False)
    np.testing.assert_array_equal(image.numpy()[:3, :, :2], _volume((3, 4, 2))[0])
    assert float(tf.reduce_sum(image[3:])) == 0 and int(mask.numpy().sum()) == 3 * 4 * 2
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"pad_to_shape: a volume is larger than shape \(4, 4, 4\)"):
        list(fit_examples(_odd_volumes([(5, 4, 2)]), (4, 4, 4), crop=False))


def test_fit_examples_refuses_elements_that_are_not_pairs():
    triples = tf.data.Dataset.from_tensors((tf.zeros([4, 4, 1]), tf.zeros([4, 4], tf.int32),
                                            tf.ones([4, 4])))
    with pytest.raises(ValueError, match=r"fit_examples: the dataset's elements are .*; expected "
                                         r"unbatched \(image, labels\) pairs\. Fix: map it"):
        fit_examples(triples, (4, 4))
