"""train, evaluate and predict read every input file once and check it before any work:
a bad file is one line, exit status 2, and the model dir as it was; a --nonfinite
replacement is said once per file; shapes are printed in the file's own voxel order (or
labelled); a --tile larger than the volume is warned about."""
import logging
import os
import sys

import nibabel as nib
import numpy as np
import pytest

from spatial_tf.__main__ import main

sys.path.insert(0, os.path.dirname(__file__))   # the doctest collection imports it too
from test_any_size import AFFINE, TINY, forced_model_dir, listing, write_pair

# file axis 0 runs to superior, 1 to the right, 2 to anterior: a volume stored 13x10x9 is
# 10x9x13 in RAS+ voxel order, the order the model sees
SRA = np.array([[0, 1.5, 0, 0], [0, 0, 2.0, 0], [2.5, 0, 0, 0], [0, 0, 0, 1.0]])
NONFINITE = ("{image}: 2 of 1170 voxels are not finite (1 NaN, 1 infinite); expected finite "
             "intensities. Fix: repair the file, or replace them by a value you choose: "
             "read_volume(path, nonfinite=0.0), or --nonfinite 0 on the command line.")


def contents(folder):
    """Every file in ``folder`` (recursively) with its size and modification time."""
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            found[os.path.relpath(path, folder)] = (os.path.getsize(path),
                                                    os.path.getmtime(path))
    return found


def nonfinite_pair(folder, name, seed=0):
    """``write_pair``'s volumes with a NaN and an infinite voxel in the image."""
    image, labels = write_pair(folder, name, (13, 10, 9), seed=seed)
    scan = nib.load(image)
    volume = scan.get_fdata(dtype=np.float32)
    volume[0, 0, 0], volume[4, 5, 6] = np.nan, -np.inf
    nib.save(nib.Nifti1Image(volume, AFFINE, scan.header), image)
    return image, labels


def damage(case, folder):
    """A ``--data`` of one bad input (a directory of pairs, or a TFRecord file); returns
    ``(data, image, labels)``."""
    from spatial_tf import data

    if case == "nonfinite":
        return (folder,) + nonfinite_pair(folder, "ct")
    image, labels = write_pair(folder, "ct", (13, 10, 9), seed=0)
    stored = {"labels": np.zeros((13, 10, 8), np.int16), "negative": np.full((13, 10, 9), -1),
              "class": np.full((13, 10, 9), 3), "fraction": np.full((13, 10, 9), 0.5)}
    if case in stored:
        nib.save(nib.Nifti1Image(stored[case].astype(np.float32), AFFINE), labels)
    elif case == "4d":
        nib.save(nib.Nifti1Image(np.zeros((13, 10, 9, 2), np.float32), AFFINE), image)
    elif case == "tfrecord-nonfinite":
        good = data.load_example(image, labels, 3)
        bad = (good[0].copy(), good[1])
        bad[0][0, 0, 0], bad[0][4, 5, 6] = np.nan, np.inf
        records = os.path.join(os.path.dirname(folder), "volumes.tfrecord")
        data.write_tfrecords(records, [good, bad])
        return records, image, labels
    return folder, image, labels


MESSAGES = {
    "nonfinite": "argument --data: " + NONFINITE,
    "labels": "argument --data: {labels} has shape (13, 10, 8); expected (13, 10, 9), the shape "
              "of {image}. Fix: pair each image with its own label volume, on the same voxel "
              "grid",
    "4d": "argument --data: {image} has shape (13, 10, 9, 2); expected a 3D volume (depth, "
          "height, width). Fix: save one 3D volume per file (e.g. drop a trailing axis of size "
          "1 with numpy.squeeze)",
    "negative": "argument --data: {labels} holds label -1; expected classes from 0 to 2. Fix: "
                "remap the labels to 0, 1, ...",
    "fraction": "argument --data: {labels}: labels are not whole numbers. Expected integer "
                "class indices. Fix: round or re-export the label mask.",
    "tfrecord-nonfinite": "argument --data: {data} (record 1): 2 of 1170 voxels are not "
                          "finite; expected finite intensities. Fix: rewrite the record with "
                          "finite values, or replace them by a value you choose with "
                          "--nonfinite, e.g. --nonfinite 0",
}
CLASS = {"train": "argument --classes: 3 is not allowed with {labels}, which holds class 3; "
                  "expected more classes than the largest label. Fix: --classes 4, or remap "
                  "the labels",
         "evaluate": "argument --data: {labels} holds class 3; expected classes from 0 to 2, "
                     "the model's. Fix: remap the labels, or train a model with --classes 4"}


