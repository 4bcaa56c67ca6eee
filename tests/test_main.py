"""``python -m spatial_tf`` run from a folder that holds a directory named spatial_tf."""
import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_a_folder_named_spatial_tf_in_the_working_directory_does_not_shadow_the_package(tmp_path):
    # e.g. the parent folder of a clone of the repository: `-m` puts the working
    # directory first on sys.path, where the clone is a namespace package named spatial_tf
    (tmp_path / "spatial_tf" / "spatial_tf").mkdir(parents=True)
    (tmp_path / "spatial_tf" / "setup.cfg").write_text("[metadata]\nname = spatial-tf\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the installed package
    result = subprocess.run(
        [sys.executable, "-m", "spatial_tf", "train", "unet3d", "--steps", "1", "--size", "8",
         "--cores", "2", "--depth", "1", "--model-dir", str(tmp_path / "model"),
         "--no-progress"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "has no attribute" not in result.stderr
    assert result.stdout.splitlines()[-1].startswith("step 1: loss ")
    assert (tmp_path / "model" / "model.json").is_file()


@pytest.mark.slow
@pytest.mark.skipif(__import__("spatial_tf.emulator.tpu.tpu_compile", fromlist=["x"])
                    .libtpu_version() is None,
                    reason="needs libtpu (XLA's TPU compiler): pip install "
                           "'spatial-tf[tpu-compile]'")
def test_ctrl_c_before_any_answer_is_one_line_and_exit_130(tmp_path):
    import signal
    import time

    from spatial_tf.emulator.tpu import _xla_tpu

    env = {**os.environ, "SPATIAL_TF_COMPILE_CACHE": str(tmp_path),
           _xla_tpu.TEST_SLEEP_ENV: "120"}  # the compile waits until Ctrl-C comes
    command = [sys.executable, "-m", "spatial_tf", "plan", "--shape", "1,16,16,16,1",
               "--cores", "2", "--depth", "1", "--budget", "v5e", "--no-progress"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline, workers = time.monotonic() + 120, []
    while time.monotonic() < deadline:
        workers = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True,
                                 text=True).stdout.split()
        if workers:
            break
        time.sleep(0.5)
    assert workers, "the TPU compiler's worker never started"
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130
    assert err.strip().splitlines()[-1] == "python -m spatial_tf plan: stopped by Ctrl-C."
    assert "Traceback" not in err
    time.sleep(1)
    for pid in workers:
        assert not os.path.exists(f"/proc/{pid}"), "the worker outlived the command"
