"""DICOM series read as volumes: slices ordered along the normal (not by name or instance
number), rescaled to Hounsfield units, the RAS+ affine of nibabel, and one-line errors
naming the file for every wrong or mixed series. Every series is written here with
pydicom; the expected arrays and affines are worked out by hand from the geometry."""
import os
import shutil

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom",
                              reason="DICOM needs pydicom: pip install 'spatial-tf[data]'")

from pydicom.dataset import Dataset, FileMetaDataset  # noqa: E402
from pydicom.uid import (CTImageStorage, ExplicitVRLittleEndian, MRImageStorage,  # noqa: E402
                         generate_uid)

from dicom_series import (AXIAL, COLUMNS, ROWS, SLICES, ds_numbers,  # noqa: E402
                          stored_values, write_series, write_slice)
from spatial_tf.data.dicom import read_dicom_series  # noqa: E402

def expected_volume(slope=lambda k: 2, intercept=lambda k: -1024, slices=SLICES):
    """(columns, rows, slices): voxel (i, j, k) is pixel (row j, column i) of slice k."""
    i, j, k = np.indices((COLUMNS, ROWS, slices))
    slopes = np.array([slope(n) for n in range(slices)], float)[k]
    intercepts = np.array([intercept(n) for n in range(slices)], float)[k]
    return ((100 * k + 10 * j + i) * slopes + intercepts).astype(np.float32)


def one_line_error(directory, error=ValueError, **kwargs):
    with pytest.raises(error) as e:
        read_dicom_series(directory, **kwargs)
    message = str(e.value)
    assert "\n" not in message and "Fix:" in message
    return message


def test_axial_series_volume_affine_and_spacing(tmp_path):
    uid, paths = write_series(tmp_path, origin=(-100, -120, 30))
    volume = read_dicom_series(tmp_path)
    assert volume.array.dtype == np.float32
    assert volume.array.shape == (COLUMNS, ROWS, SLICES)
    np.testing.assert_array_equal(volume.array, expected_volume())
    assert volume.array[3, 2, 4] == (400 + 20 + 3) * 2 - 1024           # Hounsfield units
    # columns 0.6 mm apart along +x (LPS: to the patient's left), rows 0.8 mm along +y
    # (posterior), slices 2.5 mm along +z; RAS+ negates x and y
    np.testing.assert_array_equal(volume.affine, [[-0.6, 0, 0, 100],
                                                  [0, -0.8, 0, 120],
                                                  [0, 0, 2.5, 30],
                                                  [0, 0, 0, 1]])
    assert volume.spacing == (0.6, 0.8, 2.5)
    assert volume.series_uid == uid
    assert volume.files == tuple(paths[k] for k in range(SLICES))


def test_axial_series_faces_left_posterior_superior():
    nib = pytest.importorskip("nibabel")
    # a standard axial DICOM slice: columns run from the patient's right to left, rows
    # from anterior to posterior (what nibabel calls an L, P, S oriented array)
    affine = np.array([[-0.6, 0, 0, 100], [0, -0.8, 0, 120], [0, 0, 2.5, 30], [0, 0, 0, 1]])
    assert nib.aff2axcodes(affine) == ("L", "P", "S")


def test_flipped_series_is_ordered_along_its_normal_not_by_height(tmp_path):
    # column cosine along -y: the normal (row x column) points down, to -z, so the first
    # slice along the normal is the highest one
    orientation = (1, 0, 0, 0, -1, 0)
    write_series(tmp_path, origin=(5, 40, 30), orientation=orientation, step=2.5)
    volume = read_dicom_series(tmp_path)
    np.testing.assert_array_equal(volume.array, expected_volume())
    np.testing.assert_array_equal(volume.affine, [[-0.6, 0, 0, -5],
                                                  [0, 0.8, 0, -40],
                                                  [0, 0, -2.5, 30],
                                                  [0, 0, 0, 1]])
    assert volume.spacing == (0.6, 0.8, 2.5)