@pytest.mark.parametrize("case", sorted(MESSAGES) + ["class"])
@pytest.mark.parametrize("command", ["train", "train again", "evaluate"])
def test_a_bad_input_is_one_line_exit_2_and_the_model_dir_as_it_was(tmp_path, capsys, command,
                                                                     case):
    where, image, labels = damage(case, str(tmp_path / "data"))
    model_dir = str(tmp_path / "model")
    if command == "train":
        argv = ["train", "unet3d", "--model-dir", model_dir, "--cores", "2", "--steps", "1"] + TINY
    else:   # a model dir with a record and a checkpoint, which must not change
        forced_model_dir(model_dir)
        argv = ["train", "unet3d", "--model-dir", model_dir, "--steps", "2"] + TINY \
            if command == "train again" else ["evaluate", "--model-dir", model_dir,
                                              "--cores", "1"]
    before = contents(model_dir)
    assert main(argv + ["--data", where]) == 2
    message = (CLASS[command.split()[0]] if case == "class" else MESSAGES[case]).format(
        data=where, image=image, labels=labels)
    assert capsys.readouterr().err == f"python -m spatial_tf {argv[0]}: error: {message}\n"
    assert contents(model_dir) == before
    if command == "train":
        assert listing(model_dir) == []


@pytest.mark.parametrize("case", ["nonfinite", "labels"])
def test_predict_refuses_a_bad_input_in_one_line_and_writes_nothing(tmp_path, capsys, case):
    image, labels = write_pair(str(tmp_path / "data"), "ct", (13, 10, 9), seed=0)
    if case == "nonfinite":
        image, labels = nonfinite_pair(str(tmp_path / "data"), "ct")
        message = "argument --input: " + NONFINITE.format(image=image)
    else:
        nib.save(nib.Nifti1Image(np.zeros((13, 10, 8), np.int16), AFFINE), labels)
        message = (f"argument --labels: {labels}: label shape (13, 10, 8) differs from the "
                   f"image's (13, 10, 9) ({image}). Expected the same voxel grid. Fix: pair each "
                   f"image with its own label file.")
    model_dir = forced_model_dir(str(tmp_path / "model"))
    before = contents(model_dir)
    output = str(tmp_path / "out" / "mask.nii.gz")
    assert main(["predict", "--model-dir", model_dir, "--cores", "1", "--input", image,
                 "--labels", labels, "--output", output]) == 2
    assert capsys.readouterr().err == f"python -m spatial_tf predict: error: {message}\n"
    assert contents(model_dir) == before and not os.path.exists(tmp_path / "out")


def notices(caplog):
    return [r.getMessage() for r in caplog.records if "replaced by" in r.getMessage()]


def test_evaluate_and_predict_say_each_replacement_once(tmp_path, capsys, caplog):
    folder = str(tmp_path / "data")
    pairs = [nonfinite_pair(folder, f"ct{i}", seed=i) for i in range(2)]
    model_dir = forced_model_dir(str(tmp_path / "model"))
    with caplog.at_level(logging.WARNING, logger="spatial_tf"):
        assert main(["evaluate", "--model-dir", model_dir, "--cores", "1", "--data", folder,
                     "--nonfinite", "0"]) == 0
    assert "held-out volumes, of 13x10x9" in capsys.readouterr().out
    assert notices(caplog) == [f"spatial_tf: {image}: 2 NaN or infinite voxels replaced by 0.0 "
                               f"(--nonfinite)." for image, _ in pairs]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="spatial_tf"):
        assert main(["predict", "--model-dir", model_dir, "--cores", "1", "--input",
                     pairs[0][0], "--labels", pairs[0][1], "--output",
                     str(tmp_path / "mask.nii.gz"), "--nonfinite", "-1000"]) == 0
    assert notices(caplog) == [f"spatial_tf: {pairs[0][0]}: 2 NaN or infinite voxels replaced "
                               f"by -1000.0 (--nonfinite)."]


