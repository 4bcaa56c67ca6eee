"""Resampling to a voxel spacing and back: exact shapes, exact nearest-neighbour round
trips on whole factors, the edge-aligned grid (values and affine), header spacings."""
import os
import struct

import nibabel as nib
import numpy as np
import pytest

from spatial_tf import data
from spatial_tf.data import (resample_to_shape, resample_to_spacing, resampled_affine,
                             resampled_shape, voxel_spacing)


@pytest.mark.parametrize("shape, spacing, target, expected", [
    ((197, 233, 189), (1, 1, 1), (4, 4, 4), (49, 58, 47)),         # 49.25, 58.25, 47.25
    ((512, 512, 137), (0.7, 0.7, 2.5), (1.5, 1.5, 1.5), (239, 239, 228)),
    ((13, 10, 9), (1.5, 2.0, 2.5), (3, 3, 3), (7, 7, 8)),          # 6.5 and 7.5 round up
    ((5, 4, 3), (0.7, 1, 1), (1.4, 2, 9), (3, 2, 1)),             # 2.5 (not 2.4999...), >= 1
    ((50, 59, 48), (4, 4, 4), (4, 4, 4), (50, 59, 48)),
])
def test_resampled_shape(shape, spacing, target, expected):
    assert resampled_shape(shape, spacing, target) == expected


def labels_of(shape, seed=0):
    return np.random.default_rng(seed).integers(0, 4, shape).astype(np.int32)


@pytest.mark.parametrize("factors", [(2, 3, 1), (1, 1, 2), (3, 3, 3)])
def test_nearest_neighbour_round_trip_on_whole_factors_is_exact(factors):
    labels = labels_of((5, 7, 3))
    spacing = (1.2, 0.9, 2.0)
    finer = tuple(s / f for s, f in zip(spacing, factors))
    fine = resample_to_spacing(labels, spacing, finer, order=0)
    # each voxel became a block of factors voxels: np.repeat along each axis
    blocks = labels
    for axis, f in enumerate(factors):
        blocks = np.repeat(blocks, f, axis=axis)
    assert fine.dtype == np.int32
    np.testing.assert_array_equal(fine, blocks)
    np.testing.assert_array_equal(resample_to_shape(fine, labels.shape, order=0), labels)
    # and the other way: a map constant on the blocks goes to the coarse grid and back exactly
    coarse = resample_to_spacing(blocks, finer, spacing, order=0)
    np.testing.assert_array_equal(coarse, labels)
    np.testing.assert_array_equal(resample_to_shape(coarse, blocks.shape, order=0), blocks)


def test_any_factor_gives_the_exact_shape_and_only_the_labels_there_were():
    labels = labels_of((13, 10, 9), seed=1)
    moved = resample_to_spacing(labels, (1.5, 2.0, 2.5), (3, 3, 3), order=0)
    assert moved.shape == (7, 7, 8)
    back = resample_to_shape(moved, labels.shape, order=0)
    assert back.shape == (13, 10, 9) and back.dtype == np.int32
    assert set(np.unique(back)) <= set(np.unique(labels))
    # voxel 0 of every grid is the corner voxel: the corners survive
    assert back[0, 0, 0] == moved[0, 0, 0] == labels[0, 0, 0]


def test_linear_resampling_samples_the_edge_aligned_grid():
    # a ramp in voxel coordinates: voxel j of the result is centred at (j + 0.5) * s - 0.5
    i, j, k = np.meshgrid(np.arange(12), np.arange(9), np.arange(6), indexing="ij")
    ramp = (2.0 * i + 3.0 * j - 1.0 * k).astype(np.float64)
    out = resample_to_shape(ramp, (4, 3, 3), order=1)         # s = 3, 3, 2: downsampling
    s = np.array([3.0, 3.0, 2.0])
    a, b, c = np.meshgrid(*[(np.arange(n) + 0.5) * f - 0.5 for n, f in zip((4, 3, 3), s)],
                          indexing="ij")
    np.testing.assert_allclose(out, 2.0 * a + 3.0 * b - 1.0 * c, rtol=0, atol=1e-12)
    # by hand at j = k = 0: i at 1, 4, 7, 10; j at 1; k at 0.5 -> 2i + 3 - 0.5
    assert out[:, 0, 0].tolist() == pytest.approx([4.5, 10.5, 16.5, 22.5], abs=1e-12)


def test_resampled_affine_keeps_every_voxel_where_the_values_say():
    affine = np.array([[-1.5, 0, 0, 90.0], [0, 2.0, 0, -126.0], [0, 0, 2.5, -72.0], [0, 0, 0, 1]])
    shape, new_shape = (12, 9, 8), (4, 3, 5)
    # a volume whose value is the world x coordinate of each voxel's centre (linear)
    index = np.stack(np.meshgrid(*map(np.arange, shape), indexing="ij"), -1)
    world_x = index @ affine[0, :3] + affine[0, 3]
    out = resample_to_shape(world_x, new_shape, order=1)
    new_affine = resampled_affine(affine, shape, new_shape)
    new_index = np.stack(np.meshgrid(*map(np.arange, new_shape), indexing="ij"), -1)
    interior = out[:, :, 1:-1]                   # axis 2 is upsampled: its edges are clamped
    np.testing.assert_allclose(interior, (new_index @ new_affine[0, :3] + new_affine[0, 3])
                               [:, :, 1:-1], atol=1e-12)
    # voxel sizes scaled by old / new, the outer corner of the grid unmoved
    np.testing.assert_allclose(np.abs(np.diag(new_affine)[:3]), [4.5, 6.0, 4.0])
    corner = affine @ [-0.5, -0.5, -0.5, 1]
    np.testing.assert_allclose(new_affine @ [-0.5, -0.5, -0.5, 1], corner)
    far = affine @ [11.5, 8.5, 7.5, 1]
    np.testing.assert_allclose(new_affine @ [3.5, 2.5, 4.5, 1], far)


