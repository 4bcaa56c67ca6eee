"""python -m spatial_tf plan exits 1 when no candidate fits the budget, 0 when one does:
a script or CI job can branch on it. Budgets given as sizes are decided on XLA:CPU's
figures (no TPU compiler), so each run takes seconds."""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
@pytest.mark.parametrize("budget, status, says", [
    (["--budget", "1KiB"], 1, "No candidate fits 1.0 KiB per core"),
    (["--budget", "1GiB"], 0, "Recommended [1,2,1,1,1]: fits 1GiB"),
    ([], 0, "Recommended [1,2,1,1,1]: it moves the least halo"),
])
def test_the_exit_status_says_whether_a_candidate_fits(tmp_path, budget, status, says):
    done = subprocess.run(
        [sys.executable, "-m", "spatial_tf", "plan", "--shape", "1,8,8,8,1", "--cores", "2",
         "--depth", "1", "--filters", "2", "--classes", "2", "--no-progress", *budget],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": REPO, "SPATIAL_TF_COMPILE_CACHE": str(tmp_path)})
    assert done.returncode == status, done.stderr[-2000:]
    assert says in done.stdout
    assert "Traceback" not in done.stderr


def test_the_help_says_the_exit_status():
    done = subprocess.run([sys.executable, "-m", "spatial_tf", "plan", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": REPO})
    assert done.returncode == 0
    assert "Exit status: 0 when a candidate fits --budget" in done.stdout
    assert "1 when no candidate fits" in " ".join(done.stdout.split())
