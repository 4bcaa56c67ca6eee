"""train, evaluate and predict on NIfTI volumes of any size: padding masked out of Dice,
masks of the input's exact shape and space, options checked before the model dir is
written, --modality and --bn-momentum recorded and reused."""
import json
import os
import re

import nibabel as nib
import numpy as np
import pytest

from spatial_tf.__main__ import main

TINY = ["--depth", "2", "--filters", "4", "--no-progress"]
AFFINE = np.array([[-1.5, 0, 0, 90.0], [0, 2.0, 0, -126.0], [0, 0, 2.5, -72.0], [0, 0, 0, 1]])
SIZES = [(13, 10, 9), (11, 12, 9)]


def write_pair(folder, name, shape, seed, labels=None):
    """A synthetic CT volume (Hounsfield units) and its labels as NIfTI files with a
    non-trivial affine and header."""
    from spatial_tf import data

    os.makedirs(folder, exist_ok=True)
    image, made = data.synthetic_ct(shape, seed=seed)
    scan = nib.Nifti1Image(image[..., 0], AFFINE)
    scan.header.set_xyzt_units("mm", "sec")
    scan.header["descrip"] = b"odd-sized scan"
    paths = os.path.join(folder, f"{name}.nii.gz"), os.path.join(folder, f"{name}_labels.nii.gz")
    nib.save(scan, paths[0])
    nib.save(nib.Nifti1Image((made if labels is None else labels).astype(np.int16), AFFINE),
             paths[1])
    return paths


def dice_rows(out):
    return [float(v) for v in re.findall(r"^ +(?:\d+|mean) +(\d\.\d{4})$", out, re.M)]


