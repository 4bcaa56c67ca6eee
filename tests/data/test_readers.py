"""NIfTI and .npy readers: round trips, datasets, and the bad files users meet."""
import gzip

import nibabel as nib
import numpy as np
import pytest

from spatial_tf.data import load_example, read_volume, volume_dataset, write_volume


@pytest.fixture
def volumes(tmp_path):
    rng = np.random.default_rng(0)
    image = rng.normal(size=(6, 5, 4)).astype("float32") * 100
    labels = rng.integers(0, 3, size=(6, 5, 4)).astype("int16")
    return tmp_path, image, labels


@pytest.mark.parametrize("ext", [".nii", ".nii.gz", ".npy"])
def test_round_trip(volumes, ext):
    tmp, image, labels = volumes
    write_volume(tmp / f"image{ext}", image)
    write_volume(tmp / f"labels{ext}", labels)
    np.testing.assert_array_equal(read_volume(tmp / f"image{ext}"), image)
    got_image, got_labels = load_example(tmp / f"image{ext}", tmp / f"labels{ext}", num_classes=3)
    assert got_image.shape == (6, 5, 4, 1) and got_image.dtype == np.float32
    assert got_labels.dtype == np.int32
    np.testing.assert_array_equal(got_labels, labels)


def test_nifti_written_by_nibabel_keeps_scaling(tmp_path):
    data = np.arange(24, dtype="int16").reshape(2, 3, 4)
    img = nib.Nifti1Image(data, np.diag([0.8, 0.8, 2.5, 1.0]))
    img.header.set_slope_inter(2.0, -1024.0)
    nib.save(img, tmp_path / "ct.nii.gz")
    np.testing.assert_allclose(read_volume(tmp_path / "ct.nii.gz"), data * 2.0 - 1024.0)


def test_volume_dataset(volumes):
    tmp, image, labels = volumes
    pairs = []
    for i in range(3):
        write_volume(tmp / f"im{i}.nii.gz", image + i)
        write_volume(tmp / f"lb{i}.npy", labels)
        pairs.append((tmp / f"im{i}.nii.gz", tmp / f"lb{i}.npy"))
    ds = volume_dataset(pairs, num_classes=3)
    assert [s.shape.as_list() for s in ds.element_spec] == [[6, 5, 4, 1], [6, 5, 4]]
    items = list(ds)
    assert len(items) == 3
    np.testing.assert_allclose(items[2][0][..., 0], image + 2, rtol=1e-6)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"scan\.nii\.gz: no such file.*Fix: check the path"):
        read_volume(tmp_path / "scan.nii.gz")
    with pytest.raises(FileNotFoundError, match=r"im\.npy: no such file"):
        volume_dataset([(tmp_path / "im.npy", tmp_path / "lb.npy")], 2)


# ids by file name: a test id must not hold the bytes (gzip stamps the time into them, and
# pytest-xdist's workers must collect identical ids)
@pytest.mark.parametrize("name, content", [
    ("broken.nii.gz", gzip.compress(b"not a nifti header at all" * 20, mtime=0)),
    ("broken.nii", b"\x00" * 100),
    ("broken.npy", b"garbage"),
], ids=["nii.gz", "nii", "npy"])
def test_corrupt_file(tmp_path, name, content):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(ValueError, match=rf"{name}: cannot read it as a .* volume.*Fix: re-download"):
        read_volume(tmp_path / name)


def test_unknown_format(tmp_path):
    (tmp_path / "scan.dcm").write_bytes(b"x")
    with pytest.raises(ValueError, match=r"scan\.dcm: unknown volume format.*\.nii\.gz, \.nii, \.npy"):
        read_volume(tmp_path / "scan.dcm")


def test_bad_labels(volumes):
    tmp, image, labels = volumes
    write_volume(tmp / "im.npy", image)
    write_volume(tmp / "lb.npy", labels)
    with pytest.raises(ValueError, match=r"lb\.npy: holds class 2; expected classes in \[0, 2\)\. "
                                         r"Fix: pass num_classes=3"):
        load_example(tmp / "im.npy", tmp / "lb.npy", num_classes=2)
    write_volume(tmp / "half.npy", labels + 0.5)
    with pytest.raises(ValueError, match=r"half\.npy: labels are not whole numbers"):
        load_example(tmp / "im.npy", tmp / "half.npy", num_classes=3)
    write_volume(tmp / "small.npy", labels[:3])
    with pytest.raises(ValueError, match=r"small\.npy: label shape \(3, 5, 4\) differs from the image's \(6, 5, 4\)"):
        load_example(tmp / "im.npy", tmp / "small.npy", num_classes=3)


