"""CT windowing and normalization."""
import numpy as np
import pytest

from spatial_tf.data import WINDOWS, normalize, window


def test_window_clips_and_scales():
    hu = np.array([-1000.0, -160.0, 40.0, 100.0, 240.0, 1000.0])
    got = window(hu, center=40, width=400).numpy()
    np.testing.assert_allclose(got, [0.0, 0.0, 0.5, 0.65, 1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(window(hu, preset="abdomen"), got)
    lung = window(hu, preset="lung").numpy()
    c, w = WINDOWS["lung"]
    np.testing.assert_allclose(lung, np.clip((hu - (c - w / 2)) / w, 0, 1), rtol=1e-6)


def test_normalize():
    x = np.random.default_rng(0).normal(5.0, 3.0, size=1000)
    z = normalize(x).numpy()
    assert abs(z.mean()) < 1e-5 and abs(z.std() - 1) < 1e-4
    np.testing.assert_allclose(normalize(x, mean=1.0, std=2.0, epsilon=0.0), (x - 1) / 2, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    (dict(preset="knee"), r"preset is 'knee'; expected one of \['abdomen'"),
    (dict(center=40, width=0), r"width is 0; expected a positive number"),
    (dict(center=None, width=400), r"center is None; expected a number of Hounsfield units"),
])
def test_bad_window(kwargs, message):
    with pytest.raises(ValueError, match=message):
        window(np.zeros(3), **kwargs)


def test_percentile_scale_maps_the_1st_to_99th_percentile_to_0_1():
    from spatial_tf.data import percentile_scale

    rng = np.random.default_rng(2)
    mr = rng.gamma(2.0, 400.0, size=(13, 10, 9)).astype(np.float32)  # MR-like: 0 to thousands
    mr[0, 0, :3] = [1e5, 2e5, 3e5]  # a few bright voxels do not set the scale
    low, high = np.percentile(mr, [1, 99])
    expected = (np.clip(mr, low, high) - low) / (high - low)
    got = percentile_scale(mr).numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    assert got.min() == 0.0 and got.max() == 1.0 and got.dtype == np.float32
    lo, hi = np.percentile(mr, [10, 60])
    np.testing.assert_allclose(percentile_scale(mr, 10, 60), (np.clip(mr, lo, hi) - lo) / (hi - lo),
                               rtol=0, atol=1e-6)


def test_percentile_scale_of_a_constant_volume_is_0():
    from spatial_tf.data import percentile_scale

    np.testing.assert_array_equal(percentile_scale(np.full((4, 4, 4), 7.0)),
                                  np.zeros((4, 4, 4), np.float32))


@pytest.mark.parametrize("low, high, message", [
    (99, 1, "low is 99 and high 1; expected low < high"),
    (-1, 99, "low is -1; expected a percentile from 0 to 100"),
    (1, 101, "high is 101; expected a percentile from 0 to 100"),
])
def test_bad_percentiles(low, high, message):
    from spatial_tf.data import percentile_scale

    with pytest.raises(ValueError, match=message):
        percentile_scale(np.zeros(3), low, high)


def test_scale_intensities_by_modality():
    from spatial_tf.commands.options import MODALITIES as CHOICES
    from spatial_tf.data import MODALITIES, percentile_scale, scale_intensities

    assert tuple(MODALITIES) == CHOICES  # the CLI's --modality choices
    volume = np.random.default_rng(3).normal(300.0, 500.0, size=(6, 5, 4)).astype(np.float32)
    np.testing.assert_array_equal(scale_intensities(volume, "ct"), window(volume, preset="abdomen"))
    np.testing.assert_array_equal(scale_intensities(volume, "mr"), percentile_scale(volume, 1, 99))
    np.testing.assert_array_equal(scale_intensities(volume, "other"), volume)
    with pytest.raises(ValueError, match="modality is 'pet'; expected one of 'ct', 'mr', 'other'"):
        scale_intensities(volume, "pet")
