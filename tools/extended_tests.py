"""Benchmark: the suite's extended cases, which the README's test command leaves out.

Tests marked ``extended`` (setup.cfg) are more cases of what the suite already checks,
each slow: U-Net train steps on more specs (``tests/emulator/test_nets.py``), the
emulator's hosts against four-process ``MultiWorkerMirroredStrategy`` clusters
(``tests/emulator/test_multi_worker_oracle.py``) and ``predict --tile auto`` asking the TPU
compiler (``tests/commands/test_any_size.py``). The suite deselects them to keep its time
down on 2 cores (docs/development.md); this runs them with pytest (its workers, ``-n auto``) and prints
each one's outcome and seconds. It exits with pytest's status: non-zero on any failure.

    python tools/extended_tests.py
    python tools/extended_tests.py tests/emulator/test_nets.py   # some files only
"""
import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help="test files or folders (default: all)")
    args = parser.parse_args(argv)
    from spatial_tf.table import format_table

    with tempfile.TemporaryDirectory() as folder:
        report = os.path.join(folder, "extended.xml")
        status = subprocess.call(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "extended",
             f"--junitxml={report}", *(args.paths or ["tests"])], cwd=ROOT)
        cases = ElementTree.parse(report).getroot().iter("testcase") \
            if os.path.exists(report) else []
        rows = [[f"{case.get('classname').replace('.', '/')}.py::{case.get('name')}",
                 _outcome(case), f"{float(case.get('time', 0)):.1f}"]
                for case in cases if case.get("classname")]   # not a module skipped whole
    print(format_table(["extended test", "outcome", "s"], rows,
                       title="pytest -m extended", right=("s",)))
    return status


def _outcome(case):
    """passed, failed, error or skipped: what junit XML says of one test case."""
    for tag, outcome in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        if case.find(tag) is not None:
            return outcome
    return "passed"


if __name__ == "__main__":
    sys.exit(main())