def test_oblique_series(tmp_path):
    # row (2, 2, 1)/3 and column (-2, 1, 2)/3: normal (1, -2, 2)/3; 0.75 mm between
    # columns, 0.5 mm between rows, 3 mm between slices
    orientation = (2 / 3, 2 / 3, 1 / 3, -2 / 3, 1 / 3, 2 / 3)
    write_series(tmp_path, origin=(10, -20, 5), orientation=orientation,
                 pixel_spacing=(0.5, 0.75), step=3.0)
    volume = read_dicom_series(tmp_path)
    np.testing.assert_array_equal(volume.array, expected_volume())
    # LPS columns: row * 0.75 = (0.5, 0.5, 0.25), column * 0.5 = (-1/3, 1/6, 1/3),
    # normal * 3 = (1, -2, 2), origin (10, -20, 5); RAS: x and y negated
    np.testing.assert_allclose(volume.affine, [[-0.5, 1 / 3, -1, -10],
                                               [-0.5, -1 / 6, 2, 20],
                                               [0.25, 1 / 3, 2, 5],
                                               [0, 0, 0, 1]], rtol=0, atol=1e-8)
    np.testing.assert_allclose(volume.spacing, (0.75, 0.5, 3.0), rtol=0, atol=1e-8)


@pytest.mark.parametrize("orientation, origin, pixel_spacing, step", [
    (AXIAL, (-100, -120, 30), (0.8, 0.6), 2.5),
    ((1, 0, 0, 0, -1, 0), (5, 40, 30), (0.8, 0.6), 2.5),
    ((0, 1, 0, 0, 0, -1), (12, -50, 80), (1.0, 0.7), 1.5),              # sagittal
    ((2 / 3, 2 / 3, 1 / 3, -2 / 3, 1 / 3, 2 / 3), (10, -20, 5), (0.5, 0.75), 3.0),
])
def test_each_voxel_lands_where_its_dicom_pixel_is(tmp_path, orientation, origin,
                                                   pixel_spacing, step):
    # DICOM PS3.3 C.7.6.2.1.1: pixel (row r, column c) of a slice is at
    # ImagePositionPatient + c * PixelSpacing[1] * row cosine + r * PixelSpacing[0] *
    # column cosine (LPS); every stored value is unique, so each is found in the volume
    _, paths = write_series(tmp_path, origin=origin, orientation=orientation,
                            pixel_spacing=pixel_spacing, step=step)
    volume = read_dicom_series(tmp_path)
    for k, path in paths.items():
        ds = pydicom.dcmread(path)
        position = np.array(ds.ImagePositionPatient, float)
        row_cosine = np.array(ds.ImageOrientationPatient[:3], float)
        column_cosine = np.array(ds.ImageOrientationPatient[3:], float)
        row_spacing, column_spacing = (float(v) for v in ds.PixelSpacing)
        for r, c in [(0, 0), (0, COLUMNS - 1), (ROWS - 1, 0), (4, 5)]:
            lps = position + c * column_spacing * row_cosine + r * row_spacing * column_cosine
            ras = lps * [-1, -1, 1]
            hounsfield = int(ds.pixel_array[r, c]) * 2 - 1024
            (voxel,) = np.argwhere(volume.array == hounsfield)
            np.testing.assert_allclose((volume.affine @ [*voxel, 1])[:3], ras, atol=1e-6)


def test_a_gantry_tilt_shears_the_affine(tmp_path):
    # axial slices 2.5 mm apart along z, each 0.5 mm further back (+y, LPS): the stack
    # is sheared, and the third column of the affine is the step from slice to slice
    series = generate_uid()
    for k in (3, 0, 4, 2, 1):
        write_slice(tmp_path / f"IM{9 - k}.dcm", series=series, position=(0, 0.5 * k, 2.5 * k),
                    stored=stored_values(k))
    volume = read_dicom_series(tmp_path)
    np.testing.assert_array_equal(volume.array, expected_volume())
    np.testing.assert_array_equal(volume.affine, [[-0.6, 0, 0, 0], [0, -0.8, -0.5, 0],
                                                  [0, 0, 2.5, 0], [0, 0, 0, 1]])
    assert volume.spacing[2] == pytest.approx(np.sqrt(0.5 ** 2 + 2.5 ** 2))


def test_each_slice_keeps_its_own_rescale(tmp_path):
    # MR and PET series may rescale each slice differently
    slope, intercept = (lambda k: k + 1), (lambda k: -10 * k)
    write_series(tmp_path, origin=(0, 0, 0), slope=slope, intercept=intercept)
    volume = read_dicom_series(tmp_path)
    np.testing.assert_array_equal(volume.array, expected_volume(slope, intercept))
    assert volume.array[1, 2, 3] == (300 + 20 + 1) * 4 - 30


