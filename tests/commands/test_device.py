"""--device auto|tpu|cpu of train, evaluate and predict, and --spec setting --cores: on a
machine without a TPU, auto says so in one line, cpu says nothing, tpu stops with one
line; the core count follows from a --spec given alone."""
import os

import pytest

from spatial_tf import strategy as strategy_lib
from spatial_tf.__main__ import main

TINY = ["--size", "16", "--depth", "2", "--filters", "4"]
NO_TPU = ("no TPU found (TPU_NAME and COLAB_TPU_ADDR are not set, no /dev/accel* or "
          "/dev/vfio/N devices)")


@pytest.fixture
def no_tpu_here(monkeypatch):
    """This machine as one without a TPU, whatever the environment says."""
    for name in ("TPU_NAME", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPU_CONFIG", "COLAB_TPU_ADDR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(strategy_lib, "_LOCAL_TPU_DEVICES", ("/nonexistent/accel*",))


def tpu_refused(prog):
    return (f"{prog}: error: argument --device: tpu is not possible here: {NO_TPU}; expected "
            f"a Cloud TPU VM, a Colab TPU runtime or TPU_NAME naming a TPU. Fix: run there, or "
            f"pass --device cpu for the CPU emulator\n")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 3D U-Net model dir trained one step on 2 emulated cores."""
    model_dir = str(tmp_path_factory.mktemp("device") / "model")
    assert main(["train", "unet3d", "--model-dir", model_dir, "--cores", "2", "--steps", "1",
                 "--no-progress", "--device", "cpu"] + TINY) == 0
    return model_dir


@pytest.mark.emulator
@pytest.mark.slow
def test_train_without_a_tpu_says_so_in_one_line(no_tpu_here, tmp_path, capsys):
    model_dir = str(tmp_path / "model")
    assert main(["train", "unet3d", "--model-dir", model_dir, "--cores", "2", "--steps", "1",
                 "--no-progress"] + TINY) == 0
    out, err = capsys.readouterr()
    prog = "python -m spatial_tf train"
    assert [line for line in err.splitlines() if "TPU" in line or "emulator" in line] == [
        f"{prog}: running on the CPU emulator (2 cores per replica): {NO_TPU}; pass --device "
        f"cpu to choose it without this line"]
    assert "directly" not in err and "spatial_tf.auto" not in err
    assert (f"{prog}: unet3d 16x16x16, 3 classes, float32 on the CPU emulator (2 cores per "
            f"replica), spec [[1, 2, 1, 1, 1], [1, 2, 1, 1]], to step 1 in {model_dir}") in \
        out.splitlines()


@pytest.mark.emulator
@pytest.mark.slow
def test_device_cpu_says_nothing_and_a_spec_alone_sets_the_cores(no_tpu_here, tmp_path,
                                                                   capsys):
    model_dir = str(tmp_path / "model")
    assert main(["train", "unet3d", "--model-dir", model_dir, "--spec", "1,1,2,2,1",
                 "--steps", "1", "--no-progress", "--device", "cpu"] + TINY) == 0
    out, err = capsys.readouterr()
    assert "TPU" not in err and "emulator" not in err
    assert ("python -m spatial_tf train: unet3d 16x16x16, 3 classes, float32 on the CPU "
            "emulator (4 cores per replica), spec [[1, 1, 2, 2, 1], [1, 1, 2, 2]], to step 1 "
            f"in {model_dir}") in out.splitlines()


@pytest.mark.emulator
def test_train_device_tpu_without_a_tpu_stops_in_one_line(no_tpu_here, tmp_path, capsys):
    model_dir = tmp_path / "model"
    assert main(["train", "unet3d", "--model-dir", str(model_dir), "--cores", "2",
                 "--device", "tpu"] + TINY) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", tpu_refused("python -m spatial_tf train"))
    assert not model_dir.exists() or os.listdir(model_dir) == []  # nothing written


@pytest.mark.emulator
@pytest.mark.slow
@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_evaluate_and_predict_device_tpu_without_a_tpu_stop_in_one_line(
        no_tpu_here, trained, tmp_path, capsys, command):
    argv = [command, "--model-dir", trained, "--device", "tpu"]
    if command == "predict":
        argv += ["--output", str(tmp_path / "mask.npy")]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", tpu_refused(f"python -m spatial_tf {command}"))


@pytest.mark.emulator
@pytest.mark.slow
@pytest.mark.parametrize("device, notice", [("auto", True), ("cpu", False)])
def test_evaluate_on_cores_says_no_tpu_unless_device_cpu(no_tpu_here, trained, capsys, device,
                                                         notice):
    assert main(["evaluate", "--model-dir", trained, "--volumes", "1", "--cores", "2",
                 "--device", device]) == 0
    out, err = capsys.readouterr()
    prog = "python -m spatial_tf evaluate"
    expected = [f"{prog}: running on the CPU emulator (2 cores per replica): {NO_TPU}; pass "
                f"--device cpu to choose it without this line"] if notice else []
    assert [line for line in err.splitlines() if "TPU" in line or "emulator" in line] == \
        expected
    assert "16x16x16, on the CPU emulator (2 cores per replica):" in out


@pytest.mark.parametrize("argv, message", [
    # --spec alone sets --cores: the next check names the --spec, not a --cores 8 never typed
    (["unet3d", "--spec", "1,4,4,1,1", "--size", "20"],
     "argument --size: 20 is not allowed with --spec 1,4,4,1,1 and --depth 3; expected a "
     "multiple of 16 (axis D split 4 ways, 4x pooled), e.g. --size 16"),
    (["unet3d", "--cores", "8", "--spec", "1,4,4,1,1"],
     "argument --spec: 1,4,4,1,1 (product 16) is not allowed with --cores 8; expected split "
     "counts whose product is 8. Fix: e.g. --spec 1,2,2,2,1, or leave --cores out to split "
     "over 16"),
    (["unet3d", "--spec", "1,3,1,1,1"],
     "argument --spec: 1,3,1,1,1 splits over 3 cores; expected split counts whose product is "
     "a power of two from 1 to 128 (the cores per replica), e.g. 1,2,1,1,1"),
    (["unet3d", "--spec", "1,1,1,1,2"],
     "argument --spec: 1,1,1,1,2 is not allowed with unet3d; expected 5 split counts "
     "(B,D,H,W,C), channels unsplit (last 1), e.g. 1,2,1,1,1"),
    (["retinanet", "--spec", "1,4,4,1", "--image-size", "96"],
     "argument --image-size: 96 is not allowed with --spec 1,4,4,1; expected a multiple of 128 "
     "(the coarsest pyramid level, stride 32, split 4 ways), e.g. --image-size 128"),
    (["retinanet", "--cores", "4", "--spec", "1,4,4,1"],
     "argument --spec: 1,4,4,1 (product 16) is not allowed with --cores 4; expected split "
     "counts whose product is 4. Fix: e.g. --spec 1,2,2,1, or leave --cores out to split over "
     "16"),
])
def test_spec_alone_sets_the_cores_and_a_disagreement_names_both(parse_error, tmp_path, argv,
                                                                 message):
    model, rest = argv[0], argv[1:]
    err = parse_error(["train", model, "--model-dir", str(tmp_path / "m")] + rest)
    assert err == f"python -m spatial_tf train: error: {message} (see python -m spatial_tf " \
                  f"train --help)\n"


def test_device_is_one_of_three(parse_error, tmp_path):
    err = parse_error(["train", "unet3d", "--model-dir", str(tmp_path / "m"), "--device", "gpu"])
    assert err == ("python -m spatial_tf train: error: argument --device: invalid choice: "
                   "'gpu' (choose from 'auto', 'tpu', 'cpu') (see python -m spatial_tf train "
                   "--help)\n")
