"""README.md says what is true of the repository: its test count is what pytest collects,
and its test command is the one CI runs."""
import configparser
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _bash_blocks(text):
    return re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S)


@pytest.mark.slow
def test_the_stated_test_count_is_within_a_fifth_of_what_pytest_collects():
    stated = int(re.search(r"([\d,]+) tests in \d+ min", README).group(1).replace(",", ""))
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
