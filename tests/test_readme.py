"""README.md says what is true of the repository: its test count is what pytest collects,
and its test command is the one CI runs."""
import configparser
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _bash_blocks(text):
    return re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S)


# options of the README's command (`python -m pytest -q`) that leave the collection as it is
_SAME_COLLECTION = {"-q", "-qq", "-v", "-vv", "-x", "-s", "-rs", "-ra"}


def _same_collection(args):
    """Whether ``args`` are options of ``_SAME_COLLECTION``, ``--durations=N`` or
    ``-p no:cacheprovider`` only (the timed form of the README's command).

    >>> _same_collection(["-q", "--durations=40", "-p", "no:cacheprovider"])
    True
    >>> _same_collection(["-q", "-k", "spec"]), _same_collection(["-p", "no:xdist"])
    (False, False)
    """
    args = list(args)
    while "-p" in args:
        at = args.index("-p")
        if args[at + 1:at + 2] != ["no:cacheprovider"]:
            return False
        del args[at:at + 2]
    return all(a in _SAME_COLLECTION or re.fullmatch(r"--durations=\d+", a) for a in args)


def _collected_by_this_run(request):
    """The number of tests this run selected, when it is the README's test command (no
    paths, no -k, setup.cfg's -m: only options of ``_same_collection``, and no
    PYTEST_ADDOPTS): the collection of the whole suite, already made (each xdist worker
    collects it all). None for another command, a file or a -k expression, say."""
    config = request.config
    if (config.args_source != pytest.Config.ArgsSource.TESTPATHS
            or not _same_collection(config.invocation_params.args)
            or os.environ.get("PYTEST_ADDOPTS")):
        return None
    return len(request.session.items)


@pytest.mark.slow
def test_the_stated_test_count_is_within_a_fifth_of_what_pytest_collects(request):
    stated = int(re.search(r"([\d,]+) tests in \d+ min", README).group(1).replace(",", ""))
    collected = _collected_by_this_run(request)
    if collected is None:
        # one collection of the whole suite, in this process's environment (16 s measured)
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0",
             "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=300)
        # "N tests collected", or "N/M tests collected (K deselected)": the extended ones
        found = re.search(r"^(\d+)(?:/\d+)? tests? collected", result.stdout, re.M)
        assert found, result.stdout[-2000:] + result.stderr[-2000:]
        collected = int(found.group(1))
    assert abs(collected - stated) <= 0.2 * collected, (
        f"README.md says {stated:,} tests; pytest collects {collected:,}. Update README.md "
        f"(and docs/install.md) with the count and time of a full run.")


def test_the_readme_test_command_is_the_one_ci_runs():
    demo, tests = _bash_blocks(README)
    venv = "python3 -m venv .venv && . .venv/bin/activate && "
    assert demo.startswith(venv) and tests.startswith(venv)
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests[len(venv):].strip() in ci   # CI runs exactly the README's test command
    assert tests.strip().endswith("python -m pytest -q")
    assert demo.strip().endswith("python -m spatial_tf demo")


def test_the_readme_commands_install_extras_that_exist():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    extras = set(config["options.extras_require"])
    for block in _bash_blocks(README):
        for group in re.findall(r'pip install -e "\.\[([^\]]*)\]"', block):
            assert set(group.split(",")) <= extras, (group, sorted(extras))
