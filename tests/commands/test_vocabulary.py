"""One command-line vocabulary: each command's --help is short plain text pointing to
docs/cli.md, the same thing has one option name and one default in every command, a
renamed option still works for a release, and usage errors come before TensorFlow loads.
"""
import argparse
import json
import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest

from spatial_tf.__main__ import build_parser, main
from spatial_tf.commands import COMMANDS

REPO = pathlib.Path(__file__).resolve().parents[2]
CLI_DOC = (REPO / "docs" / "cli.md").read_text()
MAX_LINES = 40

# options two commands share whose defaults differ, and why (each is checked to differ)
DIFFERENT_ON_PURPOSE = {
    "--size": "demo's synthetic cubes are sized to run in seconds, train's to train",
    "--steps": "demo trains for seconds, train for a run",
    "--batch": "train's None is one example per batch piece and replica (its --spec's)",
    "--replicas": "describe's None is all that fit the slice; train's replicas are 1",
}


def subcommands():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, sub.choices


def visible_options(parser):
    """``{option string: action}`` of what ``--help`` shows (renamed options hidden)."""
    return {s: a for a in parser._actions if a.help != argparse.SUPPRESS
            for s in a.option_strings if s not in ("-h", "--help")}


def section(name):
    """docs/cli.md's section of command ``name``."""
    return CLI_DOC.split(f"\n## {name}\n")[1].split("\n## ")[0]