def round_up(sizes, multiples):
    return [-(-s // m) * m for s, m in zip(sizes, multiples)]


def test_training_shape_rule():
    from spatial_tf.commands import sizing

    # no --crop: the largest size per axis, up to a multiple of split count x 2^(depth-1)
    assert sizing.training_shape(SIZES, [1, 2, 1, 1, 1], 2) == (16, 12, 10)
    assert sizing.training_shape([(50, 59, 48)], [1, 2, 2, 2, 1], 3) == (56, 64, 48)
    assert sizing.training_shape(SIZES, [1, 2, 1, 1, 1], 2, crop=(8, 8, 12)) == (8, 8, 12)
    assert sizing.crop_problem([8, 8, 12], [1, 2, 1, 1, 1], 2) is None
    assert sizing.crop_problem([8, 8, 9], [1, 2, 1, 1, 1], 2).endswith("e.g. --crop 8,8,10")


def test_training_examples_resume_with_the_same_crops(tmp_path):
    """Example i of the stream is cropped by seed i: a pipeline begun at example k (a
    resumed run) gives what an uninterrupted one gives from example k."""
    from spatial_tf.commands import volumes

    folder = str(tmp_path / "data")
    for i, shape in enumerate(SIZES):
        write_pair(folder, f"ct{i}", shape, seed=i)

    def stream(first):
        ds = volumes.source(folder, None, 3).repeat().skip(first % 2)
        return [tuple(t.numpy() for t in example) for example in
                volumes.training_examples(ds, (8, 8, 8), "ct", first=first).take(6 - first)]

    whole, resumed = stream(0), stream(3)
    for a, b in zip(whole[3:], resumed):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    # the same volume (examples 0 and 2) is cropped at another place when drawn again
    assert not np.array_equal(whole[0][0], whole[2][0])
    assert all(m.sum() == 8 * 8 * 8 for _, _, m in whole)  # 8^3 windows: no padding


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    """Two odd-sized volumes and a model trained on them (2 steps, 2 cores)."""
    root = tmp_path_factory.mktemp("odd")
    folder = str(root / "data")
    for i, shape in enumerate(SIZES):
        write_pair(folder, f"ct{i}", shape, seed=i)
    model_dir = str(root / "model")
    assert main(["train", "unet3d", "--data", folder, "--model-dir", model_dir, "--cores", "2",
                 "--steps", "2"] + TINY) == 0
    return folder, model_dir


@pytest.mark.emulator
@pytest.mark.slow
def test_odd_sizes_train_on_the_padded_shape_and_record_it(odd, capsys):
    from spatial_tf.commands import volumes

    _, model_dir = odd
    record = volumes.read_record(model_dir)
    # spec 1,2,1,1,1 and depth 2: axes divide by 2x2, 1x2, 1x2; the largest volume 13x12x9
    assert record["shape"] == round_up([13, 12, 9], [4, 2, 2]) == [16, 12, 10]
    assert (record["modality"], record["bn_momentum"], record["masked_bn"]) == ("ct", 0.9, True)
    model = volumes.build_model(record)
    assert model.get_layer("down0_bn1").momentum == 0.9
    # the padding is kept out of batch norm's statistics: the mask is the model's input
    assert [t.name for t in model.inputs] == ["image", "mask"]


def forced_model_dir(model_dir, favourite=1):
    """A model dir whose U-Net predicts class ``favourite`` on every voxel (a zero logits
    kernel, a bias favouring it), whatever the input."""
    from spatial_tf.commands import volumes
    from spatial_tf.train import Checkpointer

    record = {"model": "unet3d", "shape": [8, 8, 8], "classes": 3, "depth": 2, "filters": 2,
              "dtype_policy": "float32", "preset": None, "conv": "halo", "modality": "ct",
              "bn_momentum": 0.9}
    volumes.write_record(model_dir, record)
    model = volumes.build_model(record)
    kernel, bias = model.get_layer("logits").get_weights()
    bias = np.zeros_like(bias)
    bias[favourite] = 5.0
    model.get_layer("logits").set_weights([np.zeros_like(kernel), bias])
    Checkpointer(model_dir, model=model).save(1)
    return model_dir


def forced_dice(labels, voxels, favourite=1):
    """Dice per class, float32 as evaluate computes it, of predicting ``favourite`` on
    ``voxels`` voxels (the volume's own, or the padded count)."""
    truth = np.bincount(labels.ravel(), minlength=3).astype(np.float32)
    predicted = np.zeros(3, np.float32)
    predicted[favourite] = voxels
    hits = np.where(np.arange(3) == favourite, truth, 0).astype(np.float32)
    total = truth + predicted
    return np.where(total > 0, np.float32(2) * hits / np.where(total > 0, total, 1), 1)


@pytest.mark.emulator
@pytest.mark.slow
@pytest.mark.parametrize("cores, kind", [("1", "nifti"), ("2", "nifti"), ("1", "tfrecord")])
def test_evaluates_dice_is_the_dice_of_the_unpadded_volumes(tmp_path, capsys, cores, kind):
    from spatial_tf import data

    folder = str(tmp_path / "data")
    labels = [nib.load(write_pair(folder, f"ct{i}", s, seed=i)[1]).get_fdata().astype(int)
              for i, s in enumerate(SIZES)]
    if kind == "tfrecord":  # the same volumes, of two sizes, in one TFRecord file
        pairs = [data.load_example(os.path.join(folder, f"ct{i}.nii.gz"),
                                   os.path.join(folder, f"ct{i}_labels.nii.gz"), 3)
                 for i in range(2)]
        folder = str(tmp_path / "volumes.tfrecord")
        data.write_tfrecords(folder, pairs)
    model_dir = forced_model_dir(str(tmp_path / "model"))
    assert main(["evaluate", "--model-dir", model_dir, "--data", folder, "--cores", cores]) == 0
    out = capsys.readouterr().out
    shape = round_up([13, 12, 9], [2, 2, 2] if cores == "1" else [4, 2, 2])
    assert (f"on 2 held-out volumes, up to 13x12x9, zero-padded at the end of each axis to "
            f"{'x'.join(map(str, shape))} (padding masked out)") in out
    per_volume = np.stack([forced_dice(v, v.size) for v in labels])
    expected = np.nanmean(per_volume, axis=0)
    assert dice_rows(out) == [float(f"{v:.4f}") for v in expected] + \
        [float(f"{np.nanmean(expected):.4f}")]
    # with the padding counted, class 1 would score otherwise: the check tells them apart
    padded = np.nanmean(np.stack([forced_dice(v, np.prod(shape)) for v in labels]), axis=0)
    assert f"{padded[1]:.4f}" != f"{expected[1]:.4f}"


@pytest.mark.emulator
@pytest.mark.slow
def test_predict_writes_a_mask_of_the_inputs_shape_affine_and_header(tmp_path, capsys):
    image, labels = write_pair(str(tmp_path / "data"), "ct", (13, 10, 9), seed=4)
    model_dir = forced_model_dir(str(tmp_path / "model"))
    output = str(tmp_path / "out" / "mask.nii.gz")
    assert main(["predict", "--model-dir", model_dir, "--input", image, "--labels", labels,
                 "--output", output]) == 0
    assert f"wrote {output} (mask, 13x10x9, classes [1])" in capsys.readouterr().out
    scan, mask = nib.load(image), nib.load(output)
    assert mask.shape == scan.shape == (13, 10, 9)
    np.testing.assert_array_equal(mask.affine, scan.affine)
    assert mask.header.get_zooms() == scan.header.get_zooms() == (1.5, 2.0, 2.5)
    assert mask.header.get_xyzt_units() == ("mm", "sec")
    assert mask.header["descrip"].item() == b"odd-sized scan"
    assert mask.get_data_dtype() == np.int16
    np.testing.assert_array_equal(np.asarray(mask.dataobj), np.ones((13, 10, 9), np.int16))
    # .npy in, .npy out, of the input's shape
    np.save(tmp_path / "ct.npy", np.zeros((11, 12, 9), np.float32))
    assert main(["predict", "--model-dir", model_dir, "--input", str(tmp_path / "ct.npy"),
                 "--output", str(tmp_path / "mask.npy")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "mask.npy"), np.ones((11, 12, 9), np.int32))


@pytest.mark.emulator
@pytest.mark.slow
def test_evaluate_agrees_with_the_dice_of_predicts_mask(odd, tmp_path, capsys):
    folder, model_dir = odd
    one = str(tmp_path / "one")
    image, labels = write_pair(one, "ct", (13, 10, 9), seed=7)
    assert main(["evaluate", "--model-dir", model_dir, "--data", one]) == 0
    evaluated = dice_rows(capsys.readouterr().out)
    output = str(tmp_path / "mask.nii.gz")
    assert main(["predict", "--model-dir", model_dir, "--input", image, "--output", output]) == 0
    mask = np.asarray(nib.load(output).dataobj).astype(int)
    truth = np.asarray(nib.load(labels).dataobj).astype(int)
    assert mask.shape == truth.shape == (13, 10, 9)
    dice = []
    for k in range(3):
        both = np.float32(np.sum((mask == k) & (truth == k)))
        total = np.float32(np.sum(mask == k) + np.sum(truth == k))
        dice.append(np.float32(2) * both / total if total else np.float32(1))
    assert evaluated[:3] == [float(f"{d:.4f}") for d in dice]


def listing(folder):
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


@pytest.mark.emulator
@pytest.mark.slow
def test_a_failed_train_writes_nothing_and_a_retry_with_other_options_works(tmp_path, capsys):
    folder = str(tmp_path / "data")
    write_pair(folder, "ct0", (13, 10, 9), seed=0)
    model_dir = str(tmp_path / "model")
    base = ["train", "unet3d", "--data", folder, "--model-dir", model_dir, "--cores", "2",
            "--steps", "1", "--filters", "2", "--no-progress"]
    assert main(base + ["--classes", "2", "--depth", "2"]) == 2
    labels = os.path.join(folder, "ct0_labels.nii.gz")
    assert capsys.readouterr().err == (
        f"python -m spatial_tf train: error: argument --classes: 2 is not allowed with "
        f"{labels}, which holds class 2; expected more classes than the largest label. "
        f"Fix: --classes 3, or remap the labels\n")
    assert listing(model_dir) == []
    # the retry: other classes, 3 levels (13x10x9 could not halve twice before)
    assert main(base + ["--classes", "3", "--depth", "3", "--modality", "mr",
                        "--bn-momentum", "0.8"]) == 0
    with open(os.path.join(model_dir, "model.json")) as f:
        record = json.load(f)
    assert record["shape"] == round_up([13, 10, 9], [8, 4, 4]) == [16, 12, 12]
    assert (record["classes"], record["depth"], record["modality"], record["bn_momentum"]) == \
        (3, 3, "mr", 0.8)
    capsys.readouterr()
    # resumed without the options: the recorded ones; another one is refused
    assert main(base + ["--classes", "3", "--depth", "3"]) == 0
    assert "--modality mr, --bn-momentum 0.8" in capsys.readouterr().out
    assert main(base + ["--classes", "3", "--depth", "3", "--bn-momentum", "0.9"]) == 2
    assert "holds another model (bn_momentum 0.8 (asked 0.9))" in capsys.readouterr().err


@pytest.mark.parametrize("case, message", [
    ("labels", "argument --data: {labels} has shape (13, 10, 8); expected (13, 10, 9), the shape "
               "of {image}. Fix: pair each image with its own label volume, on the same voxel "
               "grid"),
    ("4d", "argument --data: {image} has shape (13, 10, 9, 2); expected a 3D volume (depth, "
           "height, width). Fix: save one 3D volume per file (e.g. drop a trailing axis of size "
           "1 with numpy.squeeze)"),
    ("negative", "argument --data: {labels} holds label -1; expected classes from 0 to 2. Fix: "
                 "remap the labels to 0, 1, ..."),
])
def test_bad_volumes_are_refused_before_anything_is_written(tmp_path, capsys, case, message):
    folder = str(tmp_path / "data")
    image, labels = write_pair(folder, "ct", (13, 10, 9), seed=0)
    if case == "labels":
        nib.save(nib.Nifti1Image(np.zeros((13, 10, 8), np.int16), AFFINE), labels)
    elif case == "4d":
        nib.save(nib.Nifti1Image(np.zeros((13, 10, 9, 2), np.float32), AFFINE), image)
    else:
        nib.save(nib.Nifti1Image(np.full((13, 10, 9), -1, np.int16), AFFINE), labels)
    model_dir = str(tmp_path / "model")
    assert main(["train", "unet3d", "--data", folder, "--model-dir", model_dir, "--cores", "2",
                 "--steps", "1"] + TINY) == 2
    assert capsys.readouterr().err == \
        f"python -m spatial_tf train: error: {message.format(image=image, labels=labels)}\n"
    assert listing(model_dir) == []


@pytest.mark.emulator
@pytest.mark.slow
def test_random_crops_of_larger_volumes(tmp_path, capsys):
    folder = str(tmp_path / "data")
    for i, shape in enumerate(SIZES):
        write_pair(folder, f"ct{i}", shape, seed=i)
    model_dir = str(tmp_path / "model")
    assert main(["train", "unet3d", "--data", folder, "--model-dir", model_dir, "--cores", "2",
                 "--steps", "2", "--crop", "8,8,12"] + TINY) == 0
    assert ("2 volumes, up to 13x12x9, randomly cropped where larger and zero-padded at the "
            "end where smaller to 8x8x12 (padding masked out)") in capsys.readouterr().out
    from spatial_tf.commands import volumes

    assert volumes.read_record(model_dir)["shape"] == [8, 8, 12]


@pytest.mark.emulator
@pytest.mark.slow
def test_evaluate_and_predict_take_the_recorded_modality_only(odd, tmp_path, capsys):
    folder, model_dir = odd
    image = os.path.join(folder, "ct0.nii.gz")
    record = os.path.join(model_dir, "model.json")
    for command in (["evaluate", "--data", folder], ["predict", "--input", image]):
        assert main([command[0], "--model-dir", model_dir, "--modality", "mr"] + command[1:]) == 2
        assert capsys.readouterr().err == (
            f"python -m spatial_tf {command[0]}: error: argument --modality: mr is not the "
            f"modality {model_dir} was trained with; expected ct, recorded in {record}. Fix: "
            f"leave --modality out, or train a model with --modality mr\n")
    output = str(tmp_path / "mask.nii.gz")
    assert main(["predict", "--model-dir", model_dir, "--modality", "ct", "--input", image,
                 "--output", output]) == 0
    assert nib.load(output).shape == (13, 10, 9)


def test_a_record_without_modality_or_momentum_was_ct_and_0_99(tmp_path, capsys):
    from spatial_tf.commands import volumes
    from spatial_tf.train import Checkpointer

    old = {"model": "unet3d", "shape": [8, 8, 8], "classes": 3, "depth": 2, "filters": 2}
    volumes.write_record(str(tmp_path), old)
    model = volumes.build_model(old)
    assert {layer.momentum for layer in model.layers if "_bn" in layer.name} == {0.99}
    Checkpointer(str(tmp_path), model=model).save(1)
    assert main(["evaluate", "--model-dir", str(tmp_path), "--modality", "mr"]) == 2
    assert "expected ct, recorded in" in capsys.readouterr().err
    assert main(["train", "unet3d", "--model-dir", str(tmp_path), "--size", "8", "--cores", "1",
                 "--depth", "2", "--filters", "2", "--dtype-policy", "float32",
                 "--bn-momentum", "0.9"]) == 2
    assert f"argument --model-dir: {tmp_path} holds another model (bn_momentum 0.99 (asked " \
           f"0.9)); expected the same model to resume" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--crop", "8"], "argument --crop: not allowed without --data; expected it with --data "
                      "volumes (the synthetic cubes are --size 64). Fix: pass --data, or leave "
                      "--crop out"),
    (["--data", "{data}", "--cores", "8", "--crop", "20,16,16"],
     "argument --crop: 20,16,16 is not allowed with --spec 1,2,2,2,1 and --depth 3; expected "
     "edges that are multiples of 8,8,8 (split count x 4 per axis, for the poolings), e.g. "
     "--crop 24,16,16"),
    (["--data", "{data}", "--crop", "8,8"], "argument --crop: expected 1 or 3 comma-separated "
                                            "positive ints such as 32,32,32; got '8,8'"),
    (["--bn-momentum", "1"], "argument --bn-momentum: '1' is not allowed; expected a number "
                             "from 0 to 1, 1 excluded, e.g. 0.9"),
    (["--bn-momentum", "fast"], "argument --bn-momentum: 'fast' is not allowed"),
    (["--modality", "pet"], "argument --modality: invalid choice: 'pet' (choose from 'ct', "
                            "'mr', 'other')"),
])
def test_bad_options_stop_at_parsing(parse_error, tmp_path, argv, message):
    argv = [a.format(data=str(tmp_path)) for a in argv]
    err = parse_error(["train", "unet3d", "--model-dir", str(tmp_path / "m")] + argv)
    assert message in err
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("option", [["--crop", "8"], ["--modality", "mr"],
                                    ["--bn-momentum", "0.9"]])
