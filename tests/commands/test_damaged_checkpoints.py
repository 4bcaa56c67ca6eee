"""A model dir with a damaged file: evaluate and predict (3D U-Net and RetinaNet) use the
newest readable checkpoint and say on stderr which file was passed over and why; train
resumes from it; nothing readable, or a broken model.json, is one line and exit 2 with
nothing changed. A tiny model trained by the train command, damaged file by file. The
3D U-Net's trains run through the ``cli`` fixture, as a new process runs them: a resumed
run reads the train step's compile from the compile cache."""
import hashlib
import os
import shutil

import pytest

from checkpoint_damage import DATA, truncate, write, zero
from spatial_tf.__main__ import main

TINY = ["--size", "16", "--depth", "2", "--filters", "4"]
EVALUATE = "python -m spatial_tf evaluate"

pytestmark = [pytest.mark.emulator, pytest.mark.slow]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, cli):
    """A 3D U-Net model dir with ckpt-1, ckpt-2 and ckpt-3."""
    model_dir = str(tmp_path_factory.mktemp("trained") / "model")
    assert cli(["train", "unet3d", "--model-dir", model_dir, "--cores", "1", "--steps", "3",
                "--checkpoint-every", "1", "--no-progress"] + TINY) == 0
    return model_dir


@pytest.fixture
def model_dir(trained, tmp_path):
    copy = str(tmp_path / "model")
    shutil.copytree(trained, copy)
    return copy


def snapshot(folder):
    """``{relative path: sha256}`` of every file under ``folder``."""
    found = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    return found


# damage -> (the step restored, what is wrong; {d} is the model dir)
DAMAGE = {
    "latest data truncated": (lambda d: truncate(os.path.join(d, DATA)), 2,
                              "{d}/" + DATA + " is truncated (shorter than its index says)"),
    "latest data zeroed": (lambda d: zero(os.path.join(d, DATA)), 2,
                           "{d}/" + DATA + " does not match its checksum (its bytes were "
                                           "changed)"),
    "latest index garbage": (lambda d: write(os.path.join(d, "ckpt-3.index"),
                                              bytes(range(256)) * 2), 2,
                             "{d}/ckpt-3.index is not a checkpoint index (not an sstable (bad "
                             "magic number))"),
    "latest index missing": (lambda d: os.remove(os.path.join(d, "ckpt-3.index")), 2,
                             "{d}/ckpt-3.index is missing"),
    "pointer garbage": (lambda d: write(os.path.join(d, "checkpoint"), b"\xff\xfe\x00junk"), 3,
                        "{d}/checkpoint cannot be read (it is not text)"),
    "pointer missing": (lambda d: os.remove(os.path.join(d, "checkpoint")), 3,
                        "{d}/checkpoint is missing"),
}


def notice(prog, model_dir, case, doing="using"):
    _, step, problem = DAMAGE[case]
    return (f"{prog}: {problem.format(d=model_dir)}; {doing} ckpt-{step}, the newest readable "
            f"checkpoint")


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_evaluate_falls_back_to_the_newest_readable_checkpoint(model_dir, capsys, case):
    damage, step, _ = DAMAGE[case]
    damage(model_dir)
    before = snapshot(model_dir)
    assert main(["evaluate", "--model-dir", model_dir, "--volumes", "1"]) == 0
    out, err = capsys.readouterr()
    assert f"ckpt-{step} (step {step}) on 1 held-out volume, 16x16x16" in out
    assert [line for line in err.splitlines() if line.startswith(EVALUATE)] == [
        notice(EVALUATE, model_dir, case)]
    assert snapshot(model_dir) == before  # nothing deleted, nothing rewritten


def test_an_intact_model_dir_says_nothing(model_dir, capsys):
    assert main(["evaluate", "--model-dir", model_dir, "--volumes", "1"]) == 0
    out, err = capsys.readouterr()
    assert "ckpt-3 (step 3) on 1 held-out volume" in out and "readable" not in err


def test_predict_falls_back_and_writes_its_outputs(model_dir, tmp_path, capsys):
    DAMAGE["latest data truncated"][0](model_dir)
    before = snapshot(model_dir)
    output = str(tmp_path / "out" / "mask.npy")
    assert main(["predict", "--model-dir", model_dir, "--output", output]) == 0
    out, err = capsys.readouterr()
    prog = "python -m spatial_tf predict"
    assert [line for line in err.splitlines() if line.startswith(prog)] == [
        notice(prog, model_dir, "latest data truncated")]
    assert f"wrote {output} (mask, 16x16x16" in out
    assert sorted(os.listdir(tmp_path / "out")) == ["mask.npy", "mask.png"]
    assert snapshot(model_dir) == before


