"""Every volume file checked once, before any work: check_volumes and volume_dataset refuse
each bad input when the dataset is made (not in a training step), say a --nonfinite
replacement once per file, and print shapes in each file's own axis order."""
import logging
import os
import time

import nibabel as nib
import numpy as np
import pytest

from spatial_tf import data
from spatial_tf.data import check_volumes, volume_dataset

# file axis 0 runs to superior, 1 to the right, 2 to anterior: a file stored 13x10x9
# is read (RAS+) as 10x9x13
SRA = np.array([[0, 1.5, 0, 0], [0, 0, 2.0, 0], [2.5, 0, 0, 0], [0, 0, 0, 1.0]])
STORED = (13, 10, 9)


def write_pair(folder, name, ext=".npy", shape=(6, 5, 4), affine=None):
    """A small image (float32) and its labels (0, 1, 2) in ``folder``; NIfTI with
    ``affine`` (identity by default) for ``ext`` .nii / .nii.gz."""
    rng = np.random.default_rng(len(name))
    image = rng.normal(size=shape).astype(np.float32)
    labels = rng.integers(0, 3, size=shape).astype(np.int16)
    paths = (os.path.join(folder, name + ext), os.path.join(folder, name + "_labels" + ext))
    for path, volume in zip(paths, (image, labels)):
        if ext == ".npy":
            np.save(path, volume)
        else:
            nib.save(nib.Nifti1Image(volume, np.eye(4) if affine is None else affine), path)
    return paths


def save(path, volume, affine=None):
    if path.endswith(".npy"):
        np.save(path, volume)
    else:
        nib.save(nib.Nifti1Image(volume, np.eye(4) if affine is None else affine), path)


def nonfinite_image(path):
    volume = np.zeros((6, 5, 4), np.float32)
    volume[0, 0, 0], volume[1, 2, 3] = np.nan, np.inf
    save(path, volume)


def bad_labels(values):
    def damage(path):
        save(path, np.full((6, 5, 4), values, np.float32 if values % 1 else np.int16))
    return damage


# each bad input, which file of the second pair it damages, and the message
BAD = {
    "nan and inf voxels": (0, nonfinite_image,
                           "{image}: 2 of 120 voxels are not finite (1 NaN, 1 infinite); "
                           "expected finite intensities. Fix: repair the file, or replace "
                           "them by a value you choose: read_volume(path, nonfinite=0.0), or "
                           "--nonfinite 0 on the command line."),
    "labels of another shape": (1, lambda p: save(p, np.zeros((6, 5, 3), np.int16)),
                                "{labels}: label shape (6, 5, 3) differs from the image's "
                                "(6, 5, 4) ({image}). Expected the same voxel grid. Fix: pair "
                                "each image with its own label file."),
    "a 4D image": (0, lambda p: save(p, np.zeros((6, 5, 4, 2), np.float32)),
                   "{image}: has shape (6, 5, 4, 2); expected a 3D volume (depth, height, "
                   "width). Fix: save one 3D volume per file (e.g. drop a trailing axis of "
                   "size 1 with numpy.squeeze)."),
    "a negative label": (1, bad_labels(-1), "{labels}: holds class -1; expected classes in "
                                            "[0, 3). Fix: pass num_classes=3 or remap the "
                                            "labels."),
    "a class too many": (1, bad_labels(3), "{labels}: holds class 3; expected classes in "
                                           "[0, 3). Fix: pass num_classes=4 or remap the "
                                           "labels."),
    "labels not whole numbers": (1, bad_labels(0.5),
                                 "{labels}: labels are not whole numbers. Expected integer "
                                 "class indices. Fix: round or re-export the label mask."),
}


@pytest.mark.parametrize("ext", [".npy", ".nii.gz"])
@pytest.mark.parametrize("case", sorted(BAD))
def test_each_bad_input_is_refused_when_the_dataset_is_made(tmp_path, case, ext):
    which, damage, message = BAD[case]
    write_pair(str(tmp_path), "a", ext)
    image, labels = write_pair(str(tmp_path), "b", ext)
    damage((image, labels)[which])
    before = {p: os.path.getmtime(tmp_path / p) for p in os.listdir(tmp_path)}
    pairs = [(str(tmp_path / f"a{ext}"), str(tmp_path / f"a_labels{ext}")), (image, labels)]
    for make in (lambda: check_volumes(pairs, 3),
                 lambda: volume_dataset(pairs, 3, same_shape=False)):
        with pytest.raises(ValueError) as e:
            make()
        assert str(e.value) == message.format(image=image, labels=labels)
    # the files are only read
    assert {p: os.path.getmtime(tmp_path / p) for p in os.listdir(tmp_path)} == before


