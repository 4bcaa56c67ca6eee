import os
import subprocess
import sys

import pytest

from spatial_tf.__main__ import main

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_describe_a_pod_slice(capsys):
    assert main(["describe", "--slice", "v3-32", "--cores", "8",
                 "--global-batch", "64"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "Slice v3-32: 4x4x1 chips x 2 cores per chip = 32 cores, mesh_shape "
        "[4, 4, 1, 2]; 4 hosts x 8 cores\n"
        "computation_shape: [2, 2, 1, 2] (8 cores per replica)\n"
        "  why: most compact block: 8 cores as a 2x2x1 block of chips"
    )
    assert "replicas: 4 (all that fit)" in out
    assert "4 replicas x 8 logical cores on v3-32" in out
    table = out.split("TPU ordinal\n")[1].split("\n\n")[0].splitlines()[1:]
    assert len(table) == 32
    assert "  - global batch must be a multiple of 4 (num_replicas_in_sync)." in out
    assert "  - global batch 64: 16 per replica, 16 per host." in out


def test_describe_with_a_computation_shape_and_fewer_replicas(capsys):
    assert main(["describe", "--slice", "v4-32", "--computation-shape", "2,2,2,1",
                 "--replicas", "1"]) == 0
    out = capsys.readouterr().out
    assert "computation_shape: [2, 2, 2, 1] (8 cores per replica)" in out
    assert "  why: requested: 8 cores as a 2x2x2 block of chips with one device per chip" in out
    assert "replicas: 1 of 2 that fit" in out
    assert "3 of 4 hosts run no input pipeline" in out


def test_list_slices(capsys):
    assert main(["describe", "--list-slices"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:6] == ["slice", "generation", "chips", "cores/chip", "cores", "hosts"]
    rows = {line.split()[0]: line.split() for line in out[2:]}
    assert rows["v3-32"][1:7] == ["v3", "4x4x1", "2", "32", "4", "1"]
    assert rows["v6e-16"][1:6] == ["v6e", "4x4x1", "1", "16", "4"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--slice", "v3-8", "--cores", "16"],
         "python -m spatial_tf describe: error: v3-8 has 8 cores; num_cores_per_replica=16 "
         "does not fit. Valid values for v3-8: 1, 2, 4, 8. Fix: pass one of these, or use a "
         "larger slice.\n"),
        (["--slice", "v9-8", "--cores", "1"],
         "python -m spatial_tf describe: error: synthetic: unknown slice 'v9-8'"),
        (["--cores", "8"],
         "python -m spatial_tf describe: error: describe needs --slice NAME; expected a slice "
         "such as v3-8 or v5e-16 (see --list-slices). Fix: e.g. --slice v3-8 --cores 8\n"),
    ],
)
def test_bad_requests_exit_2_with_the_message(capsys, argv, message):
    assert main(["describe"] + argv) == 2
    assert capsys.readouterr().err.startswith(message)


def test_both_sizes_are_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as e:
        main(["describe", "--slice", "v3-8", "--cores", "8",
              "--computation-shape", "2,2,1,2"])
    assert e.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_bad_shape_text(capsys):
    with pytest.raises(SystemExit):
        main(["describe", "--slice", "v3-8", "--computation-shape", "2x2x1x2"])
    err = capsys.readouterr().err
    assert err == (
        "python -m spatial_tf describe: error: argument --computation-shape: expected 4 "
        "comma-separated positive ints such as 2,2,1,2; got '2x2x1x2' (see python -m "
        "spatial_tf describe --help)\n"
    )


def test_the_module_entry_point_runs_without_a_tpu():
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, "-m", "spatial_tf", "describe", "--slice", "v3-32",
         "--cores", "8"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "computation_shape: [2, 2, 1, 2] (8 cores per replica)" in result.stdout


def test_a_usage_error_is_said_before_tensorflow_loads():
    """describe with no arguments answers in a fraction of a second, not after TensorFlow's
    few seconds and 700 MB of start-up."""
    import subprocess
    import sys

    script = ("import sys\nfrom spatial_tf.__main__ import main\nrc = main(['describe'])\n"
              "print(rc, 'tensorflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["2", "False"], done.stderr
    assert "describe needs --slice NAME; expected a slice such as v3-8" in done.stderr
