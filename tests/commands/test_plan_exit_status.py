"""python -m spatial_tf plan exits 1 when no candidate fits the budget, 0 when one does:
a script or CI job can branch on it. Budgets given as sizes are decided on XLA:CPU's
figures (no TPU compiler), so each run takes seconds."""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAN = ["plan", "--shape", "1,8,8,8,1", "--cores", "2", "--depth", "1", "--filters", "2",
        "--classes", "2", "--no-progress"]


# one test for the three budgets: they plan the same program, compiled once into one cache
@pytest.mark.slow
def test_the_exit_status_says_whether_a_candidate_fits(tmp_path, monkeypatch, capsys, cli):
    monkeypatch.setenv("SPATIAL_TF_COMPILE_CACHE", str(tmp_path))
    # the process's own exit status: 1 when no candidate fits
    done = subprocess.run(
        [sys.executable, "-m", "spatial_tf", *PLAN, "--budget", "1KiB"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": REPO})
    assert done.returncode == 1, done.stderr[-2000:]
    assert "No candidate fits 1.0 KiB per core" in done.stdout
    assert "Traceback" not in done.stderr
    # 0 when one fits, or with no budget: main's return value, which `python -m
    # spatial_tf` exits with (sys.exit(main())), here without a second TensorFlow start
    for budget, says in [(["--budget", "1GiB"], "Recommended [1,2,1,1,1]: fits 1GiB"),
                         ([], "Recommended [1,2,1,1,1]: it moves the least halo")]:
        assert cli(PLAN + budget) == 0, budget
        out, err = capsys.readouterr()
        assert says in out, out
        assert "Traceback" not in err


def test_the_help_says_the_exit_status():
    done = subprocess.run([sys.executable, "-m", "spatial_tf", "plan", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": REPO})
    assert done.returncode == 0
    assert "Exit status: 0 when a candidate fits --budget" in done.stdout
    assert "1 when no candidate fits" in " ".join(done.stdout.split())