def test_a_tfrecord_files_replacements_are_said_once_per_record(tmp_path, capsys, caplog):
    records, _, _ = damage("tfrecord-nonfinite", str(tmp_path / "data"))
    model_dir = forced_model_dir(str(tmp_path / "model"))
    with caplog.at_level(logging.WARNING, logger="spatial_tf"):
        assert main(["evaluate", "--model-dir", model_dir, "--cores", "1", "--data", records,
                     "--nonfinite", "0"]) == 0
    assert "held-out volumes, of 13x10x9, zero-padded" in capsys.readouterr().out
    assert notices(caplog) == [f"spatial_tf: {records} (record 1): 2 NaN or infinite voxels "
                               f"replaced by 0.0 (--nonfinite)."]


@pytest.mark.emulator
@pytest.mark.slow
def test_train_says_each_replacement_once_and_trains(tmp_path, capsys, caplog):
    folder = str(tmp_path / "data")
    image, _ = nonfinite_pair(folder, "ct")
    model_dir = str(tmp_path / "model")
    with caplog.at_level(logging.WARNING, logger="spatial_tf"):
        assert main(["train", "unet3d", "--data", folder, "--model-dir", model_dir,
                     "--cores", "1", "--device", "cpu", "--steps", "3", "--nonfinite", "0"]
                    + TINY) == 0
    assert "step 3: loss " in capsys.readouterr().out
    assert notices(caplog) == [f"spatial_tf: {image}: 2 NaN or infinite voxels replaced by 0.0 "
                               f"(--nonfinite)."]


def sra_pair(folder, labels_shape=(13, 10, 9), labels_affine=SRA):
    """A volume stored 13x10x9 with the SRA affine (10x9x13 in RAS+ voxel order) and its
    labels."""
    from spatial_tf import data

    os.makedirs(folder, exist_ok=True)
    image, made = data.synthetic_ct((10, 9, 13), seed=3)   # RAS+ order
    paths = os.path.join(folder, "sra.nii.gz"), os.path.join(folder, "sra_labels.nii.gz")
    nib.save(nib.Nifti1Image(data.from_ras(image[..., 0], SRA), SRA), paths[0])
    labels = data.from_ras(made, SRA).astype(np.int16)
    if labels_shape != labels.shape:
        labels = np.zeros(labels_shape, np.int16)
    nib.save(nib.Nifti1Image(labels, labels_affine), paths[1])
    return paths


def test_predict_and_evaluate_give_shapes_in_the_files_order(tmp_path, capsys):
    image, labels = sra_pair(str(tmp_path / "data"))
    assert nib.load(image).shape == (13, 10, 9)
    model_dir = forced_model_dir(str(tmp_path / "model"))
    output = str(tmp_path / "mask.nii.gz")
    assert main(["predict", "--model-dir", model_dir, "--cores", "1", "--input", image,
                 "--output", output]) == 0
    assert capsys.readouterr().out == \
        f"wrote {output} (mask, 13x10x9, classes [1]) and {tmp_path / 'mask.png'}\n"
    assert nib.load(output).shape == (13, 10, 9)
    assert main(["evaluate", "--model-dir", model_dir, "--cores", "1", "--data",
                 str(tmp_path / "data")]) == 0
    assert (" held-out volume, of 10x9x13 (RAS+ voxel order; 13x10x9 in the file), "
            "zero-padded at the end of each axis to 10x10x14 (padding masked out)"
            in capsys.readouterr().out)
    # resampled to the model's spacing: the shapes the model saw are labelled
    from spatial_tf.commands import volumes

    volumes.write_record(model_dir, {**volumes.read_record(model_dir), "spacing": [3, 3, 3]})
    assert main(["predict", "--model-dir", model_dir, "--cores", "1", "--input", image,
                 "--output", output]) == 0
    assert ("(mask, 13x10x9, classes [1], predicted at 3x3x3 mm (5x6x11) from 1.5x2x2.5 mm "
            "(RAS+ voxel order))" in capsys.readouterr().out)


