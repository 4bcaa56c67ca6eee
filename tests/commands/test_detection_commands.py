"""python -m spatial_tf train / evaluate / predict retinanet: options, resume, mAP, the PNG."""
import json
import os
import re

import pytest

from spatial_tf.__main__ import main
from spatial_tf.commands.detection import default_image_spec


@pytest.mark.parametrize("argv, message", [
    (["--cores", "4", "--spec", "1,2,2,1,1"],
     "argument --spec: 1,2,2,1,1 is not allowed with retinanet; expected 4 split counts "
     "(batch, height, width, channels), channels unsplit, e.g. 1,2,2,1"),
    (["--cores", "2", "--spec", "1,1,1,2"], "channels unsplit, e.g. 1,2,1,1"),
    (["--cores", "4", "--spec", "1,4,1,1", "--image-size", "96"],
     "argument --image-size: 96 is not allowed with --spec 1,4,1,1; expected a multiple of 128 "
     "(the coarsest pyramid level, stride 32, split 4 ways), e.g. --image-size 128"),
    (["--cores", "2", "--image-size", "200"], "expected a multiple of 64 (the coarsest pyramid "
                                              "level, stride 32, split 2 ways), e.g. --image-size 192"),
    (["--replicas", "2", "--batch", "3"], "argument --batch: 3 is not allowed with --replicas 2"),
    (["--annotations", "/nonexistent.json"],
     "argument --annotations: retinanet reads COCO data as --data IMAGE_DIR --annotations "
     "INSTANCES_JSON; expected both or neither"),
    (["--data", "/nonexistent", "--annotations", "/nonexistent.json"],
     "argument --data: /nonexistent does not exist; expected a COCO images directory"),
    (["--spec", "1,2,2"], "argument --spec: expected 5 or 4 comma-separated positive ints"),
])
def test_bad_options_stop_at_parsing(parse_error, tmp_path, argv, message):
    err = parse_error(["train", "retinanet", "--model-dir", str(tmp_path / "m")] + argv)
    assert err.startswith("python -m spatial_tf train: error: ") and message in err
    assert not (tmp_path / "m").exists()


def test_annotations_are_refused_for_unet3d(parse_error, tmp_path):
    err = parse_error(["train", "unet3d", "--model-dir", str(tmp_path / "m"),
                               "--annotations", "x.json"])
    assert "argument --annotations: not allowed with unet3d" in err


def test_unet3d_refuses_a_4_count_spec(parse_error, tmp_path):
    err = parse_error(["train", "unet3d", "--model-dir", str(tmp_path / "m"),
                               "--cores", "4", "--spec", "1,2,2,1"])
    assert "argument --spec: 1,2,2,1 is not allowed with unet3d; expected 5 split counts" in err


def test_default_image_spec_alternates_height_and_width():
    assert [default_image_spec(n) for n in (1, 2, 4, 8, 16)] == [
        [1, 1, 1, 1], [1, 2, 1, 1], [1, 2, 2, 1], [1, 4, 2, 1], [1, 4, 4, 1]]


@pytest.mark.emulator
@pytest.mark.slow
def test_train_resume_evaluate_predict(tmp_path, capsys, cli):
    # cli: train and evaluate as a new process runs them, so the resumed run reads the first
    # one's compile from the compile cache (the COCO test below compiles the same programs)
    model_dir = str(tmp_path / "det")
    base = ["train", "retinanet", "--model-dir", model_dir, "--image-size", "64", "--cores", "2",
            "--no-progress", "--checkpoint-every", "1"]
    assert cli(base + ["--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "retinanet 64x64, 3 classes on the CPU emulator (2 cores per replica), spec" in out
    assert re.search(r"step 1: loss \d+\.\d{4} \(class \d+\.\d{4}, box \d+\.\d{4}\)", out)
    with open(os.path.join(model_dir, "model.json")) as f:
        assert json.load(f) == {"model": "retinanet", "image_size": 64, "classes": 3,
                                "max_boxes": 32,
                                "class_names": ["rectangle", "ellipse", "triangle"],
                                "cores": 2}
    assert cli(base + ["--steps", "2"]) == 0           # resumes at 1: one more step
    assert "step 2: loss" in capsys.readouterr().out
    assert sorted(f for f in os.listdir(model_dir) if f.endswith(".index")) == [
        "ckpt-1.index", "ckpt-2.index"]
    # another image size in the same model dir is refused, nothing written
    assert main(base[:5] + ["128"] + base[6:] + ["--steps", "3"]) == 2
    assert "holds another model (image_size 64 (asked 128))" in capsys.readouterr().err

    assert cli(["evaluate", "--model-dir", model_dir, "--volumes", "2"]) == 0
    out = capsys.readouterr().out  # on the 2 cores model.json records, as trained
    assert "ckpt-2 (step 2) on 2 held-out images, 64x64, 2 cores:" in out
    values = dict(re.findall(r"^ *(\S+)  (\S+)$", out, re.M))
    assert set(values) >= {"mAP", "mAP@0.5", "mAP@0.75", "recall@0.5", "AP/rectangle"}
    assert all(v == "nan" or 0 <= float(v) <= 1 for v in values.values())

    png = str(tmp_path / "boxes.png")
    assert main(["predict", "--model-dir", model_dir, "--png", png, "--score-threshold",
                 "0"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"step 2: \d+ detections? scoring >= 0.0 \(\d+ after non-max", out)
    import matplotlib.image

    assert matplotlib.image.imread(png).shape[:2] == (64, 64)


@pytest.mark.emulator
@pytest.mark.slow
def test_coco_category_names_are_recorded_and_name_the_predicted_boxes(tmp_path, capsys, cli):
    from spatial_tf.data import synthetic_detection_image, write_coco

    # 3 categories on 2 cores: the model, train step and evaluation of the test above, so
    # each command reads its compile from the compile cache when that test ran first
    examples = [synthetic_detection_image(64, seed=s, num_classes=3, max_boxes=4)
                for s in range(2)]
    annotations = write_coco(tmp_path / "coco", examples, ["cat", "dog", "bird"])
    model_dir = str(tmp_path / "det")
    assert cli(["train", "retinanet", "--model-dir", model_dir, "--image-size", "64",
                "--classes", "3", "--cores", "2", "--steps", "1", "--no-progress",
                "--data", str(tmp_path / "coco" / "images"),
                "--annotations", annotations]) == 0
    with open(os.path.join(model_dir, "model.json")) as f:
        assert json.load(f)["class_names"] == ["cat", "dog", "bird"]
    capsys.readouterr()
    assert cli(["evaluate", "--model-dir", model_dir, "--volumes", "2",
                "--data", str(tmp_path / "coco" / "images"), "--annotations", annotations]) == 0
    values = dict(re.findall(r"^ *(\S+)  (\S+)$", capsys.readouterr().out, re.M))
    assert {"AP/cat", "AP/dog", "AP/bird"} <= set(values)


def test_a_model_dir_written_without_class_names_keeps_numbers_for_other_images():
    from spatial_tf.commands.detection import class_names

    old = {"model": "retinanet", "image_size": 64, "classes": 3, "max_boxes": 32}
    assert class_names(old, synthetic=True) == ["rectangle", "ellipse", "triangle"]
    assert class_names(old, synthetic=False) is None
    assert class_names({**old, "class_names": ["a", "b", "c"]}, synthetic=True) == ["a", "b", "c"]
