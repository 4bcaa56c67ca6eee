"""Output paths are checked before any work: one line on stderr, exit status 2, nothing
written, no input overwritten; outputs are written whole (a temporary file renamed).

The command lines run as a user runs them, in a subprocess, so the exit status, the exact
stderr and the time to fail are what a terminal shows.
"""
import hashlib
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from spatial_tf.commands import outputs, volumes

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAST = 20  # seconds: parsing only, no TensorFlow (training the demo takes about a minute)
UNWRITABLE = "/sys/spatial_tf_test"  # refused to every user, root included


def cli(*argv, timeout=120):
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "spatial_tf", *argv],
                            env=dict(os.environ, PYTHONPATH=REPO), capture_output=True,
                            text=True, timeout=timeout, cwd=REPO)
    return result, time.monotonic() - start


def refused(command, argv, problem):
    """Run, expect exit 2 within FAST seconds and exactly ``problem`` on stderr."""
    result, seconds = cli(*command.split(), *argv)
    prog = f"python -m spatial_tf {command.split()[0]}"
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr == f"{prog}: error: {problem} (see {prog} --help)\n"
    assert seconds < FAST


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture
def place(tmp_path):
    """A folder with a file ``a_file`` and a folder ``a_dir`` in it."""
    (tmp_path / "a_dir").mkdir()
    (tmp_path / "a_file").write_text("keep me")
    return tmp_path


def dir_problem(option, path, example):
    return (f"argument {option}: {path} is a directory; expected a file to write. Fix: name a "
            f"file in it, e.g. {option} {os.path.join(path, example)}")


def under_file_problem(option, path, parent):
    return (f"argument {option}: {path} cannot be written: {parent} is a file, not a folder; "
            f"expected a path whose folders exist or can be created. Fix: choose another path "
            f"for {option}")


def unwritable_problem(option, path, reason):
    return (f"argument {option}: {path} cannot be written: /sys is not writable ({reason}); "
            f"expected a path in a folder you can write to (missing folders are created). Fix: "
            f"choose another path for {option}, or make /sys writable")


@pytest.fixture(scope="module")
def sys_refuses():
    """Why /sys (the kernel's sysfs) takes no new file, from root either (its strerror)."""
    try:
        fd, probe = tempfile.mkstemp(dir="/sys")
    except OSError as e:
        return e.strerror
    os.close(fd)
    os.remove(probe)
    pytest.skip("/sys takes new files on this machine: no unwritable folder to try")


PLAN = "plan --shape 1,16,16,16,1 --cores 2"
FILE_OUTPUTS = [("demo", "--png", "slice.png"), (PLAN, "--plot", "plan.png"),
                ("predict --model-dir m", "--output", "prediction.npy"),
                ("predict --model-dir m", "--png", "slice.png")]


@pytest.mark.parametrize("command, option, example", FILE_OUTPUTS)
def test_a_directory_is_refused_where_a_file_goes(place, command, option, example):
    path = str(place / "a_dir")
    refused(command, [option, path], dir_problem(option, path, example))
    assert os.listdir(path) == []


@pytest.mark.parametrize("command, option, example", FILE_OUTPUTS)
def test_a_folder_that_is_a_file_is_refused(place, command, option, example):
    path = str(place / "a_file" / "sub" / "out.png")
    refused(command, [option, path], under_file_problem(option, path, str(place / "a_file")))
    assert (place / "a_file").read_text() == "keep me"


@pytest.mark.parametrize("command, option, example", FILE_OUTPUTS)
def test_an_unwritable_folder_is_refused(sys_refuses, command, option, example):
    path = f"{UNWRITABLE}/out.png"
    refused(command, [option, path], unwritable_problem(option, path, sys_refuses))
    assert not os.path.exists(UNWRITABLE)


@pytest.mark.parametrize("model", ["unet3d", "retinanet"])
def test_train_refuses_a_model_dir_it_cannot_write(place, sys_refuses, model):
    train = f"train {model}"
    path = str(place / "a_file")
    refused(train, ["--model-dir", path], f"argument --model-dir: {path} is a file; expected a "
                                          f"directory (created when missing). Fix: choose another "
                                          f"--model-dir")
    path = str(place / "a_file" / "model")
    refused(train, ["--model-dir", path], under_file_problem("--model-dir", path,
                                                             str(place / "a_file")))
    path = f"{UNWRITABLE}/model"
    refused(train, ["--model-dir", path], unwritable_problem("--model-dir", path, sys_refuses))
    assert (place / "a_file").read_text() == "keep me" and not os.path.exists(UNWRITABLE)


def same_problem(option, path, other, source):
    return (f"argument {option}: {path} is the same file as {other} {source}; expected a file "
            f"of its own (writing it would overwrite that one). Fix: choose another path for "
            f"{option}")


