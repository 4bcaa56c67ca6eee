"""python -m spatial_tf plan: options checked before TensorFlow loads, a real small plan."""
import os
import re
import subprocess
import sys

import pytest

from spatial_tf.__main__ import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("argv, message", [
    (["--shape", "1,16,16,16,1", "--cores", "6"],
     "argument --cores: 6 is not allowed; expected a power of two from 1 to 128"),
    (["--shape", "1,16,x,16,1"],
     "argument --shape: expected batch,spatial sizes...,channels as 3 to 6 comma-separated"),
    (["--shape", "16,16"],
     "argument --shape: expected batch,spatial sizes...,channels as 3 to 6"),
    (["--shape", "1,16,16,16,1", "--fit-sizes", "16"],
     "argument --fit-sizes: expected 2 to 4 different comma-separated cube edges"),
    (["--shape", "1,16,16,16,1", "--max-size"],
     "argument --max-size: needs --budget; expected e.g. --budget v3"),
    (["--shape", "1,16,16,16,1", "--budget", "v3", "--max-size", "--fit-sizes", "none",
      "--memory", "cpu"],
     "argument --max-size: needs --fit-sizes; expected e.g. --fit-sizes 32,48,64"),
    (["--shape", "1,16,16,16,1", "--budget", "16GiB", "--fewest-cores"],
     "argument --fewest-cores: needs XLA's TPU compiler (pip install "
     "'spatial-tf[tpu-compile]') and a TPU generation as --budget; expected e.g. --budget v3"),
    (["--shape", "1,16,16,16,1", "--fit-sizes", "16,18"],
     "argument --fit-sizes: 18 is not allowed with --depth 3; expected multiples of 4"),
    (["--shape", "1,16,18,16,1"],
     "argument --shape: spatial size 18 (axis 2) is not allowed with --depth 3; expected a multiple of 4"),
    (["--shape", "1,16,16,16,1", "--cores", "1,3"],
     "argument --cores: 3 is not allowed; expected a power of two from 1 to 128"),
    (["--shape", "1,16,16,16,1", "--cores", "1,2", "--budget", "16GiB"],
     "argument --cores: several core counts (or --price) need XLA's TPU compiler's step "
     "times"),
    (["--shape", "1,16,16,16,1", "--budget", "v5e", "--price", "-1"],
     "argument --price: -1 is not allowed; expected a positive price per chip-hour"),
])
def test_bad_options_exit_2_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(["plan"] + argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_unparsable_budget(capsys):
    with pytest.raises(SystemExit) as e:  # at parsing, before TensorFlow loads
        main(["plan", "--shape", "1,8,8,8,1", "--cores", "2", "--depth", "1",
              "--budget", "lots"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m spatial_tf plan: error: argument --budget: 'lots' is not "
                          "allowed; expected a TPU generation or slice (v2, v3, ")


@pytest.mark.slow
def test_a_small_plan_with_max_size_and_plot(tmp_path):
    png = tmp_path / "plan.png"
    out = subprocess.run(
        [sys.executable, "-m", "spatial_tf", "plan", "--shape", "1,16,16,16,1", "--cores", "2",
         "--depth", "2", "--filters", "2", "--classes", "2", "--budget", "256MiB",
         "--memory", "cpu", "--fit-sizes", "8,16", "--max-size", "--plot", str(png),
         "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    assert "unet3d: depth 2, 2-4 filters, batch norm, 2 classes, Adam train step" in text
    assert "train_step: 1x16x16x16x1 on 2 cores, per core, budget 256.0 MiB per core" in text
    assert "Recommended [1,2,1,1,1]: fits 256MiB (" in text
    assert "Ranked on CPU peak bytes." in text
    assert "Figures marked 'fit' are predicted from compiles at 8^3, 16^3" in text
    assert "largest cube within 256.0 MiB per core on 2 cores: " in text
    edge = int(text.split("on 2 cores: ")[1].split("^3")[0])
    assert edge >= 16 and edge % 2 == 0
    assert png.stat().st_size > 10_000


@pytest.mark.slow
def test_a_tpu_generations_budget_says_its_reserve(capsys, cli):
    # in this process (the test above runs a plan as a process of its own)
    status = cli(["plan", "--shape", "1,16,16,16,1", "--cores", "2", "--depth", "1",
                  "--filters", "2", "--classes", "2", "--budget", "v3", "--memory", "cpu",
                  "--no-progress"])
    out, err = capsys.readouterr()
    assert status == 0, err[-2000:]
    lines = out.splitlines()
    assert ("train_step: 1x16x16x16x1 on 2 cores, per core, budget v3: 16.0 GiB per core "
            "(one TensorCore), 14.4 GiB usable after a 10% reserve") in lines
    recommended = next(line for line in lines if line.startswith("Recommended"))
    assert re.match(r"Recommended \[1,2,1,1,1\]: fits v3 \([\d.]+ [KM]iB XLA:CPU peak per core, "
                    r"within 14\.4 GiB usable after a 10% reserve\); ", recommended), recommended


def _plan_on_tpu(arguments, cache):
    # 4^3 (2 voxels per core on the split axis): the TPU compile time grows with the volume
    # per core (16^3 took 20 to 50 s a compile here, 4^3 2 to 4 s), and what the test
    # checks (the compiler decides, the columns, the fewest cores, the scaling rows) does
    # not depend on it
    out = subprocess.run(
        [sys.executable, "-m", "spatial_tf", "plan", "--shape", "1,4,4,4,1", "--depth", "1",
         "--filters", "2", "--classes", "2", "--budget", "v5e", "--no-progress", *arguments],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "SPATIAL_TF_COMPILE_CACHE": str(cache)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out


# one test for the two commands: the second reads the first's compiles from the cache
@pytest.mark.slow
@pytest.mark.skipif(__import__("spatial_tf.emulator.tpu.tpu_compile", fromlist=["x"])
                    .libtpu_version() is None,
                    reason="needs libtpu (XLA's TPU compiler): pip install "
                           "'spatial-tf[tpu-compile]'")
def test_a_tpu_budget_is_decided_by_the_tpu_compiler_and_core_counts_get_a_cost(tmp_path):
    out = _plan_on_tpu(["--cores", "2", "--fewest-cores"], tmp_path)
    text = out.stdout
    header = next(line for line in text.splitlines() if line.startswith("rank"))
    assert header.split()[:6] == ["rank", "spec", "fits", "peak", "CPU", "peak"]
    assert header.split()[6:9] == ["TPU", "step", "est."]  # the compiler's, not estimated
    assert "TPU est." not in header
    assert "Fits and peak TPU: the TPU compiler for v5e (XLA:TPU, libtpu " in text
    assert "Recommended [1,2,1,1,1]: fits v5e (the TPU compiler accepted it; peak " in text
    assert "fewest cores for [1, 4, 4, 4, 1]: the TPU compiler for v5e" in text
    assert "Answer: 1 (1 compile, " in text
    assert "compiling for TPU v5e (2 cores) with XLA's TPU compiler" in out.stderr

    # several core counts: each one's fastest spec, its step time and its cost
    out = _plan_on_tpu(["--cores", "2,1", "--price", "1.2", "--plot",
                        str(tmp_path / "scaling.png")], tmp_path)
    lines = out.stdout.splitlines()
    header = next(line for line in lines if line.startswith("cores"))
    assert header.split()[:5] == ["cores", "spec", "fits", "step", "est."]
    assert "cost / 1k examples" in header
    rows = [line.split() for line in lines if re.match(r"^\s+[12]\s+\[", line)]
    assert [r[0] for r in rows] == ["1", "2"] and all(r[2] == "yes" for r in rows)
    assert "Cost at 1.2 per chip-hour" in out.stdout
    assert (tmp_path / "scaling.png").stat().st_size > 10_000


@pytest.mark.skipif(__import__("spatial_tf.emulator.tpu.tpu_compile", fromlist=["x"])
                    .libtpu_version() is None,
                    reason="needs libtpu (XLA's TPU compiler): pip install "
                           "'spatial-tf[tpu-compile]'")
def test_a_time_limit_before_any_compile_ends_says_so_and_exits_1(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "spatial_tf", "plan", "--shape", "1,64,64,64,1", "--cores", "1",
         "--budget", "v5e", "--timeout", "1", "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "SPATIAL_TF_COMPILE_CACHE": str(tmp_path)},
    )
    assert out.returncode == 1, out.stderr[-2000:]
    assert ("plan: the time limit of 1 s ended before any candidate of train_step on 1 "
            "core compiled. Fix: a larger timeout") in out.stderr
    assert not list(tmp_path.glob("*.json"))  # a stopped compile leaves no cache entry
