"""train --spacing: NIfTI volumes resampled from their headers' spacing, the spacing
recorded and reused by evaluate (Dice on each volume's own grid) and predict (the mask
resampled back to the input's exact shape, affine and header); inputs without a
spacing refused before any work."""
import os
import sys

import nibabel as nib
import numpy as np
import pytest

from spatial_tf.__main__ import main
from spatial_tf.data import resample_to_spacing

sys.path.insert(0, os.path.dirname(__file__))   # the doctest collection imports it too
from test_any_size import (AFFINE, SIZES, TINY, dice_rows, forced_dice, forced_model_dir,
                           listing, write_pair)

ZOOMS = (1.5, 2.0, 2.5)   # AFFINE's voxel sizes


def spacing_model_dir(model_dir, spacing=(3.0, 3.0, 3.0)):
    """``forced_model_dir`` (class 1 everywhere) whose record says it resamples."""
    from spatial_tf.commands import volumes

    forced_model_dir(model_dir)
    record = volumes.read_record(model_dir)
    volumes.write_record(model_dir, {**record, "spacing": list(spacing)})
    return model_dir


@pytest.mark.parametrize("argv, message", [
    (["--spacing", "0"], "argument --spacing: '0' is not allowed; expected a voxel spacing in "
                         "mm: D,H,W positive numbers such as 1.5,1.5,3, or one such as 2 for all "
                         "three axes"),
    (["--spacing", "1,2"], "argument --spacing: '1,2' is not allowed"),
    (["--spacing", "2"], "argument --spacing: not allowed without --data, which records no "
                         "voxel spacing; expected it with a --data directory of NIfTI volumes "
                         "(.nii, .nii.gz), whose headers give it. Fix: leave --spacing out, or "
                         "pass NIfTI volumes"),
    (["--spacing", "2", "--data", "{records}"],
     "argument --spacing: not allowed with the TFRecord file {records}, which records no voxel "
     "spacing; expected it with a --data directory"),
])
def test_bad_spacing_stops_at_parsing(parse_error, tmp_path, argv, message):
    records = tmp_path / "volumes.tfrecord"
    records.write_bytes(b"")
    argv = [a.format(records=records) for a in argv]
    err = parse_error(["train", "unet3d", "--model-dir", str(tmp_path / "m")] + argv)
    assert message.format(records=records) in err
    assert not (tmp_path / "m").exists()


def test_spacing_is_refused_with_retinanet(parse_error, tmp_path):
    err = parse_error(["train", "retinanet", "--model-dir", str(tmp_path / "m"), "--spacing", "2"])
    assert "argument --spacing: not allowed with retinanet; expected it only with unet3d" in err


def test_npy_volumes_are_refused_before_anything_is_written(tmp_path, capsys):
    folder = tmp_path / "data"
    folder.mkdir()
    np.save(folder / "ct.npy", np.zeros((13, 10, 9), np.float32))
    np.save(folder / "ct_labels.npy", np.zeros((13, 10, 9), np.int32))
    model_dir = str(tmp_path / "model")
    assert main(["train", "unet3d", "--data", str(folder), "--model-dir", model_dir,
                 "--cores", "2", "--spacing", "1.5,1.5,3"] + TINY) == 2
    assert capsys.readouterr().err == (
        f"python -m spatial_tf train: error: argument --data: {folder / 'ct.npy'} is a .npy "
        f"volume, which records no voxel spacing; expected NIfTI volumes (.nii, .nii.gz) to "
        f"resample to 1.5x1.5x3 mm (--spacing, recorded in model.json). Fix: save the volumes "
        f"as NIfTI with their voxel sizes, or train without --spacing\n")
    assert listing(model_dir) == []


@pytest.fixture(scope="module")
def resampled(tmp_path_factory):
    """Two odd-sized NIfTI volumes at 1.5 x 2 x 2.5 mm and a model trained at 3 mm on
    them (20 steps, 2 cores), with what train printed."""
    import contextlib
    import io

    root = tmp_path_factory.mktemp("spacing")
    folder = str(root / "data")
    for i, shape in enumerate(SIZES):
        write_pair(folder, f"ct{i}", shape, seed=i)
    model_dir = str(root / "model")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["train", "unet3d", "--data", folder, "--model-dir", model_dir, "--cores",
                     "2", "--steps", "20", "--spacing", "3"] + TINY) == 0
    return folder, model_dir, out.getvalue()