def test_a_volume_saved_as_nifti_reads_back_with_its_spacing(tmp_path):
    nib = pytest.importorskip("nibabel")
    from spatial_tf.data import from_ras, read_volume, to_ras, voxel_spacing

    write_series(tmp_path / "series", origin=(-100, -120, 30))
    volume = read_dicom_series(tmp_path / "series")
    path = tmp_path / "scan.nii.gz"
    nib.save(nib.Nifti1Image(volume.array, volume.affine), path)
    # read in RAS+ order; from_ras gives the series' own layout back
    np.testing.assert_array_equal(read_volume(path), to_ras(volume.array, volume.affine))
    np.testing.assert_array_equal(from_ras(read_volume(path), volume.affine), volume.array)
    np.testing.assert_allclose(nib.load(path).affine, volume.affine, atol=1e-6)
    np.testing.assert_allclose(voxel_spacing(path), volume.spacing, rtol=1e-6)


def test_one_slice_takes_its_thickness(tmp_path):
    write_slice(tmp_path / "only.dcm", series=generate_uid(), position=(1, 2, 3),
                stored=stored_values(0), SliceThickness="1.25")
    volume = read_dicom_series(tmp_path)
    assert volume.array.shape == (COLUMNS, ROWS, 1)
    np.testing.assert_array_equal(volume.affine, [[-0.6, 0, 0, -1], [0, -0.8, 0, -2],
                                                  [0, 0, 1.25, 3], [0, 0, 0, 1]])


def test_files_that_are_clearly_not_dicom_slices_are_skipped(tmp_path):
    write_series(tmp_path, origin=(0, 0, 0))
    (tmp_path / "notes.txt").write_text("scanned 2024\n")
    (tmp_path / "IM9999.dcm").write_bytes(b"no preamble, no DICM marker" * 10)
    (tmp_path / ".DS_Store").write_bytes(b"\0" * 300)
    (tmp_path / "subfolder").mkdir()
    report = Dataset()                                   # a DICOM file without an image
    report.SOPClassUID, report.SOPInstanceUID = "1.2.840.10008.5.1.4.1.1.88.11", generate_uid()
    report.SeriesInstanceUID = generate_uid()
    report.file_meta = FileMetaDataset()
    report.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    report.save_as(tmp_path / "report.dcm", enforce_file_format=True)
    volume = read_dicom_series(tmp_path)
    np.testing.assert_array_equal(volume.array, expected_volume())
    assert len(volume.files) == SLICES


def test_several_series_need_a_series_uid(tmp_path):
    ct, _ = write_series(tmp_path, origin=(0, 0, 0))
    other, _ = write_series(tmp_path / "tmp", origin=(0, 0, 0), slices=3, seed=5)
    for name in os.listdir(tmp_path / "tmp"):
        shutil.move(tmp_path / "tmp" / name, tmp_path / f"other_{name}")
    (tmp_path / "tmp").rmdir()
    message = one_line_error(tmp_path)
    assert (f"{tmp_path}: holds 2 DICOM series: {ct} (5 slices), {other} (3 slices); "
            f"expected one. Fix: pass series_uid=") in message
    np.testing.assert_array_equal(read_dicom_series(tmp_path, series_uid=ct).array,
                                  expected_volume())
    assert read_dicom_series(tmp_path, series_uid=other).array.shape == (COLUMNS, ROWS, 3)
    message = one_line_error(tmp_path, series_uid="1.2.3")
    assert f"holds no series 1.2.3; it holds {ct} (5 slices), {other} (3 slices)" in message


def test_an_empty_or_dicom_free_folder_is_refused(tmp_path):
    assert one_line_error(tmp_path).startswith(
        f"{tmp_path}: holds no DICOM image files (0 other files skipped;")
    (tmp_path / "readme.txt").write_text("CT of the abdomen")
    (tmp_path / "scan.json").write_text("{}")
    assert "holds no DICOM image files (2 other files skipped" in one_line_error(tmp_path)


