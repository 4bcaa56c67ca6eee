"""Damaged checkpoints: newest_readable passes over each kind of damage, Checkpointer
resumes from the checkpoint before, and a save killed midway never leaves the
``checkpoint`` file naming a partial checkpoint. Real files, real TensorFlow."""
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from checkpoint_damage import DATA, truncate, write, zero
from spatial_tf.train import (CheckpointMismatchError, Checkpointer, CheckpointUnreadableError,
                              newest_readable)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NEWEST = "; {doing} ckpt-{step}, the newest readable checkpoint"


def _dense():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(64)])


@pytest.fixture
def saved(tmp_path):
    """A folder with ckpt-1, ckpt-2 and ckpt-3, the weights of step k all equal to k."""
    model = _dense()
    ckpt = Checkpointer(tmp_path, model=model)
    for step in (1, 2, 3):
        for w in model.weights:
            w.assign(tf.fill(w.shape, float(step)))
        ckpt.save(step)
    return str(tmp_path)


# (damage, the step restored, what the notice says was wrong; {d} is the folder)
CASES = {
    "data truncated": (lambda d: truncate(os.path.join(d, DATA)), 2,
                       "{d}/" + DATA + " is truncated (shorter than its index says)"),
    "data zeroed": (lambda d: zero(os.path.join(d, DATA)), 2,
                    "{d}/" + DATA + " does not match its checksum (its bytes were changed)"),
    "data missing": (lambda d: os.remove(os.path.join(d, DATA)), 2, "{d}/" + DATA + " is missing"),
    "index garbage": (lambda d: write(os.path.join(d, "ckpt-3.index"), bytes(range(256)) * 2), 2,
                      "{d}/ckpt-3.index is not a checkpoint index (not an sstable (bad magic "
                      "number))"),
    "index missing": (lambda d: os.remove(os.path.join(d, "ckpt-3.index")), 2,
                      "{d}/ckpt-3.index is missing"),
    "pointer binary": (lambda d: write(os.path.join(d, "checkpoint"), b"\xff\xfe\x00garbage"), 3,
                       "{d}/checkpoint cannot be read (it is not text)"),
    "pointer text": (lambda d: write(os.path.join(d, "checkpoint"), b"model_checkpoint"), 3,
                     "{d}/checkpoint cannot be read (it names no checkpoint)"),
    "pointer empty": (lambda d: write(os.path.join(d, "checkpoint"), b""), 3,
                      "{d}/checkpoint cannot be read (it names no checkpoint)"),
    "pointer missing": (lambda d: os.remove(os.path.join(d, "checkpoint")), 3,
                        "{d}/checkpoint is missing"),
}


def _files(folder):
    return {name: open(os.path.join(folder, name), "rb").read() for name in os.listdir(folder)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_newest_readable_passes_over_each_damage(saved, case):
    damage, step, problem = CASES[case]
    damage(saved)
    before = _files(saved)
    found = newest_readable(saved)
    assert found.path == os.path.join(saved, f"ckpt-{step}")
    assert found.notice() == problem.format(d=saved) + NEWEST.format(doing="using", step=step)
    assert _files(saved) == before  # read only


@pytest.mark.parametrize("case", ["data truncated", "index missing", "pointer binary"])
def test_checkpointer_restores_the_newest_readable_and_saves_over_it(saved, case):
    damage, step, problem = CASES[case]
    damage(saved)
    model = _dense()
    ckpt = Checkpointer(saved, model=model)
    assert ckpt.restore() == step
    assert all(np.all(w.numpy() == step) for w in model.weights)
    assert ckpt.found.notice("resuming from") == problem.format(d=saved) + NEWEST.format(
        doing="resuming from", step=step)
    ckpt.save(4)  # the next save names a readable checkpoint, whatever the pointer was
    again = newest_readable(saved)
    assert again.path == os.path.join(saved, "ckpt-4") and again.notice() is None
    assert tf.train.latest_checkpoint(saved) == os.path.join(saved, "ckpt-4")


def test_the_pointer_names_a_checkpoint_whose_files_are_gone(saved):
    for name in ("ckpt-3.index", DATA):
        os.remove(os.path.join(saved, name))
    assert newest_readable(saved).notice() == (
        f"{saved}/checkpoint names ckpt-3, whose files are missing; using ckpt-2, the newest "
        f"readable checkpoint")


def test_no_readable_checkpoint_is_one_error_naming_every_file(saved):
    for step in (1, 2, 3):
        truncate(os.path.join(saved, f"ckpt-{step}.data-00000-of-00001"))
    os.remove(os.path.join(saved, "ckpt-2.index"))
    before = _files(saved)
    message = (
        f"{saved}: no checkpoint in it can be read (ckpt-3.data-00000-of-00001 is truncated "
        f"(shorter than its index says); ckpt-2.index is missing; ckpt-1.data-00000-of-00001 is "
        f"truncated (shorter than its index says)); expected ckpt-N.index with its "
        f"ckpt-N.data-* files as training writes them. Fix: restore them from a copy, or move "
        f"them out of {saved} and train again from step 0")
    with pytest.raises(CheckpointUnreadableError) as e:
        newest_readable(saved)
    assert str(e.value) == message
    with pytest.raises(CheckpointUnreadableError):
        Checkpointer(saved, model=_dense()).restore()
    assert _files(saved) == before


def test_an_empty_folder_has_no_checkpoint(tmp_path):
    assert newest_readable(tmp_path) == (None, ())
    assert newest_readable(tmp_path / "missing") == (None, ())
    assert Checkpointer(tmp_path, model=_dense()).restore() == 0
    assert os.listdir(tmp_path) == []


def test_another_models_checkpoint_suggests_no_deleting(saved):
    with pytest.raises(CheckpointMismatchError) as e:
        Checkpointer(saved, model=keras.Sequential([keras.Input((3,)),
                                                    keras.layers.Dense(5)])).restore()
    assert str(e.value).endswith(f"Fix: use another model dir ({saved} keeps that model's "
                                 f"checkpoints).")
    assert "remove" not in str(e.value)


SAVER = """
import sys
import tensorflow as tf
from spatial_tf.train import Checkpointer

big = tf.Variable(tf.zeros([2_000_000]))
ckpt = Checkpointer(sys.argv[1], big=big)
step = 0
while True:
    step += 1
    big.assign(tf.fill(big.shape, float(step)))
    ckpt.save(step)
    print(step, flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.13])
def test_a_save_killed_midway_leaves_the_pointer_on_a_whole_checkpoint(tmp_path, delay):
    # the saver writes 8 MB checkpoints back to back; SIGKILL lands during some write
    folder = str(tmp_path / "run")
    proc = subprocess.Popen([sys.executable, "-c", SAVER, folder], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, PYTHONPATH=REPO), cwd=REPO)
    for _ in range(3):  # three saves done: the loop runs
        assert proc.stdout.readline().strip()
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    named = tf.train.get_checkpoint_state(folder).model_checkpoint_path
    reader = tf.train.load_checkpoint(named)  # whole: every tensor reads, checksums match
    step = int(os.path.basename(named).split("-")[1])
    big = [k for k in reader.get_variable_to_shape_map() if k.startswith("big/")][0]
    assert np.all(reader.get_tensor(big) == step)
    found = newest_readable(folder)
    assert int(os.path.basename(found.path).split("-")[1]) >= step
    assert all(not path.endswith("/checkpoint") for path, _ in found.skipped)
