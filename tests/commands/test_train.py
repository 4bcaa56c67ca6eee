"""python -m spatial_tf train: bad options, foreign model dirs, SIGTERM and resume,
checkpoints restored on other core counts."""
import glob
import hashlib
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from spatial_tf.__main__ import main

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--size", "16", "--depth", "2", "--filters", "4"]


@pytest.mark.parametrize("argv, message", [
    (["--cores", "8", "--spec", "1,2,2,1,1"],
     "argument --spec: 1,2,2,1,1 (product 4) is not allowed with --cores 8; expected split "
     "counts whose product is 8. Fix: e.g. --spec 1,2,2,2,1, or leave --cores out to split "
     "over 4"),
    (["--cores", "2", "--spec", "1,1,1,1,2"], "channels unsplit (last 1), e.g. 1,2,1,1,1"),
    (["--cores", "8", "--size", "20"],
     "argument --size: 20 is not allowed with --spec 1,2,2,2,1 and --depth 3; expected a "
     "multiple of 8 (axis D split 2 ways, 4x pooled), e.g. --size 16"),
    (["--replicas", "2", "--batch", "3"],
     "argument --batch: 3 is not allowed with --replicas 2 and a batch split of 1; expected a "
     "multiple of 2, e.g. --batch 2"),
    (["--cores", "3"], "argument --cores: 3 is not allowed"),
    (["--steps", "0"], "argument --steps: 0 is not allowed; expected an integer from 1"),
    (["--dtype-policy", "bfloat16"],
     "argument --dtype-policy: invalid choice: 'bfloat16' (choose from 'float32', "
     "'mixed_bfloat16')"),
    (["--preset", "garden"], "argument --preset: invalid choice: 'garden' (choose from "
                             "'model_garden')"),
    (["--preset", "model_garden", "--cores", "8", "--size", "24"],
     "argument --size: 24 is not allowed with --spec 1,2,2,2,1 and --depth 4; expected a "
     "multiple of 16 (axis D split 2 ways, 8x pooled), e.g. --size 16"),
    (["--data", "/nonexistent/ct"],
     "argument --data: /nonexistent/ct does not exist; expected a directory of volume pairs"),
    (["--no-progress", "--log-every", "0"],
     "argument --log-every: 0 is not allowed; expected an integer >= 1"),
])
def test_bad_options_stop_at_parsing(parse_error, tmp_path, argv, message):
    err = parse_error(["train", "unet3d", "--model-dir", str(tmp_path / "m")] + argv)
    assert err.startswith("python -m spatial_tf train: error: ")
    assert message in err
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("option", [["--preset", "model_garden"],
                                    ["--dtype-policy", "float32"]])
def test_unet_only_options_are_refused_with_retinanet(parse_error, tmp_path, option):
    err = parse_error(["train", "retinanet", "--model-dir", str(tmp_path / "m")] + option)
    assert f"argument {option[0]}: not allowed with retinanet; expected it only with " \
           f"unet3d" in err


def test_model_dir_is_required(parse_error):
    assert "the following arguments are required: --model-dir" in parse_error(
        ["train", "unet3d"])


def snapshot(folder):
    return {p: hashlib.sha256(open(p, "rb").read()).hexdigest()
            for p in glob.glob(os.path.join(folder, "**"), recursive=True) if os.path.isfile(p)}


def test_another_models_record_is_refused_untouched(capsys, tmp_path):
    from spatial_tf.commands import volumes

    volumes.write_record(str(tmp_path), {"model": "unet3d", "shape": [32, 32, 32], "classes": 3,
                                         "depth": 2, "filters": 4})
    before = snapshot(str(tmp_path))
    assert main(["train", "unet3d", "--model-dir", str(tmp_path), "--cores", "2"] + TINY) == 2
    err = capsys.readouterr().err
    assert f"argument --model-dir: {tmp_path} holds another model (shape [32, 32, 32] " \
           f"(asked [16, 16, 16]))" in err
    assert snapshot(str(tmp_path)) == before