def test_the_good_pairs_give_their_shapes_and_examples(tmp_path):
    pairs = [write_pair(str(tmp_path), "a"), write_pair(str(tmp_path), "b", shape=(3, 5, 4))]
    assert check_volumes(pairs, 3) == [(6, 5, 4), (3, 5, 4)]
    ds = volume_dataset(pairs, 3, same_shape=False)
    assert [tuple(labels.shape) for _, labels in ds] == [(6, 5, 4), (3, 5, 4)]
    with pytest.raises(ValueError, match=r"b\.npy: volume shape \(3, 5, 4\) differs from the "
                                         r"first volume's \(6, 5, 4\)"):
        check_volumes(pairs, 3, same_shape=True)
    with pytest.raises(ValueError) as e:
        check_volumes([], 3)
    assert str(e.value) == ("check_volumes: pairs is empty; expected (image_path, label_path) "
                            "pairs.")


def test_a_replaced_voxel_is_said_once_per_file_however_often_it_is_read(tmp_path, caplog):
    write_pair(str(tmp_path), "a", ".nii.gz")
    image, labels = write_pair(str(tmp_path), "b", ".nii.gz")
    nonfinite_image(image)
    pairs = [(str(tmp_path / "a.nii.gz"), str(tmp_path / "a_labels.nii.gz")), (image, labels)]
    with caplog.at_level(logging.WARNING, logger="spatial_tf"):
        ds = volume_dataset(pairs, 3, nonfinite=-7.0)
        epochs = [list(ds) for _ in range(3)]   # every epoch reads the files again
    notices = [r.getMessage() for r in caplog.records if "replaced by" in r.getMessage()]
    assert notices == [f"spatial_tf: {image}: 2 NaN or infinite voxels replaced by -7.0 "
                       f"(--nonfinite)."]
    for examples in epochs:
        replaced = examples[1][0].numpy()[..., 0]
        assert replaced[0, 0, 0] == replaced[1, 2, 3] == -7.0 and np.isfinite(replaced).all()


def test_shapes_checked_before_are_not_read_twice(tmp_path, monkeypatch):
    from spatial_tf.data import checking

    pairs = [write_pair(str(tmp_path), "a")]
    shapes = check_volumes(pairs, 3)

    def again(*args, **kwargs):
        raise AssertionError("a second pass over the files")

    monkeypatch.setattr(checking, "check_volumes", again)
    ds = volume_dataset(pairs, 3, shapes=shapes)
    assert ds.element_spec[1].shape.as_list() == [6, 5, 4]
    with pytest.raises(AssertionError, match="a second pass"):
        volume_dataset(pairs, 3)


def test_a_slow_pass_shows_a_bar_that_goes_when_done(capsys):
    from spatial_tf.data.checking import with_progress

    assert list(with_progress([1, 2], False, "checking volumes")) == [1, 2]
    assert capsys.readouterr().err == ""
    for _ in with_progress([1, 2], True, "checking volumes"):
        time.sleep(0.6)   # the bar shows once the pass takes more than a second
    err = capsys.readouterr().err
    assert "checking volumes: 100%|" in err and "2/2" in err


def test_messages_give_shapes_in_each_files_own_axis_order(tmp_path):
    image, labels = str(tmp_path / "sra.nii.gz"), str(tmp_path / "sra_labels.nii.gz")
    save(image, np.zeros(STORED, np.float32), SRA)
    save(labels, np.zeros((13, 10, 8), np.int16), SRA)      # one slice short, stored alike
    assert data.stored_shape(image) == STORED and data.volume_shape(image) == (10, 9, 13)
    assert data.file_axes(image) == (1, 2, 0)
    with pytest.raises(ValueError) as e:
        check_volumes([(image, labels)], 3)
    assert str(e.value).startswith(f"{labels}: label shape (13, 10, 8) differs from the "
                                   f"image's (13, 10, 9) ({image}). Expected")
    # labels stored in another order than the image: the RAS+ shapes compared are given
    save(labels, np.zeros((10, 9, 12), np.int16))
    with pytest.raises(ValueError) as e:
        check_volumes([(image, labels)], 3)
    assert str(e.value).startswith(
        f"{labels}: label shape (10, 9, 12) differs from the image's (13, 10, 9) ({image}); "
        f"in RAS+ voxel order, as compared: (10, 9, 12) and (10, 9, 13). Expected")
    # a 4D image: its shape as stored
    save(image, np.zeros(STORED + (2,), np.float32), SRA)
    with pytest.raises(ValueError, match=r"sra\.nii\.gz: has shape \(13, 10, 9, 2\); expected "
                                         r"a 3D volume"):
        check_volumes([(image, labels)], 3)


def test_a_npy_pair_with_a_spacing_is_refused_before_any_file_is_read(tmp_path):
    pairs = [write_pair(str(tmp_path), "a")]
    nonfinite_image(pairs[0][0])   # would be refused too, but the spacing comes first
    with pytest.raises(ValueError, match=r"a\.npy: a \.npy file records no voxel spacing"):
        volume_dataset(pairs, 3, spacing=(2, 2, 2))
