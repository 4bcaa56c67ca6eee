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
