"""Sliding-window inference: tile positions, blend weights, tiled against whole-volume
prediction (voxel-wise models, a U-Net, tiles split over emulated cores), every error."""
import itertools
import math
import re
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import spatial_tf
from spatial_tf.models import unet3d
from spatial_tf.models.sliding_window import (blend_weights, sliding_window_predict,
                                              tile_positions)

TILE = (16, 16, 16)


# ---------------------------------------------------------------- tile positions

@pytest.mark.parametrize("volume, tile, overlap, starts", [
    ((32,), (16,), 0.25, [0, 12, 16]),     # stride 12; the last tile shifted back to end at 32
    ((32,), (16,), 0.0, [0, 16]),
    ((32,), (16,), 0.5, [0, 8, 16]),
    ((40,), (16,), 0.0, [0, 16, 24]),      # 40 is no multiple of 16: the last overlaps
    ((17,), (16,), 0.0, [0, 1]),
    ((10,), (16,), 0.5, [0]),              # smaller than the tile: one (padded) tile
    ((16,), (16,), 0.75, [0]),             # equal to the tile: one tile, whatever the overlap
    ((19,), (16,), 0.9, [0, 1, 2, 3]),     # 16 * 0.1 = 1.6: stride 1
    ((24,), (20,), 0.9, [0, 2, 4]),        # 20 * (1 - 0.9) = 1.9999999999999996: stride 2
    ((24,), (10,), 0.3, [0, 7, 14]),       # 10 * 0.7 = 7.000000000000001: stride 7
])
def test_tile_positions_along_one_axis(volume, tile, overlap, starts):
    assert tile_positions(volume, tile, overlap) == [(s,) for s in starts]


def test_tile_positions_in_several_axes_are_in_c_order():
    assert tile_positions((24, 24), (16, 16), 0.5) == [(0, 0), (0, 8), (8, 0), (8, 8)]
    assert tile_positions((32, 16, 8), TILE, 0.5) == [(0, 0, 0), (8, 0, 0), (16, 0, 0)]
    assert tile_positions((32, 32, 16), TILE, 0.25) == [
        (a, b, 0) for a in (0, 12, 16) for b in (0, 12, 16)]


@pytest.mark.parametrize("overlap", [0.0, 0.25, 0.5, 0.8])
def test_tiles_cover_every_voxel_inside_the_volume_with_at_most_the_stride_between(overlap):
    for size, tile in itertools.product([1, 7, 16, 23, 64, 100], [4, 16, 33]):
        starts = [s for (s,) in tile_positions((size,), (tile,), overlap)]
        covered = np.zeros(max(size, tile), bool)
        for s in starts:
            covered[s:s + tile] = True
        assert covered.all() and starts[0] == 0 and starts == sorted(set(starts))
        assert starts[-1] + tile == max(size, tile)  # the last tile ends at the edge
        stride = max(1, math.floor(tile * (1 - overlap) + 1e-9))
        assert all(0 < b - a <= stride for a, b in zip(starts, starts[1:]))


# ---------------------------------------------------------------- blend weights

def test_blend_weights_by_hand():
    np.testing.assert_array_equal(blend_weights((4,), "linear"), [0.5, 1, 1, 0.5])
    np.testing.assert_allclose(blend_weights((5,), "linear"), np.array([1, 2, 3, 2, 1]) / 3,
                               rtol=1e-7)
    assert blend_weights((3, 2), "constant").tolist() == [[1, 1], [1, 1], [1, 1]]
    # sigma 16 / 8 = 2 around 7.5: exp(-(7.5^2 - 0.5^2) / (2 * 2^2)) = exp(-7) at the border
    g = blend_weights((16,), "gaussian")
    assert g.dtype == np.float32 and g.max() == g[7] == g[8] == 1.0
    np.testing.assert_allclose(g[[0, 15]], math.exp(-7), rtol=1e-6)
    np.testing.assert_allclose(g[[3, 12]], math.exp(-(4.5**2 - 0.25) / 8), rtol=1e-6)
    cube = blend_weights(TILE, "gaussian")  # a product of the per-axis maps
    assert cube.shape == TILE and cube.dtype == np.float32
    np.testing.assert_allclose(cube[0, 0, 0], math.exp(-21), rtol=1e-5)
    np.testing.assert_allclose(cube[2, 9, 15], g[2] * g[9] * g[15], rtol=1e-6)
    assert cube.min() > 0


# ---------------------------------------------------------------- voxel-wise models