def test_volume_options_are_refused_with_retinanet(parse_error, tmp_path, option):
    err = parse_error(["train", "retinanet", "--model-dir", str(tmp_path / "m")] + option)
    assert f"argument {option[0]}: not allowed with retinanet; expected it only with " \
           f"unet3d" in err


@pytest.mark.emulator
def test_predict_takes_a_dicom_folder_and_writes_nifti_in_its_space(tmp_path, capsys):
    pytest.importorskip("pydicom", reason="DICOM needs pydicom: pip install 'spatial-tf[data]'")
    from dicom_series import COLUMNS, ROWS, SLICES, write_series

    from spatial_tf.data import read_dicom_series

    folder = str(tmp_path / "series")
    write_series(folder, origin=(-20.0, 30.0, 5.0))
    model_dir = forced_model_dir(str(tmp_path / "model"))
    assert main(["predict", "--model-dir", model_dir, "--input", folder]) == 0
    output = os.path.join(model_dir, "prediction.nii.gz")
    assert f"wrote {output} (mask, {COLUMNS}x{ROWS}x{SLICES}" in capsys.readouterr().out
    mask = nib.load(output)
    assert mask.shape == (COLUMNS, ROWS, SLICES)
    # NIfTI keeps the affine in float32
    np.testing.assert_allclose(mask.affine, read_dicom_series(folder).affine, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(mask.dataobj), 1)
    # a NIfTI output may be named .nii too; another format is refused before any work
    assert main(["predict", "--model-dir", model_dir, "--input", folder,
                 "--output", str(tmp_path / "mask.npy")]) == 2
    assert "is not a .nii.gz file" in capsys.readouterr().err


