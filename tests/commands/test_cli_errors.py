"""Bad command lines stop at parsing: one line on stderr, exit status 2, no traceback.

Run as a user runs them, in a subprocess, so the exit status and the exact stderr are
what a terminal shows.
"""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POWERS = "expected a power of two from 1 to 128 (1, 2, 4, 8, 16, 32, 64, 128)"


def cli(*argv, timeout=120, **env):
    return subprocess.run(
        [sys.executable, "-m", "spatial_tf", *argv],
        env=dict(os.environ, PYTHONPATH=REPO, **env), capture_output=True, text=True,
        timeout=timeout, cwd=REPO,
    )


@pytest.mark.parametrize(
    "argv, problem",
    [
        (["--cores", "-4"], f"argument --cores: -4 is not allowed; {POWERS}"),
        (["--cores", "3"], f"argument --cores: 3 is not allowed; {POWERS}"),
        (["--cores", "256"], f"argument --cores: 256 is not allowed; {POWERS}"),
        (["--cores", "four"], "argument --cores: 'four' is not an integer"),
        (["--size", "63"], "argument --size: 63 is not allowed with --cores 8, which splits "
                           "the volume 2x2x2 ways before a 2x pooling; expected a multiple of 4, "
                           "at least 8, e.g. --size 60"),
        (["--cores", "2", "--size", "66"],
         "argument --size: 66 is not allowed with --cores 2, which splits the volume 2x1x1 ways "
         "before a 2x pooling; expected a multiple of 4, at least 8, e.g. --size 64"),
        (["--cores", "1", "--size", "4"],
         "argument --size: 4 is not allowed with --cores 1, which splits the volume 1x1x1 ways "
         "before a 2x pooling; expected a multiple of 2, at least 8, e.g. --size 8"),
        (["--size", "0"], "argument --size: 0 is not allowed; expected an integer from 1 to 256"),
        (["--size", "4096"],
         "argument --size: 4096 is not allowed; expected an integer from 1 to 256"),
        (["--steps", "0"], "argument --steps: 0 is not allowed; expected an integer from 1 "
                           "to 10000"),
        (["--steps", "-3"], "argument --steps: -3 is not allowed; expected an integer from 1 "
                            "to 10000"),
        (["--batch", "-1"], "argument --batch: -1 is not allowed; expected an integer from 1 "
                            "to 64"),
    ],
)
def test_demo_refuses_bad_values_in_one_line(argv, problem):
    result = cli("demo", *argv)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"python -m spatial_tf demo: error: {problem} (see python -m spatial_tf demo --help)\n"
    )


@pytest.mark.parametrize(
    "argv, problem",
    [
        (["--slice", "v3-8", "--cores", "-4"],
         f"argument --cores: -4 is not allowed; {POWERS} "
         f"(see python -m spatial_tf describe --help)"),
        (["--slice", "v3-8", "--cores", "16"],
         "v3-8 has 8 cores; num_cores_per_replica=16 does not fit. Valid values for v3-8: "
         "1, 2, 4, 8. Fix: pass one of these, or use a larger slice."),
        (["--slice", "v3-32", "--cores", "8", "--replicas", "0"],
         "argument --replicas: 0 is not allowed; expected an integer >= 1 "
         "(see python -m spatial_tf describe --help)"),
        (["--slice", "v3-32", "--cores", "8", "--global-batch", "-8"],
         "argument --global-batch: -8 is not allowed; expected an integer >= 1 "
         "(see python -m spatial_tf describe --help)"),
        (["--slice", "v3-8", "--computation-shape", "2,2,0,2"],
         "argument --computation-shape: expected 4 comma-separated positive ints such as "
         "2,2,1,2; got '2,2,0,2' (see python -m spatial_tf describe --help)"),
    ],
)
def test_describe_refuses_bad_values_in_one_line(argv, problem):
    result = cli("describe", *argv)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == f"python -m spatial_tf describe: error: {problem}\n"


def test_help_lists_exactly_the_commands_that_exist():
    from spatial_tf.commands import COMMANDS

    result = cli("--help")
    assert result.returncode == 0
    listed = [line.split()[0] for line in result.stdout.split("positional arguments:")[1]
              .split("options:")[0].splitlines()[2:] if line.startswith("    ") and
              not line.startswith("      ")]
    assert listed == ["demo", "describe", "train", "evaluate", "predict", "plan",
                      "cache"] == list(COMMANDS)
    assert "fit" not in listed
    assert "Commands: demo, describe, train, evaluate, predict, plan, cache." in " ".join(
        result.stdout.split())


def test_unknown_option_exits_2():
    result = cli("demo", "--bogus")
    assert result.returncode == 2
    assert result.stderr == (
        "python -m spatial_tf: error: unrecognized arguments: --bogus "
        "(see python -m spatial_tf --help)\n"
    )


def test_unknown_command_exits_2():
    result = cli("fit")
    assert result.returncode == 2
    assert "argument COMMAND: invalid choice: 'fit'" in result.stderr
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("name, canonical", [("v5e-8", "v5litepod-8"), ("V5E-4", "v5litepod-4")])
def test_slice_names_as_cloud_tpu_docs_write_them(name, canonical):
    result = cli("describe", "--slice", name, "--cores", "4")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Slice {canonical}: ")
