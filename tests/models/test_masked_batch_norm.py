"""UNetOptions(masked_batch_norm=True): zero padding stays out of batch norm's statistics."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf import data, train
from spatial_tf.models import UNetOptions, unet3d
from spatial_tf.steps import run_model, takes_mask

OPTIONS = dict(num_classes=3, depth=2, base_filters=2, dtype_policy="float64")
# Keras' masked moments divide by (number of real voxels + 1e-7): against the plain mean
# that is a relative difference of 1e-7 / voxels, e.g. 7e-10 for 144 voxels
RTOL = 1e-7
# float64 max pooling has no TensorFlow CPU kernel outside XLA: a strided convolution here
DOWN = "conv"


def _models(shape):
    """A masked and a plain U-Net of ``shape`` with the same weights; momentum 0, so a
    training call leaves the batch's statistics in the moving averages."""
    masked = unet3d(shape + (1,), options=UNetOptions(masked_batch_norm=True, norm_momentum=0.0,
                                                      downsample=DOWN), **OPTIONS)
    plain = unet3d(shape + (1,), options=UNetOptions(norm_momentum=0.0, downsample=DOWN),
                   **OPTIONS)
    plain.set_weights(masked.get_weights())
    return masked, plain


def _image(shape, seed=0):
    return np.random.default_rng(seed).normal(size=(1,) + shape + (1,))


def test_the_mask_is_a_second_input_and_the_weights_are_the_plain_models():
    masked, plain = _models((8, 8, 8))
    assert [t.name for t in masked.inputs] == ["image", "mask"] and takes_mask(masked)
    assert not takes_mask(plain)
    assert [(w.path, w.shape) for w in masked.weights] == [(w.path, w.shape) for w in plain.weights]


def test_first_batch_norm_sees_the_volumes_statistics_not_the_paddings():
    volume = _image((6, 4, 6))
    padded, mask = data.pad_to_shape(volume[0], (8, 8, 8))
    masked, plain = _models((8, 8, 8))
    _, alone = _models((6, 4, 6))   # the unpadded volume (the convolution is 'same')
    alone.set_weights(masked.get_weights())
    alone(volume, training=True)
    masked([padded[None], mask[None]], training=True)
    plain(padded[None], training=True)
    layer = "down0_bn1"
    expected = alone.get_layer(layer).moving_mean.numpy()
    np.testing.assert_allclose(masked.get_layer(layer).moving_mean.numpy(), expected,
                               rtol=RTOL, atol=1e-12)
    np.testing.assert_allclose(masked.get_layer(layer).moving_variance.numpy(),
                               alone.get_layer(layer).moving_variance.numpy(),
                               rtol=RTOL, atol=1e-12)
    # without the mask the padding's zeros pull the mean toward the convolution of zeros
    assert np.max(np.abs(plain.get_layer(layer).moving_mean.numpy() - expected)) > 1e-3


def test_a_mask_of_ones_gives_the_plain_models_output_and_statistics():
    masked, plain = _models((8, 8, 8))
    image = _image((8, 8, 8), seed=1)
    out_masked = masked([image, np.ones((1, 8, 8, 8))], training=True).numpy()
    out_plain = plain(image, training=True).numpy()
    np.testing.assert_allclose(out_masked, out_plain, rtol=1e-5, atol=1e-8)  # 512 voxels
    for layer in ("down0_bn2", "bottom_bn1", "up0_bn2"):
        np.testing.assert_allclose(masked.get_layer(layer).moving_mean.numpy(),
                                   plain.get_layer(layer).moving_mean.numpy(),
                                   rtol=RTOL, atol=1e-11)


def test_the_mask_is_pooled_to_each_level():
    masked, _ = _models((8, 8, 8))
    mask = np.zeros((1, 8, 8, 8))
    mask[0, :3, :8, :5] = 1   # real voxels 0-2, 0-7, 0-4
    probe = keras.Model(masked.inputs, masked.get_layer("mask1").output)
    level1 = probe([np.zeros((1, 8, 8, 8, 1)), mask]).numpy()[0]
    expected = np.zeros((4, 4, 4))
    expected[:2, :4, :3] = 1   # a coarse voxel is real when any voxel it pools is
    np.testing.assert_array_equal(level1, expected)


def test_the_train_step_passes_the_batchs_mask():
    volume = _image((6, 4, 6), seed=2)
    padded, mask = data.pad_to_shape(volume[0], (8, 8, 8))
    labels = tf.zeros([1, 8, 8, 8], tf.int32)
    masked, _ = _models((8, 8, 8))
    _, alone = _models((6, 4, 6))
    alone.set_weights(masked.get_weights())
    step = train.make_train_step(masked, keras.optimizers.SGD(0.0))
    step((padded[None], labels, mask[None]))
    alone(volume, training=True)
    np.testing.assert_allclose(masked.get_layer("down0_bn1").moving_mean.numpy(),
                               alone.get_layer("down0_bn1").moving_mean.numpy(),
                               rtol=RTOL, atol=1e-12)
    # without a mask in the batch, run_model gives the model a mask of ones: in training
    # mode its statistics are then the plain model's over every voxel
    fresh, plain = _models((8, 8, 8))
    out = run_model(fresh, padded[None], None, training=True).numpy()
    np.testing.assert_allclose(out, plain(padded[None], training=True).numpy(), rtol=1e-5,
                               atol=1e-8)
    assert run_model(plain, padded[None], mask[None], training=True).shape == out.shape


@pytest.mark.emulator
def test_split_over_the_emulator_equals_unpartitioned_in_float64():
    volume = _image((6, 4, 6), seed=3)
    padded, mask = data.pad_to_shape(volume[0], (8, 8, 8))
    spec = [[1, 2, 1, 1, 1], [1, 2, 1, 1]]
    emulator = spatial_tf.Emulator(2)
    with emulator.scope():
        split_model, _ = _models((8, 8, 8))
    reference, _ = _models((8, 8, 8))
    reference.set_weights(split_model.get_weights())

    @tf.function
    def run(image, mask):
        return emulator.run(lambda x, m: split_model(spatial_tf.split([x, m], spec),
                                                     training=True), args=(image, mask))

    got = emulator.experimental_local_results(run(padded[None], mask[None]))[0].numpy()
    expected = reference([padded[None], mask[None]], training=True).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(split_model.get_layer("up0_bn2").moving_mean.numpy(),
                               reference.get_layer("up0_bn2").moving_mean.numpy(),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("options, message", [
    (dict(masked_batch_norm=True, batch_norm=False),
     r"UNetOptions: masked_batch_norm=True with batch_norm=False, padding='same'; expected "
     r"batch_norm=True and padding='same'"),
    (dict(masked_batch_norm=True, padding="valid"),
     r"masked_batch_norm=True with batch_norm=True, padding='valid'; expected"),
])
def test_masked_batch_norm_needs_batch_norm_and_same_padding(options, message):
    with pytest.raises(ValueError, match=message):
        UNetOptions(**options)


def test_masked_batch_norm_is_a_bool():
    with pytest.raises(TypeError, match=r"UNetOptions: masked_batch_norm is 1; expected True or "
                                        r"False"):
        UNetOptions(masked_batch_norm=1)
