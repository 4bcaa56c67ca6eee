import os
import re
import subprocess
import sys

import numpy as np
import pytest

from spatial_tf import data
from spatial_tf.__main__ import main
from test_logs import NOISE, REPO   # TensorFlow's and XLA's log lines a user once saw


@pytest.mark.emulator
@pytest.mark.slow
def test_demo_trains_a_3d_unet_on_the_emulator_and_finds_the_structures(tmp_path):
    """The README's demo as a user runs it: a process of its own, TensorFlow's log level
    not set; the results on stdout, nothing on stderr but the progress bar."""
    png = str(tmp_path / "slice.png")
    environ = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(  # the defaults: 32^3, 20 steps, 8 cores
        [sys.executable, "-m", "spatial_tf", "demo", "--png", png],
        env=dict(environ, PYTHONPATH=REPO), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    # tqdm redraws its bar with carriage returns on stderr; nothing else may be there
    redraws = [part for line in result.stderr.splitlines() for part in line.split("\r")]
    assert [part for part in redraws if part.strip() and "|" not in part] == []
    assert not any(n in out + result.stderr for n in NOISE)
    assert "3D U-Net on 8 emulated cores, CT-like 32x32x32 volumes, batch 1, 20 steps" in out
    assert re.search(r"^features +\(1, 32, 32, 32, 1\) +float32 +Tile\(1, 2, 2, 2, 1\) +"
                     r"\(1, 16, 16, 16, 1\)", out, re.M)
    assert re.search(r"^labels +\(1, 32, 32, 32\) +int32 +Tile\(1, 2, 2, 2\) +\(1, 16, 16, 16\)",
                     out, re.M)
    assert "training on the CPU emulator (8 cores per replica) (the first step traces and " \
           "compiles)" in out
    assert "20/20" in result.stderr  # the progress bar
    loss = float(re.search(r"^step 20: loss (\d+\.\d+), mean Dice", out, re.M).group(1))
    assert 0 < loss < 10
    assert "step on 8 cores (8 virtual CPU devices)" in out
    assert re.search(r"^collective-permute +\d+", out, re.M)  # halo exchange was reported
    assert "all-gather" not in out  # spatial_tf's losses keep the split
    assert re.search(r"^temp +[\d.]+ (KiB|MiB) +[\d.]+ (KiB|MiB) +0\.\d\d$", out, re.M)
    assert re.search(r"^correct: all \d+ results match$", out, re.M)
    lines = out.splitlines()
    verdict = next(i for i, line in enumerate(lines) if line.startswith("correct: all"))
    outputs, updates = map(int, re.fullmatch(
        r"results: the step's (\d+) outputs and (\d+) variable updates, each computed "
        r"partitioned and unpartitioned from the same weights and batch, and compared",
        lines[verdict + 1]).groups())
    assert outputs == 2 and outputs + updates == int(lines[verdict].split()[2])  # loss, dice
    rows = next(i for i, line in enumerate(lines) if line.startswith("argument: "))
    assert lines[rows - 1].startswith("all-reduce ") and lines[rows:rows + 5] == [
        "argument: what the step reads on each core: the weights, the optimizer state and its "
        "piece of the batch",
        "output: what the step writes: the new weights and optimizer state, the loss and the "
        "Dice",
        "alias: the outputs written in place of their arguments (the variables), counted once",
        "temp: activations, gradients and scratch space while the step runs; peak = argument + "
        "output - alias + temp",
        ""]
    assert f"slice PNG (input / label / prediction): {png}" in out
    assert os.path.getsize(png) > 1000

    found = re.search(r"^held-out Dice on 3 volumes: background (\S+), organ (\S+), lesion (\S+); "
                      r"chance \(voxels guessed regardless of the image\) at most organ (\S+), "
                      r"lesion (\S+)$", out, re.M)
    background, organ, lesion, organ_chance, lesion_chance = map(float, found.groups())
    # chance level: guessing each voxel a class with probability q, whatever the image,
    # expects Dice 2pq / (p + q) on a class covering a fraction p of the voxels; q = 1 gives
    # the most, 2p / (1 + p). The held-out volumes are the demo's seeds 10000..10002.
    labels = np.stack([data.synthetic_ct((32, 32, 32), seed=10000 + i, num_classes=3)[1]
                       for i in range(3)])
    bound = [2 * p / (1 + p) for p in ((labels == c).mean() for c in (1, 2))]
    assert (organ_chance, lesion_chance) == pytest.approx(bound, abs=5e-4)
    assert max(bound) < 0.05  # small structures: 2% and 0.3% of the voxels
    # the prediction finds them: the organ well above chance, foreground on average too
    assert organ > 5 * bound[0] and (organ + lesion) / 2 > 3 * max(bound)
    assert background > 0.95


def test_help_lists_commands(capsys):
    assert main([]) == 2
    out = capsys.readouterr().out
    assert all(name in out for name in ("demo", "describe", "train", "evaluate", "predict"))