@pytest.mark.parametrize("labels_shape, labels_affine, said", [
    ((13, 10, 8), SRA, "has shape (13, 10, 8); expected (13, 10, 9), the shape of {image}. Fix"),
    ((10, 9, 12), np.eye(4), "has shape (10, 9, 12); expected (13, 10, 9), the shape of {image}; "
                             "in RAS+ voxel order, as compared: (10, 9, 12) and (10, 9, 13). "
                             "Fix"),
], ids=["stored alike", "stored otherwise"])
def test_a_label_shape_mismatch_gives_each_files_own_shape(tmp_path, capsys, labels_shape,
                                                           labels_affine, said):
    image, labels = sra_pair(str(tmp_path / "data"), labels_shape, labels_affine)
    model_dir = str(tmp_path / "model")
    assert main(["train", "unet3d", "--data", str(tmp_path / "data"), "--model-dir", model_dir,
                 "--cores", "1", "--steps", "1"] + TINY) == 2
    assert f"argument --data: {labels} {said.format(image=image)}" in capsys.readouterr().err
    assert listing(model_dir) == []


def test_train_labels_the_order_of_the_shapes_it_prints(capsys):
    import argparse

    import tensorflow as tf

    from spatial_tf.commands import sizing, train

    args = argparse.Namespace(model="unet3d", preset=None, classes=3, dtype_policy="float32",
                              steps=1, model_dir="runs/a", data="scans", spacing=None,
                              modality="ct", bn_momentum=0.9)
    spec = [[1, 1, 1, 1, 1], [1, 1, 1, 1]]
    for axes, order, files in [((1, 2, 0), " (RAS+ voxel order)",
                                " (RAS+ voxel order; 13x10x9 in the file)"),
                               (sizing.RAS_AXES, "", "")]:
        train._say_what("train", args, tf.distribute.get_strategy(), spec,
                        sizing.Scan([(10, 9, 13)], [axes]), (10, 10, 14))
        out = capsys.readouterr().out
        assert f"train: unet3d 10x10x14{order}, 3 classes, float32 on " in out
        assert (f"of 10x9x13{files}, zero-padded at the end of each axis to 10x10x14 "
                f"(padding masked out); --modality ct" in out)


@pytest.mark.parametrize("volume, tile, warning", [
    ("sra", "16,16,16", "--tile 16,16,16 is larger than the volume on axes D, H, W (10x9x13 in "
                        "RAS+ voxel order, 13x10x9 in the file; 10x10x14 once padded for the "
                        "model), so the volume is zero-padded up to the tile there: more memory "
                        "and time, and padding the model was not trained with. Fix: leave "
                        "--tile out to predict the whole volume at once, or pass --tile "
                        "10,10,14 or smaller"),
    ("ras", "16,8,8", "--tile 16,8,8 is larger than the volume on axis D (13x10x9; 14x10x10 "
                      "once padded for the model), so the volume is zero-padded up to the tile "
                      "there: more memory and time, and padding the model was not trained "
                      "with. Fix: leave --tile out to predict the whole volume at once, or pass "
                      "--tile 14,8,8 or smaller"),
    ("ras", "trained", None),
    ("ras", "14,10,10", None),
])
def test_a_tile_larger_than_the_volume_is_warned_about(tmp_path, capsys, volume, tile, warning):
    folder = str(tmp_path / "data")
    image, _ = sra_pair(folder) if volume == "sra" else \
        write_pair(folder, "ct", (13, 10, 9), seed=1)
    model_dir = forced_model_dir(str(tmp_path / "model"))
    output = str(tmp_path / "mask.nii.gz")
    assert main(["predict", "--model-dir", model_dir, "--cores", "1", "--input", image,
                 "--output", output, "--tile", tile]) == 0
    err = capsys.readouterr().err.splitlines()
    said = [line for line in err if "warning" in line]
    assert said == ([] if warning is None else
                    [f"python -m spatial_tf predict: warning: {warning}"])
    assert nib.load(output).shape == (13, 10, 9)
    np.testing.assert_array_equal(np.asarray(nib.load(output).dataobj), 1)