@pytest.mark.emulator
def test_predict_in_tiles_gives_a_mask_of_the_inputs_shape(tmp_path, capsys):
    image, _ = write_pair(str(tmp_path / "data"), "ct", (21, 10, 9), seed=5)
    model_dir = forced_model_dir(str(tmp_path / "model"))
    output = str(tmp_path / "mask.nii.gz")
    assert main(["predict", "--model-dir", model_dir, "--input", image, "--output", output,
                 "--tile", "trained"]) == 0
    assert "(mask, 21x10x9, classes [1], in 8x8x8 tiles)" in capsys.readouterr().out
    np.testing.assert_array_equal(np.asarray(nib.load(output).dataobj), 1)


@pytest.mark.emulator
def test_tiles_split_over_cores_give_the_mask_of_the_inputs_shape(tmp_path, capsys):
    image, _ = write_pair(str(tmp_path / "data"), "ct", (21, 10, 9), seed=5)
    model_dir = forced_model_dir(str(tmp_path / "model"))
    output = str(tmp_path / "mask.nii.gz")
    assert main(["predict", "--model-dir", model_dir, "--input", image, "--output", output,
                 "--tile", "trained", "--cores", "2"]) == 0
    assert ("(mask, 21x10x9, classes [1], in 8x8x8 tiles, split over 2 cores)"
            in capsys.readouterr().out)
    np.testing.assert_array_equal(np.asarray(nib.load(output).dataobj), 1)
    # a tile the split does not divide is refused before any work: 2 cores x 2 (pooling)
    assert main(["predict", "--model-dir", model_dir, "--input", image, "--output", output,
                 "--tile", "6,8,8", "--cores", "2"]) == 2
    assert ("argument --tile: 6,8,8 does not divide by 4,2,2; expected edges that split over "
            "2 cores and the depth-2 U-Net's poolings divide. Fix: e.g. --tile 8,8,8"
            in capsys.readouterr().err)