def test_a_missing_folder_or_a_file_is_refused(tmp_path):
    message = one_line_error(tmp_path / "nowhere", FileNotFoundError)
    assert message.startswith(f"{tmp_path / 'nowhere'}: no such directory.")
    _, paths = write_series(tmp_path, origin=(0, 0, 0))
    message = one_line_error(paths[0])
    assert message == (f"{paths[0]}: is a file; expected the folder that holds a DICOM "
                       f"series' slices. Fix: pass its folder, {tmp_path}.")


def test_slices_of_another_shape_are_refused(tmp_path):
    series, paths = write_series(tmp_path, origin=(0, 0, 0))
    odd = tmp_path / "IM0100.dcm"
    write_slice(odd, series=series, position=(0, 0, 5 * 2.5), shape=(6, 8))
    message = one_line_error(tmp_path)
    first = min(paths.values())
    assert message.startswith(f"{odd}: shape (rows, columns) [6.0, 8.0] differs from "
                              f"[6.0, 7.0] of {first} in series {series}")


def test_slices_of_another_orientation_are_refused(tmp_path):
    series, paths = write_series(tmp_path, origin=(0, 0, 0))
    scout = tmp_path / "IM0100.dcm"                  # a coronal localizer in the series
    write_slice(scout, series=series, position=(0, 0, 20), orientation=(1, 0, 0, 0, 0, -1))
    message = one_line_error(tmp_path)
    assert message.startswith(f"{scout}: ImageOrientationPatient [1.0, 0.0, 0.0, 0.0, 0.0, "
                              f"-1.0] differs from [1.0, 0.0, 0.0, 0.0, 1.0, 0.0] of "
                              f"{min(paths.values())} in series {series}")


def test_slices_of_another_pixel_spacing_are_refused(tmp_path):
    series, paths = write_series(tmp_path, origin=(0, 0, 0))
    odd = tmp_path / "IM0100.dcm"
    write_slice(odd, series=series, position=(0, 0, 12.5), pixel_spacing=(0.8, 0.7))
    assert one_line_error(tmp_path).startswith(
        f"{odd}: PixelSpacing [0.8, 0.7] differs from [0.8, 0.6] of {min(paths.values())}")


def test_two_slices_at_one_position_are_refused(tmp_path):
    series, paths = write_series(tmp_path, origin=(0, 0, -10))
    copy = tmp_path / "IM0100.dcm"
    write_slice(copy, series=series, position=(0, 0, -5), stored=stored_values(2))
    message = one_line_error(tmp_path)
    pair = sorted([paths[2], str(copy)])
    assert set(message.split(":")[0].split(" and ")) == set(pair)
    assert "both at -5 mm along the slice normal" in message
    assert f"series {series} (1 such pair); expected one slice per position" in message


def test_a_gap_is_uneven_spacing_and_names_the_spacings(tmp_path):
    series, paths = write_series(tmp_path, origin=(0, 0, 0), slices=6)
    os.remove(paths[3])                                      # a lost slice
    message = one_line_error(tmp_path)
    assert message.startswith(f"{tmp_path}: uneven slice spacing in series {series}: steps "
                              f"of 2.5, 5 mm along the slice normal (from {paths[2]} to "
                              f"{paths[4]}: 5 mm, median 2.5 mm); expected one spacing "
                              f"(within 1%).")


def test_spacing_within_the_tolerance_is_accepted(tmp_path):
    series, paths = write_series(tmp_path, origin=(0, 0, 0))
    os.remove(paths[4])
    write_slice(paths[4], series=series, position=(0, 0, 10.02), stored=stored_values(4))
    volume = read_dicom_series(tmp_path)                  # 2.52 mm instead of 2.5: 0.8%
    np.testing.assert_array_equal(volume.array, expected_volume())
    assert volume.affine[2, 2] == pytest.approx(10.02 / 4)


@pytest.mark.parametrize("k", [0, 2, 4])
def test_a_slice_beside_the_stack_is_refused(tmp_path, k):
    series, paths = write_series(tmp_path, origin=(0, 0, 0))
    os.remove(paths[k])
    write_slice(paths[k], series=series, position=(3, 0, 2.5 * k), stored=stored_values(k))
    message = one_line_error(tmp_path)
    assert message.startswith(f"{paths[k]}: lies 3 mm beside")
    assert f"mm beside the line through the other slices of series {series}" in message