def _voxelwise_model(channels=2, classes=3):
    keras.utils.set_random_seed(1)
    inputs = keras.Input((None, None, None, channels))
    logits = keras.layers.Conv3D(classes, 1)(inputs)
    return keras.Model(inputs, keras.layers.Softmax()(logits))


@pytest.mark.parametrize("blend", ["gaussian", "linear", "constant"])
@pytest.mark.parametrize("overlap, batch_size", [(0.25, 1), (0.5, 3), (0.0, 2)])
def test_a_voxelwise_model_gives_the_whole_volume_result_everywhere(blend, overlap,
                                                                     batch_size):
    model = _voxelwise_model()
    # axis 0: 3 to 4 tiles, axis 1 equal to the tile, axis 2 smaller than it (padded)
    volume = np.random.default_rng(0).normal(size=(40, 16, 9, 2)).astype(np.float32)
    whole = model.predict_on_batch(volume[None])[0]
    tiled = sliding_window_predict(model.predict_on_batch, volume, TILE, overlap=overlap,
                                   blend=blend, batch_size=batch_size)
    assert tiled.shape == (40, 16, 9, 3) and tiled.dtype == np.float32
    np.testing.assert_allclose(tiled, whole, rtol=1e-5, atol=1e-6)


def test_the_tiles_predict_fn_gets_hold_the_volume_padded_with_zeros():
    seen = []

    def double(batch):
        seen.append(batch.copy())
        return 2 * batch

    volume = np.arange(40 * 16 * 9, dtype=np.float64).reshape(40, 16, 9, 1) + 1
    scores = sliding_window_predict(double, volume, TILE, overlap=0.5, batch_size=2)
    # the float64 scores of a float64 volume, exact but for the division by the weights
    assert scores.dtype == np.float64
    np.testing.assert_allclose(scores, 2 * volume, rtol=1e-12)
    # starts 0, 8, 16, 24 along axis 0: 4 tiles in 2 batches of 2, each 16 x 16 x 16
    assert [b.shape for b in seen] == [(2, 16, 16, 16, 1)] * 2
    tiles = np.concatenate(seen)
    for tile, start in zip(tiles, (0, 8, 16, 24)):
        np.testing.assert_array_equal(tile[:, :, :9], volume[start:start + 16])
        assert not tile[:, :, 9:].any()  # the zero padding of the 9-voxel axis


def test_the_last_batch_is_filled_up_to_batch_size_and_the_filler_dropped():
    seen = []

    def plus_one(batch):
        seen.append(batch.shape[0])
        return batch + 1

    volume = np.zeros((32, 32, 16, 1), np.float32)  # 3 x 3 tiles at overlap 0.25
    scores = sliding_window_predict(plus_one, volume, TILE, batch_size=4)
    assert seen == [4, 4, 4]  # 9 tiles: 4 + 4 + 1 and 3 zero tiles
    np.testing.assert_array_equal(scores, np.ones_like(volume))