@pytest.mark.parametrize("name", ("",) + COMMANDS)
def test_each_help_is_short_plain_text_pointing_to_docs(name, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    parser, commands = subcommands()
    text = (commands[name] if name else parser).format_help()
    lines = text.splitlines()
    assert len(lines) <= MAX_LINES, text
    assert max(len(line) for line in lines) <= 80, text
    assert "``" not in text and not re.search(r":(func|class|mod):`|^\s*\.\. \w", text, re.M)
    if name:
        assert text.endswith(f"Details and examples: docs/cli.md#{name} in the spatial_tf "
                             f"repository.\n")
        assert f"\n## {name}\n" in CLI_DOC
        # one line per option: the help goes on a line of its own only after an option
        # too long for the first column, and never wraps
        options = text.split("\noptions:\n")[1].split("\n\n")[0].splitlines()
        wrapped = [line for line in options if line.startswith(" " * 26)]
        long_options = [line for line in options if line.startswith("  -") and
                        len(line.split("  ")[1]) > 22]
        assert len(wrapped) == len(long_options), text
    else:
        assert "docs/cli.md" in " ".join(lines)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_is_explained_in_docs_cli(name):
    _, commands = subcommands()
    shared = section("One vocabulary")
    for option in visible_options(commands[name]):
        assert f"`{option}" in section(name) or f"`{option}" in shared, (name, option)


def test_the_same_option_has_the_same_default_everywhere():
    _, commands = subcommands()
    defaults = {}
    for name, parser in commands.items():
        for option, action in visible_options(parser).items():
            defaults.setdefault(option, {})[name] = action.default
    shared = {o: d for o, d in defaults.items() if len(d) > 1 and o != "--cores"}
    assert {"--device", "--modality", "--nonfinite", "--budget", "--classes", "--depth",
            "--filters", "--preset", "--data", "--model-dir"} <= set(shared)
    for option, by_command in shared.items():
        values = [json.dumps(v) for v in by_command.values()]
        if option in DIFFERENT_ON_PURPOSE:
            assert len(set(values)) > 1, f"{option} agrees now: drop it from the exceptions"
        else:
            assert len(set(values)) == 1, (option, by_command)
    # cores per replica is --cores wherever it is asked for, under no other name
    for name in ("demo", "describe", "train", "evaluate", "predict", "plan"):
        options = visible_options(commands[name])
        assert "--cores" in options, name
        others = [o for o, a in options.items() if o != "--cores" and
                  (a.help or "").startswith("cores per replica")]
        assert others == [], (name, others)


def resolved_cores(argv):
    """``--cores`` after parsing and the command's checks (which read model.json)."""
    args = build_parser().parse_args(argv)
    if getattr(args, "check", None):
        assert not args.check(args), argv
    return args.cores


def record(model_dir, **extra):
    from spatial_tf.commands import volumes

    volumes.write_record(str(model_dir), {"model": "unet3d", "shape": [16, 16, 16],
                                          "classes": 3, "depth": 2, "filters": 4, **extra})
    return str(model_dir)


def test_cores_default_to_8_or_to_the_cores_the_model_was_trained_on(tmp_path):
    assert resolved_cores(["demo"]) == 8
    assert resolved_cores(["plan", "--shape", "1,16,16,16,1"]) == [8]
    assert resolved_cores(["train", "unet3d", "--model-dir", str(tmp_path / "new")]) == 8
    trained = record(tmp_path / "trained", cores=4)
    for command in (["train", "unet3d"], ["evaluate"], ["predict"]):
        assert resolved_cores(command + ["--model-dir", trained]) == 4, command
        assert resolved_cores(command + ["--model-dir", trained, "--cores", "2"]) == 2
    # a model dir from before the cores were recorded: as the commands did then
    old = record(tmp_path / "old")
    assert resolved_cores(["train", "unet3d", "--model-dir", old]) == 8
    assert resolved_cores(["evaluate", "--model-dir", old]) == 1
    assert resolved_cores(["predict", "--model-dir", old]) == 1


def test_describes_cores_default_to_8(capsys):
    assert main(["describe", "--slice", "v3-8"]) == 0
    assert "computation_shape: [2, 2, 1, 2] (8 cores per replica)" in capsys.readouterr().out


def test_a_resumed_run_on_other_cores_is_the_same_model_and_keeps_the_record(tmp_path):
    from spatial_tf.commands import train

    model_dir = record(tmp_path / "m", cores=4, dtype_policy="float32", preset=None,
                       conv="halo", masked_bn=True, modality="ct", bn_momentum=0.9,
                       spacing=None)

    def resumed(*argv):
        args = build_parser().parse_args(["train", "unet3d", "--model-dir", model_dir,
                                          "--depth", "2", "--filters", "4", *argv])
        args.check(args)
        args.dtype_policy = "float32"
        existing = train._existing_record(args)
        train._check_same_model(args, (16, 16, 16), existing)
        return train._record(args, (16, 16, 16), existing)

    assert resumed("--cores", "2")["cores"] == 4  # the first run's, for evaluate and predict
    with pytest.raises(ValueError, match=r"holds another model \(classes 3 \(asked 5\)\)"):
        resumed("--cores", "2", "--classes", "5")


def test_a_detectors_record_keeps_its_first_cores_and_is_resumed_on_others(tmp_path):
    from spatial_tf.commands import detection, volumes

    rec = {"model": "retinanet", "image_size": 64, "classes": 3, "max_boxes": 32,
           "class_names": ["a", "b", "c"]}
    volumes.write_record(str(tmp_path), {**rec, "cores": 4})
    assert detection._check_record("train", str(tmp_path), {**rec, "cores": 2})["cores"] == 4
    with pytest.raises(ValueError, match=r"another model \(image_size 64 \(asked 128\)\);"):
        detection._check_record("train", str(tmp_path), {**rec, "image_size": 128, "cores": 2})


def test_a_renamed_option_still_works_for_a_release_without_being_shown(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    parser, commands = subcommands()
    args = parser.parse_args(["describe", "--slice", "v3-8", "--cores-per-replica", "4"])
    assert args.cores == 4
    assert capsys.readouterr().err == (
        "python -m spatial_tf describe: --cores-per-replica is now called --cores; the old "
        "name still works in this release only\n")
    assert "cores-per-replica" not in commands["describe"].format_help()
    with pytest.raises(SystemExit):  # still one of --cores or --computation-shape
        parser.parse_args(["describe", "--slice", "v3-8", "--cores-per-replica", "4",
                           "--computation-shape", "2,2,1,2"])
    assert "not allowed with argument --cores-per-replica" in capsys.readouterr().err


def test_plan_takes_trains_presets():
    from spatial_tf.commands.plan import _model_line

    _, commands = subcommands()
    choices = {n: visible_options(commands[n])["--preset"].choices for n in ("plan", "train")}
    assert choices["plan"] == choices["train"] == ["model_garden"]
    args = build_parser().parse_args(["plan", "--shape", "1,64,64,64,1", "--preset",
                                      "model_garden"])
    args.check(args)
    assert (args.depth, args.filters) == (4, 32)
    assert _model_line(args).startswith("unet3d (model_garden preset): depth 4, 32-256 filters")
    args = build_parser().parse_args(["plan", "--shape", "1,64,64,64,1", "--depth", "2"])
    args.check(args)
    assert (args.depth, args.filters) == (2, 8)


# each refused at parsing or by the command's checks: exit 2, one line, no TensorFlow
BAD = [
    (["plan", "--shape", "1,8,8,8,1", "--budget", "v9"],
     "argument --budget: 'v9' is not allowed; expected a TPU generation or slice (v2, v3, "),
    (["plan", "--shape", "1,8,8,8,1", "--budget", "0"], "argument --budget: '0' is not allowed"),
    (["plan", "--shape", "1,8,8,8,1", "--budget", "16XB"],
     "argument --budget: '16XB' is not allowed; expected a size unit among"),
    (["plan", "--shape", "1,8,8,8,1", "--preset", "nope"], "argument --preset: invalid choice"),
    (["predict", "--model-dir", "MODEL", "--tile", "auto", "--budget", "v9"],
     "argument --budget: 'v9' is not allowed"),
    (["evaluate", "--model-dir", "NOWHERE"], "holds no trained model (no model.json"),
    (["predict", "--model-dir", "NOWHERE"], "holds no trained model (no model.json"),
    (["describe"], "describe needs --slice NAME"),
    (["describe", "--slice", "v3-8", "--cores", "3"], "argument --cores: 3 is not allowed"),
    (["train", "unet3d", "--model-dir", "NEW", "--size", "63"], "argument --size: 63 is not"),
    (["demo", "--size", "63"], "argument --size: 63 is not allowed with --cores 8"),
]

SCRIPT = """
import contextlib, io, json, sys
from spatial_tf.__main__ import main
results = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as e:
            status = e.code
    results.append([status, err.getvalue()])
heavy = sorted({m.split('.')[0] for m in sys.modules} & {'tensorflow', 'jax', 'keras'})
print(json.dumps([results, heavy]))
"""


def test_usage_errors_come_before_tensorflow_loads(tmp_path):
    model = record(tmp_path / "model", cores=2)
    names = {"MODEL": model, "NOWHERE": str(tmp_path / "nowhere"), "NEW": str(tmp_path / "new")}
    argvs = [[names.get(a, a) for a in argv] for argv, _ in BAD]
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(argvs)], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    results, heavy = json.loads(done.stdout)
    for (argv, says), (status, err) in zip(BAD, results):
        assert status == 2 and says in err and err.count("\n") == 1, (argv, err)
    assert heavy == []


def test_plan_and_predict_take_the_same_budgets():
    from spatial_tf.commands.options import budget

    _, commands = subcommands()
    for name in ("plan", "predict"):
        assert visible_options(commands[name])["--budget"].type is budget
    assert [budget(b) for b in ("v3", "v5e-8", "V5E", "16GiB", "512 MiB", "1000")] == [
        "v3", "v5e-8", "V5E", "16GiB", "512 MiB", "1000"]


def test_a_stopping_signal_is_named():
    from spatial_tf.commands.shared import signal_name

    assert signal_name(signal.SIGTERM) == "SIGTERM"
    assert signal_name(signal.SIGINT) == "Ctrl-C (SIGINT)"
    assert signal_name(12345) == "signal 12345"