def test_a_record_without_a_dtype_policy_was_float32(capsys, tmp_path):
    from spatial_tf.commands import volumes

    volumes.write_record(str(tmp_path), {"model": "unet3d", "shape": [16, 16, 16], "classes": 3,
                                         "depth": 2, "filters": 4})
    before = snapshot(str(tmp_path))
    assert main(["train", "unet3d", "--model-dir", str(tmp_path), "--cores", "2",
                 "--dtype-policy", "mixed_bfloat16"] + TINY) == 2
    err = capsys.readouterr().err
    assert f"argument --model-dir: {tmp_path} holds another model (dtype_policy float32 " \
           f"(asked mixed_bfloat16)); expected the same model to resume" in err
    assert snapshot(str(tmp_path)) == before


def test_a_record_without_conv_rebuilds_keras_conv3d():
    """Model dirs written before HaloConv3D keep their checkpoint's layer structure."""
    import keras

    from spatial_tf.commands import volumes
    from spatial_tf.layers import HaloConv3D

    old = {"model": "unet3d", "shape": [8, 8, 8], "classes": 2, "depth": 2, "filters": 2,
           "dtype_policy": "float32", "preset": None}
    model = volumes.build_model(old)
    assert type(model.get_layer("up0_conv1")) is keras.layers.Conv3D
    assert type(model.get_layer("up0_concat")) is keras.layers.Concatenate
    new = volumes.build_model({**old, "conv": "halo"})
    assert type(new.get_layer("up0_conv1")) is HaloConv3D
    assert "up0_concat" not in [layer.name for layer in new.layers]


@pytest.mark.emulator
@pytest.mark.slow
def test_the_dtype_policy_is_recorded_and_kept_on_resume(capsys, tmp_path, cli):
    import json

    from spatial_tf.commands import volumes

    model_dir = str(tmp_path / "bf16")
    argv = ["train", "unet3d", "--model-dir", model_dir, "--cores", "2", "--steps", "1",
            "--no-progress"] + TINY
    assert cli(argv + ["--dtype-policy", "mixed_bfloat16"]) == 0
    assert ", mixed_bfloat16 on " in capsys.readouterr().out
    with open(os.path.join(model_dir, "model.json")) as f:
        record = json.load(f)
    assert record == {"model": "unet3d", "shape": [16, 16, 16], "classes": 3, "depth": 2,
                      "filters": 4, "dtype_policy": "mixed_bfloat16", "preset": None,
                      "conv": "halo", "masked_bn": True, "modality": "ct",
                      "bn_momentum": 0.9, "spacing": None, "cores": 2}
    model = volumes.build_model(record)  # as evaluate and predict build it
    assert model.get_layer("down0_conv1").compute_dtype == "bfloat16"
    assert model.get_layer("logits").compute_dtype == "float32"
    assert cli(argv) == 0  # no option: the recorded policy, nothing to refuse
    out = capsys.readouterr().out
    assert ", mixed_bfloat16 on " in out and "already trained to --steps 1" in out
    before = snapshot(model_dir)
    assert main(argv + ["--dtype-policy", "float32"]) == 2
    assert "holds another model (dtype_policy mixed_bfloat16 (asked float32))" in \
        capsys.readouterr().err
    assert snapshot(model_dir) == before
    # a new model dir off a TPU: float32 (the float32 TINY step on 2 cores other tests here
    # train too: read from the compile cache when one of them compiled it)
    assert cli(argv[:2] + ["--model-dir", str(tmp_path / "f32")] + argv[4:]) == 0
    assert volumes.read_record(str(tmp_path / "f32"))["dtype_policy"] == "float32"