def test_same_shape_is_a_copy():
    volume = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out = resample_to_spacing(volume, (1, 1, 1), (1.1, 1, 1), order=1)   # 2 / 1.1 -> 2
    np.testing.assert_array_equal(out, volume)
    assert out is not volume


def write_nifti(path, shape, zooms, unit="mm", dtype=np.float32):
    image = nib.Nifti1Image(np.zeros(shape, dtype), np.diag(list(zooms)[:3] + [1]))
    image.header.set_xyzt_units(unit, "sec")
    nib.save(image, path)
    return path


@pytest.mark.parametrize("unit, expected", [("mm", (0.8, 0.8, 2.5)),
                                            ("meter", (800.0, 800.0, 2500.0)),
                                            ("micron", (0.0008, 0.0008, 0.0025)),
                                            ("unknown", (0.8, 0.8, 2.5))])
def test_voxel_spacing_reads_the_header_in_mm(tmp_path, unit, expected):
    path = write_nifti(str(tmp_path / "scan.nii.gz"), (4, 5, 6), (0.8, 0.8, 2.5), unit)
    assert voxel_spacing(path) == pytest.approx(expected, rel=1e-6)


def test_voxel_spacing_refuses_what_has_none(tmp_path):
    npy = str(tmp_path / "scan.npy")
    np.save(npy, np.zeros((4, 4, 4), np.float32))
    with pytest.raises(ValueError) as e:
        voxel_spacing(npy)
    assert str(e.value) == (
        f"{npy}: a .npy file records no voxel spacing; expected a NIfTI file (.nii, .nii.gz) "
        f"whose header gives it. Fix: save the volume as NIfTI with its voxel sizes "
        f"(nibabel.Nifti1Image(volume, affine)), or do not resample it.")
    # a header whose second voxel size is NaN (nibabel itself turns 0 into 1, -2 into 2)
    flat = write_nifti(str(tmp_path / "flat.nii"), (4, 4, 4), (1, 1, 1))
    raw = bytearray(open(flat, "rb").read())
    raw[84:88] = struct.pack("<f", float("nan"))    # pixdim[2] of the NIfTI-1 header
    open(flat, "wb").write(bytes(raw))
    with pytest.raises(ValueError, match=r"flat.nii: its header gives voxel sizes \(1.0, nan, "
                                         r"1.0\); expected three positive sizes in mm"):
        voxel_spacing(flat)
    four = write_nifti(str(tmp_path / "four.nii"), (4, 4, 4, 2), (1, 1, 1, 1))
    with pytest.raises(ValueError, match=r"four.nii: has 4 axes .* expected a 3D volume"):
        voxel_spacing(four)


@pytest.mark.parametrize("call, message", [
    (lambda v: resample_to_shape(v, (2, 2), order=0), r"shape is \(2, 2\); expected 3 sizes"),
    (lambda v: resample_to_shape(v, (2, 0, 2), order=0), r"shape is \(2, 0, 2\)"),
    (lambda v: resample_to_shape(v, (2, 2, 2), order=3), r"order is 3; expected 0 \(nearest"),
    (lambda v: resample_to_spacing(v, (1, 1), (2, 2, 2), order=1),
     r"resample_to_spacing: spacing is \(1, 1\); expected 3 positive voxel sizes in mm"),
    (lambda v: resample_to_spacing(v, (1, 1, 1), (2, float("nan"), 2), order=1),
     r"target is \(2, nan, 2\)"),
])
def test_bad_arguments_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call(np.zeros((4, 4, 4), np.float32))


def test_volume_dataset_resamples_each_pair_from_its_header(tmp_path):
    affine = np.diag([1.5, 2.0, 2.5, 1.0])
    image = np.random.default_rng(0).normal(size=(13, 10, 9)).astype(np.float32)
    labels = labels_of((13, 10, 9), seed=2)
    pair = str(tmp_path / "a.nii.gz"), str(tmp_path / "a_labels.nii.gz")
    nib.save(nib.Nifti1Image(image, affine), pair[0])
    nib.save(nib.Nifti1Image(labels.astype(np.int16), affine), pair[1])
    got_image, got_labels = next(iter(data.volume_dataset([pair], 4, spacing=(3, 3, 3))))
    assert got_image.shape == (7, 7, 8, 1) and got_labels.shape == (7, 7, 8)
    np.testing.assert_allclose(got_image.numpy()[..., 0],
                               resample_to_spacing(image, (1.5, 2, 2.5), (3, 3, 3), order=1))
    np.testing.assert_array_equal(got_labels.numpy(),
                                  resample_to_spacing(labels, (1.5, 2, 2.5), (3, 3, 3), order=0))
    np.save(tmp_path / "b.npy", image)
    np.save(tmp_path / "b_labels.npy", labels)
    with pytest.raises(ValueError, match="b.npy: a .npy file records no voxel spacing"):
        data.volume_dataset([(str(tmp_path / "b.npy"), str(tmp_path / "b_labels.npy"))], 4,
                            spacing=(3, 3, 3))
    assert os.path.isfile(pair[0])