@pytest.mark.emulator
@pytest.mark.slow
def test_train_resamples_records_and_resumes_with_the_spacing(resampled, capsys):
    from spatial_tf.commands import volumes

    folder, model_dir, printed = resampled
    # 13x10x9 -> 6.5, 6.7, 7.5 -> 7x7x8; 11x12x9 -> 5.5, 8, 7.5 -> 6x8x8; padded to 8x8x8
    assert ("2 volumes resampled to 3x3x3 mm, up to 7x8x8, zero-padded at the end of each "
            "axis to 8x8x8 (padding masked out)") in printed
    record = volumes.read_record(model_dir)
    assert (record["spacing"], record["shape"]) == ([3.0, 3.0, 3.0], [8, 8, 8])
    base = ["train", "unet3d", "--data", folder, "--model-dir", model_dir, "--cores", "2",
            "--steps", "20"] + TINY
    assert main(base) == 0          # resumed without --spacing: the recorded one
    assert "step 20: already trained to --steps 20" in capsys.readouterr().out
    assert main(base + ["--spacing", "2"]) == 2
    err = capsys.readouterr().err
    # at 2 mm: 10x10x11 and 8x12x11, padded to 12x12x12
    assert ("holds another model (shape [8, 8, 8] (asked [12, 12, 12]), spacing [3.0, 3.0, 3.0] "
            "(asked [2.0, 2.0, 2.0]))") in err, err


def own_grid_dice(mask, truth, classes=3):
    dice = []
    for k in range(classes):
        both = np.float32(np.sum((mask == k) & (truth == k)))
        total = np.float32(np.sum(mask == k) + np.sum(truth == k))
        dice.append(np.float32(2) * both / total if total else np.float32(1))
    return np.array(dice, np.float32)


@pytest.mark.emulator
@pytest.mark.slow
@pytest.mark.parametrize("index, cores", [(0, "1"), (0, "2"), (1, "1"), (1, "2")])
def test_evaluate_scores_the_mask_predict_writes(resampled, tmp_path, capsys, index, cores):
    """One volume at a time: evaluate pads it as predict does (to the training shape,
    8x8x8, on 1 or 2 cores), so the two see the same input."""
    import shutil

    folder, model_dir, _ = resampled
    one = tmp_path / "one"
    one.mkdir()
    image, labels = (os.path.join(folder, f"ct{index}{s}.nii.gz") for s in ("", "_labels"))
    shutil.copy(image, one)
    shutil.copy(labels, one)
    assert main(["evaluate", "--model-dir", model_dir, "--data", str(one), "--cores", cores]) == 0
    out = capsys.readouterr().out
    assert (f"on 1 held-out volume, resampled to 3x3x3 mm (of {['7x7x8', '6x8x8'][index]}, "
            f"zero-padded at the end of each axis to 8x8x8 (padding masked out)), Dice on each "
            f"volume's own grid") in out
    output = str(tmp_path / "mask.nii.gz")
    assert main(["predict", "--model-dir", model_dir, "--input", image, "--output", output]) == 0
    mask = np.asarray(nib.load(output).dataobj).astype(int)
    truth = np.asarray(nib.load(labels).dataobj).astype(int)
    assert mask.shape == truth.shape == SIZES[index]
    assert len(np.unique(mask)) > 1   # a model that tells classes apart, not a constant mask
    assert dice_rows(out)[:3] == [float(f"{v:.4f}") for v in own_grid_dice(mask, truth)]