def test_a_presets_model_dir_is_refused_without_the_preset(capsys, tmp_path):
    from spatial_tf.commands import volumes

    volumes.write_record(str(tmp_path), {"model": "unet3d", "shape": [16, 16, 16], "classes": 3,
                                         "depth": 2, "filters": 4, "dtype_policy": "float32",
                                         "preset": "model_garden"})
    before = snapshot(str(tmp_path))
    assert main(["train", "unet3d", "--model-dir", str(tmp_path), "--cores", "2"] + TINY) == 2
    assert "holds another model (preset model_garden (asked None))" in capsys.readouterr().err
    assert snapshot(str(tmp_path)) == before


@pytest.mark.emulator
@pytest.mark.slow
def test_the_model_garden_preset_trains_and_is_recorded(capsys, tmp_path):
    from spatial_tf.commands import volumes

    model_dir = str(tmp_path)
    assert main(["train", "unet3d", "--model-dir", model_dir, "--cores", "2", "--steps", "1",
                 "--no-progress", "--size", "16", "--preset", "model_garden", "--depth", "2",
                 "--filters", "2"]) == 0
    assert "unet3d (model_garden preset) 16x16x16" in capsys.readouterr().out
    record = volumes.read_record(model_dir)
    assert (record["preset"], record["depth"], record["filters"]) == ("model_garden", 2, 2)
    model = volumes.build_model(record)  # evaluate's and predict's model
    assert model.get_layer("down0_conv2").filters == 4  # Model Garden's block: 2, then 4
    assert model.get_layer("up0_transpose").filters == 8  # keeps its input's filters


def test_another_models_checkpoint_is_refused_untouched(capsys, tmp_path):
    import keras

    from spatial_tf.train import Checkpointer

    other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    Checkpointer(str(tmp_path), model=other).save(7)
    before = snapshot(str(tmp_path))
    assert main(["train", "unet3d", "--model-dir", str(tmp_path), "--cores", "2"] + TINY) == 2
    err = capsys.readouterr().err
    assert "argument --model-dir: " in err and "ckpt-7: does not fit this model" in err
    assert "Fix: use another model dir" in err
    assert snapshot(str(tmp_path)) == before  # no model.json, no summaries, no checkpoint