def test_a_slice_without_its_position_is_refused(tmp_path):
    series, _ = write_series(tmp_path, origin=(0, 0, 0))
    bare = tmp_path / "capture.dcm"
    write_slice(bare, series=series, position=None)
    assert one_line_error(tmp_path).startswith(
        f"{bare}: ImagePositionPatient is None; expected 3 numbers")


def test_an_orientation_that_is_not_orthonormal_is_refused(tmp_path):
    bad = tmp_path / "IM0001.dcm"
    write_slice(bad, series=generate_uid(), position=(0, 0, 0), orientation=(1, 0, 0, 1, 0, 0))
    assert one_line_error(tmp_path).startswith(
        f"{bad}: ImageOrientationPatient [1.0, 0.0, 0.0, 1.0, 0.0, 0.0] is not two "
        f"orthogonal unit vectors")


def test_multi_frame_and_colour_files_are_refused(tmp_path):
    frames = tmp_path / "enhanced.dcm"
    ds = Dataset()
    ds.SOPClassUID, ds.SOPInstanceUID = MRImageStorage, generate_uid()
    ds.SeriesInstanceUID = generate_uid()
    ds.set_pixel_data(np.zeros((3, ROWS, COLUMNS), np.uint16), "MONOCHROME2", 16)
    ds.save_as(frames, enforce_file_format=True)
    assert one_line_error(tmp_path).startswith(
        f"{frames}: is a multi-frame DICOM image (3 frames); expected one slice per file.")
    os.remove(frames)
    colour = tmp_path / "screenshot.dcm"
    ds = Dataset()
    ds.SOPClassUID, ds.SOPInstanceUID = CTImageStorage, generate_uid()
    ds.SeriesInstanceUID = generate_uid()
    ds.set_pixel_data(np.zeros((ROWS, COLUMNS, 3), np.uint8), "RGB", 8)
    ds.save_as(colour, enforce_file_format=True)
    assert one_line_error(tmp_path).startswith(
        f"{colour}: has 3 samples per pixel (a colour image)")


def test_a_slice_without_a_series_uid_is_refused(tmp_path):
    lost = tmp_path / "IM0001.dcm"
    write_slice(lost, series=None, position=(0, 0, 0))
    assert one_line_error(tmp_path).startswith(f"{lost}: has no SeriesInstanceUID;")


def test_damaged_files_are_refused(tmp_path):
    series, paths = write_series(tmp_path, origin=(0, 0, 0))
    damaged = tmp_path / "IM0100.dcm"
    damaged.write_bytes(b"\0" * 128 + b"DICM" + np.random.default_rng(0).bytes(300))
    assert one_line_error(tmp_path).startswith(
        f"{damaged}: has the DICOM marker but no SOP Class UID;")
    os.remove(damaged)
    data = open(paths[1], "rb").read()
    open(paths[1], "wb").write(data[:-40])                   # truncated pixel data
    assert one_line_error(tmp_path).startswith(f"{paths[1]}: cannot decode its pixel data (")


def test_an_unreadable_file_is_refused_not_skipped(tmp_path):
    _, paths = write_series(tmp_path, origin=(0, 0, 0))
    os.chmod(paths[0], 0)
    try:
        if os.access(paths[0], os.R_OK):
            pytest.skip("this user reads files without read permission (root)")
        assert one_line_error(tmp_path).startswith(
            f"{paths[0]}: cannot be opened (PermissionError: ")
    finally:
        os.chmod(paths[0], 0o644)


def test_a_dicom_folder_reads_as_a_volume_through_the_readers(tmp_path):
    from spatial_tf.data import read_volume, volume_shape, voxel_spacing, write_volume

    folder = tmp_path / "series"
    write_series(folder, origin=(0.0, 0.0, 0.0))
    series = read_dicom_series(folder)
    np.testing.assert_array_equal(read_volume(folder), series.array)
    assert volume_shape(folder) == (COLUMNS, ROWS, SLICES)
    assert voxel_spacing(folder) == pytest.approx((0.6, 0.8, 2.5))
    with pytest.raises(ValueError, match=r"series: is a folder; expected a file to write the "
                                         r"volume to, ending in \.nii\.gz, \.nii, \.npy"):
        write_volume(folder, np.zeros((2, 2, 2)))
