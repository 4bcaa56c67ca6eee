"""The notebooks: stored without outputs, sized by one marked variable, and their first
cell says what to install when TensorFlow or jax is missing. (pytest runs the notebooks
themselves through nbmake: see setup.cfg.)"""
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

NOTEBOOKS = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
EXPECTED = ["ct_segmentation.ipynb", "large_image_detection.ipynb", "migrating_from_tpuestimator.ipynb",
            "planning.ipynb",
            "quickstart.ipynb", "real_mri_segmentation.ipynb", "video.ipynb"]


def _cells(name):
    return json.loads((NOTEBOOKS / name).read_text())["cells"]


def test_the_notebooks_are_there():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == EXPECTED


@pytest.mark.parametrize("name", EXPECTED)
def test_outputs_are_stripped(name):
    code = [c for c in _cells(name) if c["cell_type"] == "code"]
    assert code
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)


@pytest.mark.parametrize("name", EXPECTED)
def test_every_cell_has_its_own_id(name):
    """nbformat 4.5 wants an id on each cell (1 to 64 of letters, digits, - and _); a
    cell without one makes nbformat warn wherever the notebook is read."""
    ids = [c.get("id") for c in _cells(name)]
    assert all(isinstance(i, str) and re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", i) for i in ids), ids
    assert len(set(ids)) == len(ids), ids


@pytest.mark.parametrize("name", EXPECTED)
def test_one_marked_scale_variable(name):
    sources = ["".join(c["source"]) for c in _cells(name) if c["cell_type"] == "code"]
    assert sum("ON_TPU_SCALE = False" in s for s in sources) == 1
    assert "REPOSITORY_URL = " in sources[0] and "spatial_tf.auto(" in "".join(sources)


def _run_first_cell(name, hide):
    source = "".join(_cells(name)[1]["source"])   # cell 0 is the title
    assert source.startswith("# Setup")
    program = f"import sys\nfor m in {hide!r}: sys.modules[m] = None\n" + source
    env = {k: v for k, v in os.environ.items() if k not in ("TPU_NAME", "COLAB_TPU_ADDR")}
    return subprocess.run([sys.executable, "-c", program], cwd=NOTEBOOKS, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", EXPECTED)
def test_first_cell_without_tensorflow_says_what_to_install(name):
    result = _run_first_cell(name, ["tensorflow"])
    assert result.returncode != 0
    assert "TensorFlow is not installed" in result.stderr
    assert "pip install tensorflow-cpu" in result.stderr


@pytest.mark.skipif(any(p.startswith("accel") for p in os.listdir("/dev")), reason="a TPU machine")
@pytest.mark.parametrize("name", EXPECTED)
def test_first_cell_without_jax_says_what_to_install(name):
    result = _run_first_cell(name, ["jax", "jaxlib"])
    assert result.returncode != 0
    assert "jax/jaxlib are not installed" in result.stderr
    assert "pip install 'jax>=0.10.2,<0.11'" in result.stderr


def test_first_cell_with_everything_installed_uses_this_clone():
    result = _run_first_cell(EXPECTED[0], [])
    assert result.returncode == 0, result.stderr
    assert f"spatial_tf from {NOTEBOOKS.parent / 'spatial_tf'}" in result.stdout