def logged_steps(model_dir):
    import tensorflow as tf

    steps = []
    for path in sorted(glob.glob(os.path.join(model_dir, "train", "events.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            steps += [event.step for v in event.summary.value if v.tag == "loss"]
    return sorted(steps)


@pytest.mark.emulator
@pytest.mark.slow
def test_sigterm_saves_and_the_next_run_resumes_there(tmp_path, capsys, cli):
    model_dir = str(tmp_path / "run")
    argv = [sys.executable, "-m", "spatial_tf", "train", "unet3d", "--model-dir", model_dir,
            "--cores", "2", "--steps", "100000", "--checkpoint-every", "100000", *TINY]
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while not glob.glob(os.path.join(model_dir, "train", "events.*")) and time.time() < deadline:
        time.sleep(0.5)
    time.sleep(3)  # a few steps
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "train: stopped by SIGTERM at step " in err  # the signal named, not its number
    stopped = int(err.split("at step ")[1].split(";")[0])
    assert stopped >= 1
    assert os.path.isfile(os.path.join(model_dir, f"ckpt-{stopped}.index"))
    assert logged_steps(model_dir) == list(range(1, stopped + 1))
    # the next run, in this process as a new one would run it (cli): it resumes from what
    # the stopped process left on disk; a second process would only add TensorFlow's start
    argv[argv.index("100000")] = str(stopped + 2)
    assert cli(argv[3:]) == 0
    assert f"step {stopped + 2}: loss" in capsys.readouterr().out
    # the second run did steps stopped+1 and stopped+2 only: each step logged once
    assert logged_steps(model_dir) == list(range(1, stopped + 3))


@pytest.mark.emulator
@pytest.mark.slow
def test_checkpoint_of_8_cores_restores_on_2_and_unpartitioned(tmp_path, capsys):
    import tensorflow as tf

    import spatial_tf
    from spatial_tf.commands import evaluate, volumes

    model_dir = str(tmp_path)
    assert main(["train", "unet3d", "--model-dir", model_dir, "--cores", "8", "--steps", "2",
                 "--no-progress"] + TINY) == 0
    record, latest = evaluate.load("test", model_dir)
    assert os.path.basename(latest) == "ckpt-2"
    reader = tf.train.load_checkpoint(latest)
    weights = []
    for strategy in (spatial_tf.Emulator(num_cores_per_replica=8),
                     spatial_tf.Emulator(num_cores_per_replica=2), tf.distribute.get_strategy()):
        with strategy.scope():
            model = volumes.build_model(record)
        fresh = [np.array(w) for w in model.get_weights()]
        assert evaluate.restore(model, latest) == 2
        restored = [np.array(w) for w in model.get_weights()]
        assert any(not np.array_equal(a, b) for a, b in zip(fresh, restored))
        weights.append(restored)
    for other in weights[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(weights[0], other))
    stored = [reader.get_tensor(n) for n, _ in tf.train.list_variables(latest)]
    stored = [t for t in stored if isinstance(t, np.ndarray) and t.dtype == np.float32]
    for w in weights[2]:  # every weight is the checkpoint's value, bit for bit
        assert any(t.shape == w.shape and np.array_equal(t, w) for t in stored)


@pytest.mark.emulator
@pytest.mark.slow
def test_resumed_run_on_the_emulator_trains_on_the_same_data_as_one_run(tmp_path, cli):
    # stopped at step 2 and resumed to 3 must equal one run to 3: the data position is
    # restored under a distributed strategy (skipping too few or too many batches
    # changes step 3's batch and so the weights). cli: the three runs compile one program
    import tensorflow as tf

    def weights(model_dir):
        path = os.path.join(model_dir, "ckpt-3")
        return {n: tf.train.load_checkpoint(path).get_tensor(n)
                for n, _ in tf.train.list_variables(path) if "model" in n and "OPTIMIZER" not in n}

    once, twice = str(tmp_path / "once"), str(tmp_path / "twice")
    common = ["--cores", "2", "--spec", "1,2,1,1,1", "--no-progress"] + TINY
    assert cli(["train", "unet3d", "--model-dir", once, "--steps", "3"] + common) == 0
    assert cli(["train", "unet3d", "--model-dir", twice, "--steps", "2"] + common) == 0
    assert cli(["train", "unet3d", "--model-dir", twice, "--steps", "3"] + common) == 0
    a, b = weights(once), weights(twice)
    assert sorted(a) == sorted(b) and len(a) > 4
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=1e-6, atol=1e-7, err_msg=name)


def _train_lines(err):
    """stderr's ``train:`` lines, the seconds per step replaced by ``S``."""
    import re

    return [re.sub(r"\d+\.\d\d s/step$", "S s/step", line) for line in err.splitlines()
            if line.startswith("train:")]


@pytest.mark.emulator
@pytest.mark.slow
def test_no_progress_logs_every_n_steps_and_a_resume_says_what_it_restored(tmp_path, capsys,
                                                                           cli):
    model_dir = str(tmp_path / "model")
    argv = ["train", "unet3d", "--model-dir", model_dir, "--cores", "1", "--no-progress"] + TINY
    assert cli(argv + ["--steps", "2", "--log-every", "1"]) == 0
    out, err = capsys.readouterr()
    loss, dice = out.splitlines()[-1].removeprefix("step 2: loss ").split(", mean Dice ")
    lines = _train_lines(err)
    assert len(lines) == 2 and lines[0].startswith("train: step 1/2: loss ")
    assert lines[1] == f"train: step 2/2: loss {loss}, dice {dice}, S s/step"

    assert cli(argv + ["--steps", "3"]) == 0    # default --log-every: a tenth of 3, so 1
    out, err = capsys.readouterr()
    loss, dice = out.splitlines()[-1].removeprefix("step 3: loss ").split(", mean Dice ")
    assert _train_lines(err) == [f"train: restored {model_dir}/ckpt-2 (step 2)",
                                 f"train: step 3/3: loss {loss}, dice {dice}, S s/step"]