@pytest.mark.emulator
@pytest.mark.slow
def test_evaluate_computes_dice_on_the_original_grid(tmp_path, capsys):
    folder = str(tmp_path / "data")
    labels = [nib.load(write_pair(folder, f"ct{i}", s, seed=i)[1]).get_fdata().astype(int)
              for i, s in enumerate(SIZES)]
    model_dir = spacing_model_dir(str(tmp_path / "model"))
    assert main(["evaluate", "--model-dir", model_dir, "--data", folder]) == 0
    out = capsys.readouterr().out
    expected = np.nanmean(np.stack([forced_dice(v, v.size) for v in labels]), axis=0)
    assert dice_rows(out) == [float(f"{v:.4f}") for v in expected] + \
        [float(f"{np.nanmean(expected):.4f}")]
    # on the 3 mm grid the class counts differ, and so would the Dice
    coarse = [resample_to_spacing(v, ZOOMS, (3, 3, 3), order=0) for v in labels]
    at_3mm = np.nanmean(np.stack([forced_dice(v, v.size) for v in coarse]), axis=0)
    assert f"{at_3mm[1]:.4f}" != f"{expected[1]:.4f}"


@pytest.mark.emulator
@pytest.mark.slow
def test_predict_resamples_back_to_the_inputs_shape_affine_and_header(tmp_path, capsys):
    image, labels = write_pair(str(tmp_path / "data"), "ct", (13, 10, 9), seed=4)
    model_dir = spacing_model_dir(str(tmp_path / "model"))
    output = str(tmp_path / "out" / "mask.nii.gz")
    assert main(["predict", "--model-dir", model_dir, "--input", image, "--labels", labels,
                 "--output", output]) == 0
    assert (f"wrote {output} (mask, 13x10x9, classes [1], predicted at 3x3x3 mm (7x7x8) from "
            f"1.5x2x2.5 mm)") in capsys.readouterr().out
    scan, mask = nib.load(image), nib.load(output)
    assert mask.shape == scan.shape == (13, 10, 9)
    np.testing.assert_array_equal(mask.affine, scan.affine)
    np.testing.assert_array_equal(mask.affine, AFFINE)
    assert mask.header.get_zooms() == scan.header.get_zooms() == ZOOMS
    assert mask.header["descrip"].item() == b"odd-sized scan"
    np.testing.assert_array_equal(np.asarray(mask.dataobj), np.ones((13, 10, 9), np.int16))


@pytest.mark.emulator
def test_inputs_without_a_spacing_are_refused_by_a_resampling_model(tmp_path, capsys):
    from spatial_tf import data

    model_dir = spacing_model_dir(str(tmp_path / "model"))
    record = os.path.join(model_dir, "model.json")
    npy = str(tmp_path / "ct.npy")
    np.save(npy, np.zeros((13, 10, 9), np.float32))
    assert main(["predict", "--model-dir", model_dir, "--input", npy]) == 2
    assert capsys.readouterr().err == (
        f"python -m spatial_tf predict: error: argument --input: {npy} is a .npy volume, which "
        f"records no voxel spacing; expected a NIfTI file (.nii, .nii.gz), because {model_dir} "
        f"resamples to 3x3x3 mm (--spacing, in {record}). Fix: save the volume as NIfTI with "
        f"its voxel sizes\n")
    records = str(tmp_path / "volumes.tfrecord")
    data.write_tfrecords(records, [data.load_example(*write_pair(str(tmp_path / "d"), "ct",
                                                                 (13, 10, 9), seed=0), 3)])
    assert main(["evaluate", "--model-dir", model_dir, "--data", records]) == 2
    assert capsys.readouterr().err == (
        f"python -m spatial_tf evaluate: error: argument --data: {records} is a TFRecord file, "
        f"whose volumes record no voxel spacing; expected a directory of NIfTI volumes (.nii, "
        f".nii.gz) to resample to 3x3x3 mm, the model's spacing. Fix: pass NIfTI volumes, or "
        f"train a model without --spacing\n")
    assert not os.path.exists(os.path.join(model_dir, "prediction.npy"))


@pytest.mark.emulator
def test_a_record_without_spacing_does_not_resample(tmp_path, capsys):
    from spatial_tf.commands import volumes

    model_dir = forced_model_dir(str(tmp_path / "model"))       # written before --spacing
    assert "spacing" not in volumes.read_record(model_dir)
    image, _ = write_pair(str(tmp_path / "data"), "ct", (13, 10, 9), seed=4)
    output = str(tmp_path / "mask.nii.gz")
    assert main(["predict", "--model-dir", model_dir, "--input", image, "--output", output]) == 0
    assert f"wrote {output} (mask, 13x10x9, classes [1]) and" in capsys.readouterr().out