@pytest.mark.emulator
@pytest.mark.slow
def test_tile_auto_takes_the_planners_largest_cube_within_the_budget(tmp_path, capsys, cli):
    # cli: the second command plans the same train steps, read from the compile cache
    image, _ = write_pair(str(tmp_path / "data"), "ct", (40, 36, 20), seed=5)
    model_dir = forced_model_dir(str(tmp_path / "model"))
    output = str(tmp_path / "mask.nii.gz")
    assert cli(["predict", "--model-dir", model_dir, "--input", image, "--output", output,
                "--tile", "auto", "--budget", "12MiB", "--cores", "2"]) == 0
    captured = capsys.readouterr()
    assert ("--tile auto: planning a train step of this model at [32, 48, 64] on 2 cores, "
            "budget 12.0 MiB per core" in captured.err)
    edges = re.search(r"\(mask, 40x36x20, classes \[1\], in (\d+)x(\d+)x(\d+) tiles, split "
                      r"over 2 cores\)", captured.out)
    assert edges, captured.out
    tile = [int(e) for e in edges.groups()]
    # a cube (cut to the volume's padded 20 on its last axis), smaller than the volume
    assert tile[0] == tile[1] and 4 <= tile[0] < 36 and tile[0] % 4 == 0
    assert tile[2] == min(tile[0], 20)
    assert (f"--tile auto: {'x'.join(map(str, tile))} tiles (the largest cube within 12MiB "
            f"on 2 cores is {tile[0]}^3 with [1, 2, 1, 1, 1], by the tile-padding estimate "
            f"(XLA:CPU's figures with TPU tiles), not the TPU compiler)" in captured.err)
    np.testing.assert_array_equal(np.asarray(nib.load(output).dataobj), 1)
    # a budget the weights alone exceed: refused, nothing written
    os.remove(output)
    assert cli(["predict", "--model-dir", model_dir, "--input", image, "--output", output,
                "--tile", "auto", "--budget", "1KiB", "--cores", "2"]) == 2
    assert ("argument --tile: auto found no tile of this model that fits 1KiB on 2 cores"
            in capsys.readouterr().err)
    assert not os.path.exists(output)