@pytest.mark.parametrize("case", ["latest data truncated", "pointer garbage"])
def test_train_resumes_from_the_newest_readable_checkpoint(model_dir, capsys, case, cli):
    damage, step, _ = DAMAGE[case]
    damage(model_dir)
    assert cli(["train", "unet3d", "--model-dir", model_dir, "--cores", "1", "--steps", "4",
                "--checkpoint-every", "1", "--no-progress"] + TINY) == 0
    out, err = capsys.readouterr()
    assert [line for line in err.splitlines() if line.startswith("train: ")][:2] == [
        notice("train", model_dir, case, doing="resuming from"),
        f"train: restored {model_dir}/ckpt-{step} (step {step})"]
    assert "remove" not in err and "delete" not in err
    assert "step 4: loss" in out
    # steps step+1..4 were trained and saved over the damaged files: ckpt-3 and ckpt-4
    # read in full and the checkpoint file names ckpt-4
    from spatial_tf.train import newest_readable

    found = newest_readable(model_dir)
    assert os.path.basename(found.path) == "ckpt-4" and found.skipped == ()
    assert main(["evaluate", "--model-dir", model_dir, "--volumes", "1"]) == 0
    out, err = capsys.readouterr()
    assert "ckpt-4 (step 4)" in out and "readable" not in err


def command(name, model_dir):
    """The argv of ``name`` (evaluate, predict or train) on ``model_dir``."""
    if name == "train":
        return ["train", "unet3d", "--model-dir", model_dir, "--cores", "1", "--steps", "4",
                "--no-progress"] + TINY
    return [name, "--model-dir", model_dir]


def _break_every_checkpoint(model_dir):
    for step in (1, 2, 3):
        truncate(os.path.join(model_dir, f"ckpt-{step}.data-00000-of-00001"))
    os.remove(os.path.join(model_dir, "ckpt-2.index"))


@pytest.mark.parametrize("name", ["evaluate", "predict", "train"])
def test_no_readable_checkpoint_is_one_line_and_exit_2(model_dir, capsys, name):
    _break_every_checkpoint(model_dir)
    before = snapshot(model_dir)
    assert main(command(name, model_dir)) == 2
    prog = f"python -m spatial_tf {name}"
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"{prog}: error: argument --model-dir: {model_dir}: no checkpoint in it can be read "
        f"(ckpt-3.data-00000-of-00001 is truncated (shorter than its index says); ckpt-2.index "
        f"is missing; ckpt-1.data-00000-of-00001 is truncated (shorter than its index says)); "
        f"expected ckpt-N.index with its ckpt-N.data-* files as training writes them. Fix: "
        f"restore them from a copy, or move them out of {model_dir} and train again from "
        f"step 0")
    assert snapshot(model_dir) == before


FIX = ("expected the model record python -m spatial_tf train writes. Fix: restore it from a "
       "copy, or remove it and run python -m spatial_tf train with the model's options and "
       "--model-dir {d}, which writes it again and keeps the checkpoints")


@pytest.mark.parametrize("content, problem", [
    (b'{"model": "unet3d", shape: [16, 16, 16]}',
     "is not valid JSON (Expecting property name enclosed in double quotes at line 1 column 21)"),
    (b'{"model": "unet3d", "shape": [16, 16, 16], "classes"', "is not valid JSON (Expecting ':' "
                                                             "delimiter at line 1 column 53)"),
    (b"\xff\xfe{}", "is not valid JSON (it is not UTF-8 text)"),
    (b'{"model": "unet3d", "shape": [16, 16, 16]}', "lacks classes, depth, filters"),
    (b"[1, 2]", "lacks shape, classes, depth, filters"),
])
@pytest.mark.parametrize("name", ["evaluate", "predict", "train"])
def test_a_broken_model_json_is_one_line_naming_it(model_dir, capsys, content, problem, name):
    write(os.path.join(model_dir, "model.json"), content)
    before = snapshot(model_dir)
    assert main(command(name, model_dir)) == 2
    prog = f"python -m spatial_tf {name}"
    path = os.path.join(model_dir, "model.json")
    assert capsys.readouterr().err == (
        f"{prog}: error: argument --model-dir: {path} {problem}; {FIX.format(d=model_dir)}\n")
    assert snapshot(model_dir) == before


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    """A RetinaNet model dir with ckpt-1 and ckpt-2."""
    model_dir = str(tmp_path_factory.mktemp("detector") / "model")
    assert main(["train", "retinanet", "--model-dir", model_dir, "--image-size", "64",
                 "--cores", "1", "--steps", "2", "--checkpoint-every", "1",
                 "--no-progress"]) == 0
    return model_dir


def test_detection_evaluate_and_predict_fall_back(detector, tmp_path, capsys):
    model_dir = str(tmp_path / "det")
    shutil.copytree(detector, model_dir)
    truncate(os.path.join(model_dir, "ckpt-2.data-00000-of-00001"))
    before = snapshot(model_dir)
    problem = (f"{model_dir}/ckpt-2.data-00000-of-00001 is truncated (shorter than its index "
               f"says); using ckpt-1, the newest readable checkpoint")
    assert main(["evaluate", "--model-dir", model_dir, "--volumes", "1"]) == 0
    out, err = capsys.readouterr()
    assert "ckpt-1 (step 1) on 1 held-out image, 64x64, 1 core:" in out
    assert f"{EVALUATE}: {problem}" in err.splitlines()
    png = str(tmp_path / "boxes.png")
    assert main(["predict", "--model-dir", model_dir, "--png", png]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("step 1: ") and os.path.getsize(png) > 0
    assert f"python -m spatial_tf predict: {problem}" in err.splitlines()
    assert snapshot(model_dir) == before