@pytest.fixture
def volume(tmp_path):
    """A volume and its labels (.npy), and a model dir holding only a model.json."""
    image, labels = str(tmp_path / "ct.npy"), str(tmp_path / "ct_labels.npy")
    np.save(image, np.zeros((16, 16, 16), np.float32))
    np.save(labels, np.zeros((16, 16, 16), np.int32))
    model_dir = str(tmp_path / "model")
    volumes.write_record(model_dir, {"model": "unet3d", "shape": [16, 16, 16], "classes": 3,
                                     "depth": 2, "filters": 4})
    return image, labels, model_dir


def test_predict_never_writes_over_its_inputs(volume, tmp_path):
    image, labels, model_dir = volume
    record = os.path.join(model_dir, "model.json")
    before = {p: sha(p) for p in (image, labels, record)}
    base = ["predict", "--model-dir", model_dir, "--input", image, "--labels", labels]
    refused(" ".join(base), ["--output", image], same_problem("--output", image, "--input", image))
    refused(" ".join(base), ["--png", labels], same_problem("--png", labels, "--labels", labels))
    refused(" ".join(base), ["--png", record],
            same_problem("--png", record, "--model-dir", record))
    # another spelling of the same file: a link, a path with ..
    os.symlink(image, tmp_path / "link.npy")
    link = str(tmp_path / "link.npy")
    refused(" ".join(base), ["--output", link], same_problem("--output", link, "--input", image))
    dotted = os.path.join(model_dir, "..", "ct.npy")
    refused(" ".join(base), ["--output", dotted],
            same_problem("--output", dotted, "--input", image))
    out = str(tmp_path / "mask.npy")
    refused(" ".join(base), ["--output", out, "--png", out],
            same_problem("--png", out, "--output", out))
    assert {p: sha(p) for p in before} == before
    assert not os.path.exists(out)


def test_retinanet_predict_never_writes_over_its_input_image(volume, tmp_path):
    _, _, model_dir = volume
    image = str(tmp_path / "photo.png")
    with open(image, "wb") as f:
        f.write(b"\x89PNG not really")
    before = sha(image)
    refused(f"predict --model-dir {model_dir} --input {image}", ["--png", image],
            same_problem("--png", image, "--input", image))
    assert sha(image) == before


def test_predicts_default_output_is_checked_before_the_model_runs(volume, capsys):
    """Without --output the mask goes to MODEL_DIR/prediction.npy: here that is --input."""
    import keras

    from spatial_tf.__main__ import main
    from spatial_tf.train import Checkpointer

    _, _, model_dir = volume
    Checkpointer(model_dir, model=keras.Sequential([keras.Input((2,)),
                                                    keras.layers.Dense(1)])).save(1)
    image = os.path.join(model_dir, "prediction.npy")
    np.save(image, np.zeros((16, 16, 16), np.float32))
    before = sha(image)
    assert main(["predict", "--model-dir", model_dir, "--input", image]) == 2
    assert capsys.readouterr().err == (
        f"python -m spatial_tf predict: error: "
        f"{same_problem('--output', image, '--input', image)}\n")
    assert sha(image) == before


def test_checks_change_nothing(tmp_path):
    outputs.check_file("--png", str(tmp_path / "new" / "deeper" / "x.png"))
    outputs.check_dir("--model-dir", str(tmp_path / "m"))
    outputs.check_dir("--model-dir", str(tmp_path))
    assert os.listdir(tmp_path) == []  # no folder made, no probe file left


def test_write_atomically_replaces_whole_files_only(tmp_path):
    path = str(tmp_path / "sub" / "mask.nii.gz")
    seen = []

    def write(tmp):
        seen.append(tmp)
        with open(tmp, "w") as f:
            f.write("new")

    outputs.write_atomically(path, write)
    assert seen[0].endswith(".nii.gz") and os.path.dirname(seen[0]) == os.path.dirname(path)
    assert open(path).read() == "new" and os.listdir(tmp_path / "sub") == ["mask.nii.gz"]
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask

    def fail(tmp):
        with open(tmp, "w") as f:
            f.write("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        outputs.write_atomically(path, fail)
    assert open(path).read() == "new" and os.listdir(tmp_path / "sub") == ["mask.nii.gz"]


def test_model_json_is_written_whole(tmp_path):
    record = {"model": "unet3d", "shape": [8, 8, 8], "classes": 2, "depth": 2, "filters": 2}
    volumes.write_record(str(tmp_path), record)
    with pytest.raises(TypeError):
        volumes.write_record(str(tmp_path), dict(record, bad=object()))  # fails midway
    assert volumes.read_record(str(tmp_path)) == record
    assert os.listdir(tmp_path) == ["model.json"]