def test_dataset_with_volumes_of_another_size(volumes):
    tmp, image, labels = volumes
    write_volume(tmp / "a.npy", image)
    write_volume(tmp / "la.npy", labels)
    write_volume(tmp / "b.npy", image[:4])
    write_volume(tmp / "lb.npy", labels[:4])
    with pytest.raises(ValueError) as e:   # when the dataset is made, not in a step
        volume_dataset([(tmp / "a.npy", tmp / "la.npy"), (tmp / "b.npy", tmp / "lb.npy")], 3)
    assert str(e.value) == (
        f"{tmp}/b.npy: volume shape (4, 5, 4) differs from the first volume's (6, 5, 4) "
        f"({tmp}/a.npy). Expected one size for the dataset. Fix: pass same_shape=False and fit "
        f"the volumes to one shape with spatial_tf.data.crop_or_pad or pad_to_shape, or "
        f"resample them.")


@pytest.mark.parametrize("ext", [".nii", ".nii.gz", ".npy"])
def test_volume_shape_reads_the_header_only(tmp_path, ext):
    from spatial_tf.data import volume_shape

    write_volume(tmp_path / f"ct{ext}", np.zeros((13, 10, 9), np.float32))
    assert volume_shape(tmp_path / f"ct{ext}") == (13, 10, 9)
    with pytest.raises(FileNotFoundError, match="no such file"):
        volume_shape(tmp_path / f"missing{ext}")
    (tmp_path / f"bad{ext}").write_bytes(b"not a volume")
    with pytest.raises(ValueError, match=f"bad{ext}: cannot read it as a {ext} volume"):
        volume_shape(tmp_path / f"bad{ext}")


@pytest.mark.parametrize("ext", [".nii", ".nii.gz"])
def test_write_volume_keeps_the_affine_and_header_given(tmp_path, ext):
    affine = np.array([[-1.5, 0, 0, 90], [0, 2.0, 0, -126], [0, 0, 2.5, -72], [0, 0, 0, 1]])
    scan = nib.Nifti1Image(np.ones((13, 10, 9), np.float32), affine)
    scan.header.set_xyzt_units("mm", "sec")
    scan.header["descrip"] = b"T1 scan"
    scan.header.set_slope_inter(2.0, -10.0)  # the scan's scaling is not the mask's
    mask = (np.arange(13 * 10 * 9) % 3).reshape(13, 10, 9).astype(np.int16)
    write_volume(tmp_path / f"mask{ext}", mask, scan.affine, scan.header)
    written = nib.load(tmp_path / f"mask{ext}")
    np.testing.assert_array_equal(written.affine, affine)
    np.testing.assert_array_equal(written.header.get_zooms(), (1.5, 2.0, 2.5))
    assert written.header.get_xyzt_units() == ("mm", "sec")
    assert written.header["descrip"].item() == b"T1 scan"
    assert written.get_data_dtype() == np.int16
    np.testing.assert_array_equal(np.asarray(written.dataobj), mask)


def test_read_labels_refuses_fractions(tmp_path):
    from spatial_tf.data import read_labels

    np.save(tmp_path / "ok.npy", np.array([[0.0, 2.0]]))
    assert read_labels(tmp_path / "ok.npy").dtype == np.int32
    np.save(tmp_path / "bad.npy", np.array([0.5]))
    with pytest.raises(ValueError, match="bad.npy: labels are not whole numbers"):
        read_labels(tmp_path / "bad.npy")


def test_volume_dataset_of_volumes_of_different_sizes(tmp_path):
    pairs = []
    for i, shape in enumerate([(3, 4, 5), (6, 2, 5)]):
        write_volume(tmp_path / f"v{i}.npy", np.full(shape, i, np.float32))
        write_volume(tmp_path / f"v{i}_labels.npy", np.ones(shape, np.int32))
        pairs.append((tmp_path / f"v{i}.npy", tmp_path / f"v{i}_labels.npy"))
    ds = volume_dataset(pairs, num_classes=2, same_shape=False)
    assert ds.element_spec[0].shape.as_list() == [None, None, None, 1]
    assert [tuple(labels.shape) for _, labels in ds] == [(3, 4, 5), (6, 2, 5)]
    with pytest.raises(ValueError, match=r"v1\.npy: volume shape \(6, 2, 5\) differs from "
                                         r"the first volume's \(3, 4, 5\)"):
        volume_dataset(pairs, num_classes=2)


@pytest.mark.parametrize("ext", [".npy", ".nii.gz"])
def test_nonfinite_voxels_are_refused_or_replaced_by_the_value_given(tmp_path, ext, caplog):
    import logging

    volume = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    volume[0, 0, 0], volume[1, 2, 3] = np.nan, -np.inf
    path = str(tmp_path / f"scan{ext}")
    write_volume(path, volume)
    with pytest.raises(ValueError, match=rf"scan{ext}: 2 of 24 voxels are not finite \(1 NaN, "
                                         r"1 infinite\); expected finite intensities"):
        read_volume(path)
    with caplog.at_level(logging.WARNING, logger="spatial_tf"):
        fixed = read_volume(path, nonfinite=-5.0)
    assert fixed[0, 0, 0] == fixed[1, 2, 3] == -5.0
    np.testing.assert_array_equal(fixed.ravel()[1:-1], volume.ravel()[1:-1])
    assert "2 NaN or infinite voxels replaced by -5.0" in caplog.text
    with pytest.raises(ValueError, match="2 of 24 voxels are not finite"):
        load_example(path, path, 3)
    labels = np.zeros((2, 3, 4), np.int32)  # integers are finite by nature
    write_volume(str(tmp_path / f"labels{ext}"), labels)
    np.testing.assert_array_equal(read_volume(str(tmp_path / f"labels{ext}")), labels)