@pytest.mark.emulator
@pytest.mark.extended  # a fitting TPU compile (80 s): tools/extended_tests.py runs it
@pytest.mark.skipif(__import__("spatial_tf.emulator.tpu.tpu_compile").emulator.tpu
                    .tpu_compile.libtpu_version() is None,
                    reason="needs libtpu (XLA's TPU compiler): pip install "
                           "'spatial-tf[tpu-compile]'")
def test_tile_auto_asks_the_tpu_compiler_when_the_budget_is_a_generation(tmp_path, capsys):
    image, _ = write_pair(str(tmp_path / "data"), "ct", (40, 36, 20), seed=5)
    model_dir = forced_model_dir(str(tmp_path / "model"))
    output = str(tmp_path / "mask.nii.gz")
    assert main(["predict", "--model-dir", model_dir, "--input", image, "--output", output,
                 "--tile", "auto", "--budget", "v5e", "--cores", "2"]) == 0
    err = capsys.readouterr().err
    assert ("--tile auto: asking the TPU compiler for v5e for the largest cube a train step "
            "of this model fits on 2 cores" in err)
    # a small U-Net: the whole volume's cube (40, rounded to the split and poolings) fits
    assert ("--tile auto: none: the whole volume fits (the largest cube within v5e on 2 "
            "cores is 40^3 with [1, 2, 1, 1, 1], by the TPU compiler for v5e" in err), err
    assert "estimate" not in err
    np.testing.assert_array_equal(np.asarray(nib.load(output).dataobj), 1)


