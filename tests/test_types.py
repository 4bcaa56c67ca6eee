"""The package type-checks: every annotated signature and the code that uses it agree."""
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_mypy_finds_no_type_errors_in_the_package():
    api = pytest.importorskip("mypy.api", reason="mypy is in the test extra: pip install "
                              "-e '.[test]'")
    stdout, stderr, status = api.run(["--config-file", str(ROOT / "setup.cfg"),
                                      str(ROOT / "spatial_tf")])
    errors = [line for line in stdout.splitlines() if ": error:" in line]
    assert status == 0 and not errors, "\n".join(errors) or stdout + stderr


def test_mypy_would_see_a_wrong_annotation(tmp_path):
    # the check is live: the same configuration reports a return that breaks its hint
    api = pytest.importorskip("mypy.api")
    bad = tmp_path / "bad.py"
    bad.write_text("def size() -> int:\n    return 'sixty-four'\n")
    stdout, _, status = api.run(["--config-file", str(ROOT / "setup.cfg"), str(bad)])
    assert status == 1 and "Incompatible return value type" in stdout