# an affine whose voxel axes are permuted and flipped against RAS+: file axis 0 runs to
# the left (x flipped), 1 to superior, 2 to posterior (LSP)
LSP = np.array([[-2.0, 0, 0, 50], [0, 0, -1.5, 30], [0, 3.0, 0, -20], [0, 0, 0, 1]])


def test_nifti_is_read_ras_and_from_ras_gives_the_stored_array_back(tmp_path):
    from spatial_tf.data import from_ras, to_ras, volume_shape, voxel_spacing

    stored = np.arange(6 * 5 * 4, dtype=np.float32).reshape(6, 5, 4)
    path = str(tmp_path / "lsp.nii.gz")
    nib.save(nib.Nifti1Image(stored, LSP), path)
    canonical = nib.as_closest_canonical(nib.load(path))
    assert nib.aff2axcodes(LSP) == ("L", "S", "P")
    volume = read_volume(path)
    np.testing.assert_array_equal(volume, canonical.get_fdata())   # RAS+ order
    assert volume.shape == (6, 4, 5) == volume_shape(path)
    assert voxel_spacing(path) == (2.0, 1.5, 3.0)                   # per RAS axis
    np.testing.assert_array_equal(volume, to_ras(stored, LSP))
    back = from_ras(volume, LSP)
    assert back.dtype == stored.dtype and np.array_equal(back, stored)
    write_volume(str(tmp_path / "out.nii.gz"), back, LSP)
    written = nib.load(str(tmp_path / "out.nii.gz"))
    assert np.array_equal(written.affine, LSP) and np.array_equal(written.get_fdata(), stored)


def test_npy_labels_beside_a_nifti_image_are_paired_and_reordered_with_it(tmp_path):
    from spatial_tf.commands.volumes import pair_files

    stored = np.random.default_rng(0).normal(size=(6, 5, 4)).astype(np.float32)
    labels = (stored > 0).astype(np.int32)           # in the image file's voxel order
    nib.save(nib.Nifti1Image(stored, LSP), str(tmp_path / "a.nii.gz"))
    np.save(tmp_path / "a_labels.npy", labels)
    pairs = pair_files(str(tmp_path))
    assert pairs == [(str(tmp_path / "a.nii.gz"), str(tmp_path / "a_labels.npy"))]
    image, read = load_example(*pairs[0], num_classes=2)
    np.testing.assert_array_equal(read, (image[..., 0] > 0).astype(np.int32))  # voxel by voxel
    np.save(tmp_path / "a_labels.npy", labels[:5])
    with pytest.raises(ValueError) as e:
        load_example(*pairs[0], num_classes=2)
    assert str(e.value) == (
        f"{tmp_path}/a_labels.npy: label shape (5, 5, 4) differs from the image's (6, 5, 4) "
        f"({tmp_path}/a.nii.gz). Expected the same voxel grid. Fix: pair each image with its "
        f"own label file.")


def test_a_nifti_label_beside_a_npy_image_is_named(tmp_path):
    from spatial_tf.commands.volumes import pair_files

    np.save(tmp_path / "b.npy", np.zeros((4, 4, 4), np.float32))
    nib.save(nib.Nifti1Image(np.zeros((4, 4, 4), np.int16), np.eye(4)),
             str(tmp_path / "b_labels.nii.gz"))
    with pytest.raises(ValueError) as e:
        pair_files(str(tmp_path))
    assert str(e.value) == (
        f"{tmp_path}/b.npy: found b_labels.nii.gz beside it, but the labels of a .npy image "
        f"must be .npy (a NIfTI label is read in RAS order, a .npy image as stored). Expected "
        f"{tmp_path}/b_labels.npy. Fix: save the labels in the image's voxel order with "
        f"numpy.save as {tmp_path}/b_labels.npy.")
    (tmp_path / "b_labels.nii.gz").unlink()
    nib.save(nib.Nifti1Image(np.zeros((4, 4, 4), np.float32), np.eye(4)),
             str(tmp_path / "c.nii.gz"))
    (tmp_path / "b.npy").unlink()
    with pytest.raises(ValueError) as e:
        pair_files(str(tmp_path))
    assert str(e.value) == (
        f"{tmp_path}/c.nii.gz: no label file beside it. Expected {tmp_path}/c_labels.nii.gz "
        f"(or c_labels.nii or .npy). Fix: add it or move the image out of {tmp_path}.")
