"""python -m spatial_tf evaluate and predict on a model trained by the train command."""
import os
import re

import numpy as np
import pytest

from spatial_tf.__main__ import main

TINY = ["--size", "16", "--depth", "2", "--filters", "4"]


def test_untrained_model_dir_is_refused(tmp_path, capsys):
    for command in ("evaluate", "predict"):
        assert main([command, "--model-dir", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err == (f"python -m spatial_tf {command}: error: argument --model-dir: {tmp_path} "
                       f"holds no trained model (no model.json and checkpoint); expected the "
                       f"--model-dir of python -m spatial_tf train. Fix: train first or check "
                       f"the path\n")
    assert os.listdir(tmp_path) == []


@pytest.fixture(scope="module")
def trained(tmp_path_factory, cli):
    # tests/commands/test_train.py trains this model on 2 cores too: cli reads the train
    # step's compile from the compile cache when one of its tests compiled it
    model_dir = str(tmp_path_factory.mktemp("model"))
    assert cli(["train", "unet3d", "--model-dir", model_dir, "--cores", "2", "--steps", "3",
                "--no-progress"] + TINY) == 0
    return model_dir


@pytest.mark.emulator
@pytest.mark.slow
def test_evaluate_prints_dice_per_class(trained, capsys):
    assert main(["evaluate", "--model-dir", trained, "--volumes", "2", "--cores", "2"]) == 0
    out = capsys.readouterr().out
    assert "ckpt-3 (step 3) on 2 held-out volumes, 16x16x16" in out
    assert ", on the CPU emulator (2 cores per replica):" in out
    assert "Strategy" not in out  # no TensorFlow class name
    rows = re.findall(r"^ +(\d) +(\d\.\d{4})$", out, re.M)
    assert [int(k) for k, _ in rows] == [0, 1, 2]
    assert all(0.0 <= float(v) <= 1.0 for _, v in rows)
    assert float(rows[0][1]) > 0.5  # background dominates any prediction


@pytest.mark.emulator
@pytest.mark.slow
def test_predict_writes_mask_in_the_inputs_format_and_a_png(trained, tmp_path, capsys):
    from spatial_tf import data

    image, labels = data.synthetic_ct((16, 16, 16), seed=3)
    for ext in (".npy", ".nii.gz"):
        data.write_volume(str(tmp_path / f"ct{ext}"), image[..., 0])
        data.write_volume(str(tmp_path / f"ct_labels{ext}"), labels)
        output = str(tmp_path / f"mask{ext}")
        assert main(["predict", "--model-dir", trained, "--input", str(tmp_path / f"ct{ext}"),
                     "--labels", str(tmp_path / f"ct_labels{ext}"), "--output", output]) == 0
        out = capsys.readouterr().out
        png = output[: -len(ext)] + ".png"
        assert f"wrote {output} (mask, 16x16x16" in out and png in out
        mask = data.read_volume(output)
        assert mask.shape == (16, 16, 16) and set(np.unique(mask)) <= {0, 1, 2}
        import matplotlib.image

        picture = matplotlib.image.imread(png)
        assert picture.shape[1] > 2.5 * picture.shape[0]  # three panels side by side
    assert main(["predict", "--model-dir", trained, "--input", str(tmp_path / "ct.npy"),
                 "--output", str(tmp_path / "mask.nii")]) == 2
    assert "argument --output: " in capsys.readouterr().err


@pytest.mark.emulator
@pytest.mark.slow
def test_predict_split_over_cores_gives_the_unpartitioned_mask(trained, tmp_path, capsys):
    from spatial_tf import data

    image, _ = data.synthetic_ct((24, 16, 16), seed=4)
    data.write_volume(str(tmp_path / "ct.npy"), image[..., 0])
    masks = {}
    for cores in ("1", "2"):
        output = str(tmp_path / f"mask{cores}.npy")
        assert main(["predict", "--model-dir", trained, "--input", str(tmp_path / "ct.npy"),
                     "--output", output, "--cores", cores]) == 0
        split = ", split over 2 cores" if cores == "2" else ""
        assert re.search(rf"\(mask, 24x16x16, classes \[[0-9, ]+\]{split}\)",
                         capsys.readouterr().out)
        masks[cores] = data.read_volume(output)
    # the same weights and float32 logits: only a near-tie may flip a voxel's argmax
    assert masks["1"].shape == (24, 16, 16)
    assert np.mean(masks["1"] == masks["2"]) > 0.999


@pytest.mark.emulator
@pytest.mark.slow
def test_predict_refuses_nan_voxels_naming_file_and_count_unless_told_a_value(
        trained, tmp_path, capsys):
    from spatial_tf import data

    image, _ = data.synthetic_ct((16, 16, 16), seed=5)
    image = image[..., 0].copy()
    image[0, 0, :3] = np.nan
    image[1, 1, 1] = np.inf
    scan = str(tmp_path / "nan.nii.gz")
    data.write_volume(scan, image)
    output = str(tmp_path / "nan_pred.nii.gz")
    assert main(["predict", "--model-dir", trained, "--input", scan, "--output", output]) == 2
    err = capsys.readouterr().err
    assert (f"{scan}: 4 of 4096 voxels are not finite (3 NaN, 1 infinite); expected finite "
            f"intensities. Fix: repair the file, or replace them by a value you choose") in err
    assert "--nonfinite 0 on the command line" in err
    assert not os.path.exists(output)  # nothing written
    assert main(["predict", "--model-dir", trained, "--input", scan, "--output", output,
                 "--nonfinite", "-1000"]) == 0
    assert data.read_volume(output).shape == (16, 16, 16)


@pytest.mark.emulator
@pytest.mark.slow
def test_predict_on_a_permuted_flipped_nifti_writes_its_grid_back(trained, tmp_path, capsys):
    import nibabel as nib

    from spatial_tf import data
    from spatial_tf.commands.predict import _slice_view

    image, _ = data.synthetic_ct((16, 16, 8), seed=4)
    lsp = np.array([[-2.0, 0, 0, 50], [0, 0, -1.5, 30], [0, 3.0, 0, -20], [0, 0, 0, 1]])
    stored = data.from_ras(image[..., 0], lsp)          # the same scan, stored L, S, P
    nib.save(nib.Nifti1Image(image[..., 0], np.eye(4)), str(tmp_path / "ras.nii.gz"))
    nib.save(nib.Nifti1Image(stored, lsp), str(tmp_path / "lsp.nii.gz"))
    masks = {}
    for name in ("ras", "lsp"):
        output = str(tmp_path / f"{name}_mask.nii.gz")
        assert main(["predict", "--model-dir", trained, "--input",
                     str(tmp_path / f"{name}.nii.gz"), "--output", output]) == 0
        masks[name] = nib.load(output)
    capsys.readouterr()
    assert masks["lsp"].shape == stored.shape == (16, 8, 16)
    assert np.array_equal(masks["lsp"].affine, lsp)
    # voxel-aligned: the LSP file's mask, read RAS+, is the RAS file's mask
    np.testing.assert_array_equal(data.to_ras(np.asarray(masks["lsp"].dataobj), lsp),
                                  np.asarray(masks["ras"].dataobj))
    assert data.read_volume(str(tmp_path / "lsp_mask.nii.gz")).shape == (16, 16, 8)

    class Args:
        input = str(tmp_path / "lsp.nii.gz")

    assert _slice_view(Args, {"classes": 3}) == {"axis": 2, "plane": "axial"}
    Args.input = None   # synthetic: the classes synthetic_ct draws, by name
    assert _slice_view(Args, {"classes": 3}) == {
        "class_names": ("background", "organ", "lesion")}