@pytest.mark.parametrize("options, message", [
    (["--tile", "auto"], "argument --tile: auto needs --budget; expected e.g. --tile auto "
                         "--budget v4"),
    (["--budget", "v4"], "argument --budget: only used with --tile auto; expected --tile auto "
                         "--budget v4, or no --budget"),
    (["--tile", "auto", "--budget", "lots"], "argument --budget: "),
])
def test_tile_auto_options_are_checked_before_any_work(tmp_path, capsys, options, message):
    image, _ = write_pair(str(tmp_path / "data"), "ct", (13, 10, 9), seed=5)
    model_dir = forced_model_dir(str(tmp_path / "model"))
    with pytest.raises(SystemExit) as e:
        main(["predict", "--model-dir", model_dir, "--input", image] + options)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert not os.path.exists(os.path.join(model_dir, "prediction.nii.gz"))


@pytest.mark.parametrize("tile, message", [
    ("5,8,8", "argument --tile: 5,8,8 does not divide by 2,2,2; expected edges that the "
              "depth-2 U-Net's poolings divide. Fix: e.g. --tile 6,8,8"),
    ("0,8,8", "argument --tile: '0,8,8' is not allowed; expected D,H,W (three positive "
              "edges), one edge for a cube, 'trained' (the model's training shape) or 'auto' "
              "(the planner's choice)"),
    ("8,8", "argument --tile: '8,8' is not allowed"),
])
def test_tiles_the_unet_cannot_pool_are_refused_before_any_work(tmp_path, capsys, tile, message):
    image, _ = write_pair(str(tmp_path / "data"), "ct", (13, 10, 9), seed=5)
    model_dir = forced_model_dir(str(tmp_path / "model"))
    try:
        status = main(["predict", "--model-dir", model_dir, "--input", image, "--tile", tile])
    except SystemExit as e:   # argparse refuses a malformed value
        status = e.code
    assert status == 2
    assert message in capsys.readouterr().err
    assert not os.path.exists(os.path.join(model_dir, "prediction.nii.gz"))