def test_scores_are_a_weighted_mean_of_the_tiles():
    # a predict_fn whose tiles disagree: each tile says how many tiles came before it
    calls = []

    def tile_index(batch):
        calls.append(None)
        return np.full(batch.shape[:-1] + (1,), len(calls) - 1, np.float32)

    volume = np.zeros((24, 1), np.float32)
    scores = sliding_window_predict(tile_index, volume, (16,), overlap=0.5, blend="linear")
    # tiles at 0 and 8; linear weights of voxel i in a 16-tile: min(i + 1, 16 - i) / 8
    w = np.minimum(np.arange(16) + 1, 16 - np.arange(16)) / 8
    expected = np.zeros(24)
    expected[8:16] = w[:8] / (w[8:] + w[:8])  # tile 1's share where both cover
    expected[16:] = 1
    np.testing.assert_allclose(scores[:, 0], expected, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------- a 3D U-Net

def _unet_pair(depth, volume_shape):
    """The same tiny U-Net for one tile and for the whole volume (same weights), with
    batch-norm statistics far from the identity so that they count."""
    keras.utils.set_random_seed(2)
    options = dict(num_classes=3, depth=depth, base_filters=4)
    tiled, whole = unet3d(TILE + (1,), **options), unet3d(volume_shape + (1,), **options)
    rng = np.random.default_rng(3)
    for layer in tiled.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            n = layer.moving_mean.shape[0]
            layer.moving_mean.assign(rng.normal(0, 0.3, n).astype(np.float32))
            layer.moving_variance.assign(rng.uniform(0.5, 2, n).astype(np.float32))
    whole.set_weights(tiled.get_weights())
    return tiled, whole


def _interior(volume_shape, tile_shape, overlap, margin):
    """Voxels every covering tile holds at least ``margin`` voxels from each of its
    borders inside the volume (a border on the volume's edge pads as the whole volume
    does), and how many tiles cover each voxel."""
    inside = np.ones(volume_shape, bool)
    covers = np.zeros(volume_shape, int)
    for start in tile_positions(volume_shape, tile_shape, overlap):
        window = tuple(slice(s, s + t) for s, t in zip(start, tile_shape))
        ok = np.ones(tile_shape, bool)
        for axis, (s, t, size) in enumerate(zip(start, tile_shape, volume_shape)):
            index = np.arange(t)
            good = np.ones(t, bool)
            if s > 0:
                good &= index >= margin
            if s + t < size:
                good &= index <= t - 1 - margin
            ok &= good.reshape([-1 if a == axis else 1 for a in range(len(tile_shape))])
        inside[window] &= ok
        covers[window] += 1
    return inside, covers


# receptive field radius of a 'same' U-Net's output voxel, in input voxels: depth 1 has
# two 3x3x3 convolutions (2); depth 2 two before the 2x pooling (2), two at half
# resolution (2 x 2 = 4, plus 1 for the pooling window's other half), the transposed
# convolution's 2x2x2 window (1) and two after it (2): 9
@pytest.mark.parametrize("depth, margin, blend", [
    (1, 2, "gaussian"), (1, 2, "linear"), (1, 2, "constant"), (2, 9, "gaussian")])
def test_unet_tiles_match_the_whole_volume_in_the_blended_interior(depth, margin, blend):
    volume_shape = (32, 32, 16)  # 4 tiles' voxels; starts 0, 12, 16 on axes 0 and 1
    tiled_model, whole_model = _unet_pair(depth, volume_shape)
    volume = np.random.default_rng(4).normal(size=volume_shape + (1,)).astype(np.float32)
    whole = whole_model.predict_on_batch(volume[None])[0]
    tiled = sliding_window_predict(tiled_model.predict_on_batch, volume, TILE, blend=blend)
    assert tiled.shape == whole.shape == volume_shape + (3,)

    inside, covers = _interior(volume_shape, TILE, 0.25, margin)
    # by hand, per axis of 32 (tiles [0, 16), [12, 28), [16, 32)): depth 1 keeps 0-11
    # (tile 0 alone), 18-25 (tiles 12 and 16 both, blended) and 28-31 (tile 16 alone);
    # depth 2 keeps 0-6 and 28-31
    keep = [*range(0, 12), *range(18, 26), *range(28, 32)] if depth == 1 else \
        [*range(0, 7), *range(28, 32)]
    axis = np.isin(np.arange(32), keep)
    np.testing.assert_array_equal(inside, axis[:, None, None] & axis[None, :, None]
                                  & np.ones((1, 1, 16), bool))
    if depth == 1:
        assert (inside & (covers == 4)).sum() == 8 * 8 * 16  # blended from 4 tiles
    np.testing.assert_allclose(tiled[inside], whole[inside], rtol=1e-5, atol=1e-5)
    assert (tiled.argmax(-1) == whole.argmax(-1))[inside].all()
    # the seams are real: outside the interior the tiles see other context
    assert np.abs(tiled - whole)[~inside].max() > 1e-3


# ---------------------------------------------------------------- tiles split over cores

@pytest.mark.emulator
def test_tiles_split_over_two_emulated_cores_give_the_unsplit_result():
    tiled_model, _ = _unet_pair(2, (32, 32, 16))
    emulator = spatial_tf.Emulator(num_cores_per_replica=2)

    def step(tiles):
        return tiled_model(spatial_tf.split(tiles, [1, 2, 1, 1, 1]), training=False)

    volume = np.random.default_rng(5).normal(size=(32, 32, 16, 1)).astype(np.float32)
    split = sliding_window_predict(lambda x: emulator.run(step, args=(tf.constant(x),)),
                                   volume, TILE, overlap=0.5)
    unsplit = sliding_window_predict(tiled_model.predict_on_batch, volume, TILE, overlap=0.5)
    np.testing.assert_allclose(split, unsplit, rtol=1e-5, atol=1e-5)
    assert (split.argmax(-1) == unsplit.argmax(-1)).mean() > 0.999
    # each core holds half a tile's scores: 16 x 16 x 16 voxels x 3 classes x 4 bytes / 2
    compiled = emulator.compile(step, args=(tf.zeros((1,) + TILE + (1,)),))
    assert compiled.memory()["output"] == 16 * 16 * 16 * 3 * 4 // 2


# ---------------------------------------------------------------- progress

def test_progress_bar_counts_the_tiles(capsys):
    sliding_window_predict(lambda x: x, np.zeros((32, 16, 16, 1), np.float32), TILE,
                           overlap=0.5, progress=True)
    err = capsys.readouterr().err
    assert "sliding window" in err and "3/3" in err


def test_progress_without_tqdm(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    with pytest.raises(ImportError, match=re.escape(
            "sliding_window_predict: progress=True needs tqdm, which is not installed. Fix: "
            "pip install 'spatial-tf[train]', or progress=False.")):
        sliding_window_predict(lambda x: x, np.zeros((16, 16, 16, 1)), TILE, progress=True)


# ---------------------------------------------------------------- errors

VOLUME = np.zeros((32, 32, 16, 1), np.float32)


def _raises(error, message, fn, *args, **kwargs):
    with pytest.raises(error) as e:
        fn(*args, **kwargs)
    assert str(e.value) == message and "\n" not in str(e.value)


def test_predict_fn_must_be_callable():
    _raises(TypeError,
            "sliding_window_predict: predict_fn is str; expected a function from a batch of "
            "tiles (batch, *tile_shape, channels) to class scores (batch, *tile_shape, "
            "classes). Fix: pass e.g. model.predict_on_batch, or lambda x: "
            "emulator.run(step, args=(tf.constant(x),)).",
            sliding_window_predict, "model", VOLUME, TILE)


@pytest.mark.parametrize("volume, tile, fix", [
    (np.zeros((1, 32, 32, 16, 1)), TILE,
     "drop the batch axis and predict one example at a time (volume[0], ...)"),
    (np.zeros((32, 32, 16)), TILE,
     "add a channel axis at the end (volume[..., None]) if the volume has none, else leave "
     "the channels out of tile_shape (tile_shape=(16, 16))"),
    (VOLUME, TILE + (1,),
     "add a channel axis at the end (volume[..., None]) if the volume has none, else leave "
     "the channels out of tile_shape (tile_shape=(16, 16, 16))"),
    (VOLUME, (16, 16), "give tile_shape 3 sizes, one per spatial axis of the volume (a "
     "volume has no batch axis)"),
    (np.zeros((2, 32, 32, 16, 1)), TILE, "give tile_shape 4 sizes, one per spatial axis of "
     "the volume (a volume has no batch axis)"),
])
def test_volume_and_tile_ranks_must_agree(volume, tile, fix):
    rank = len(tile)
    _raises(ValueError,
            f"sliding_window_predict: volume has shape {volume.shape} and tile_shape is "
            f"{tile}; expected a volume of {rank} spatial axes then channels ({rank + 1} "
            f"axes). Fix: {fix}.",
            sliding_window_predict, lambda x: x, volume, tile)


@pytest.mark.parametrize("tile", [(16, 0, 16), (16, 16.0, 16), 16, (), (True, 16, 16)])
def test_tile_shape_must_be_positive_ints(tile):
    _raises(ValueError,
            f"sliding_window_predict: tile_shape is {tile!r}; expected one positive int per "
            f"spatial axis (no batch or channel axis). Fix: e.g. tile_shape=(64, 64, 64), "
            f"or the model's model.input_shape[1:-1].",
            sliding_window_predict, lambda x: x, VOLUME, tile)


def test_volume_must_hold_numbers_and_voxels():
    _raises(ValueError,
            "sliding_window_predict: volume has dtype <U1; expected real numbers (an image "
            "with its channels last). Fix: convert it, e.g. volume.astype(np.float32).",
            sliding_window_predict, lambda x: x, np.full((4, 4, 4, 1), "a"), TILE)
    _raises(ValueError,
            "sliding_window_predict: volume has shape (32, 0, 16, 1), with an empty axis; "
            "expected at least one voxel and one channel. Fix: check how the volume was read "
            "or cropped.",
            sliding_window_predict, lambda x: x, np.zeros((32, 0, 16, 1)), TILE)


@pytest.mark.parametrize("overlap", [1.0, -0.1, 1, True, "0.25", None])
def test_overlap_must_be_in_0_1(overlap):
    message = (f"{{}}: overlap is {overlap!r}; expected a number in [0, 1), the fraction of "
               f"a tile its neighbour shares. Fix: e.g. overlap=0.25 (0.5 for smoother "
               f"seams, at about twice the tiles).")
    _raises(ValueError, message.format("sliding_window_predict"),
            sliding_window_predict, lambda x: x, VOLUME, TILE, overlap=overlap)
    _raises(ValueError, message.format("tile_positions"),
            tile_positions, (32, 32, 16), TILE, overlap)


@pytest.mark.parametrize("blend", ["Gaussian", "cosine", None])
def test_blend_must_be_known(blend):
    message = (f"{{}}: blend is {blend!r}; expected 'gaussian', 'constant' or 'linear'. "
               f"Fix: e.g. blend='gaussian' (MONAI's and nnU-Net's choice).")
    _raises(ValueError, message.format("sliding_window_predict"),
            sliding_window_predict, lambda x: x, VOLUME, TILE, blend=blend)
    _raises(ValueError, message.format("blend_weights"), blend_weights, TILE, blend)


def test_batch_size_must_be_a_positive_int():
    _raises(ValueError, "sliding_window_predict: batch_size is 0; expected a positive int. "
            "Fix: e.g. batch_size=1.",
            sliding_window_predict, lambda x: x, VOLUME, TILE, batch_size=0)
    _raises(TypeError, "sliding_window_predict: batch_size is 2.0 (float); expected a "
            "positive int. Fix: e.g. batch_size=1.",
            sliding_window_predict, lambda x: x, VOLUME, TILE, batch_size=2.0)


@pytest.mark.parametrize("predict_fn, shape", [
    (lambda x: x[..., 0], (1, 16, 16, 16)),                     # the classes squeezed out
    (lambda x: x[0], (16, 16, 16, 1)),                         # one example, no batch axis
    (lambda x: x[:, 2:-2, 2:-2, 2:-2], (1, 12, 12, 12, 1)),    # a 'valid' model
    (lambda x: x[..., :0], (1, 16, 16, 16, 0)),                 # no classes
])
def test_predict_fn_must_return_scores_per_voxel_of_every_tile(predict_fn, shape):
    _raises(ValueError,
            f"sliding_window_predict: predict_fn returned shape {shape} for tiles of shape "
            f"(1, 16, 16, 16, 1); expected (1, 16, 16, 16, classes), class scores per voxel "
            f"of every tile. Fix: keep the batch and spatial sizes (a model with "
            f"padding='same') and return the scores, not a mask or a single example.",
            sliding_window_predict, predict_fn, VOLUME, TILE)


def test_predict_fn_must_return_the_same_classes_for_every_tile():
    calls = []

    def changing(x):
        calls.append(None)
        return np.zeros(x.shape[:-1] + (2 + len(calls),), np.float32)

    _raises(ValueError,
            "sliding_window_predict: predict_fn returned shape (1, 16, 16, 16, 4) for tiles "
            "of shape (1, 16, 16, 16, 1); expected (1, 16, 16, 16, 3), class scores per voxel "
            "of every tile. Fix: keep the batch and spatial sizes (a model with "
            "padding='same') and return the scores, not a mask or a single example.",
            sliding_window_predict, changing, VOLUME, TILE)


def test_predict_fn_must_return_scores_not_a_mask():
    _raises(ValueError,
            "sliding_window_predict: predict_fn returned int64 values; expected class scores "
            "(floats: logits or probabilities) to blend. Fix: return the model's logits and "
            "take the argmax of the blended result.",
            sliding_window_predict, lambda x: np.zeros(x.shape[:-1] + (2,), np.int64),
            VOLUME, TILE)


def test_tile_positions_checks_its_shapes():
    _raises(ValueError,
            "tile_positions: volume_shape (32, 32, 16, 1) has 4 axes but tile_shape "
            "(16, 16, 16) has 3; expected one tile size per spatial axis of the volume. Fix: "
            "give both without the batch and channel axes, e.g. "
            "volume_shape=volume.shape[:-1].",
            tile_positions, (32, 32, 16, 1), TILE, 0.25)
    _raises(ValueError,
            "tile_positions: volume_shape is (32, -1); expected one positive int per spatial "
            "axis (no batch or channel axis). Fix: e.g. volume_shape=volume.shape[:-1].",
            tile_positions, (32, -1), (16, 16), 0.25)
