"""The conftests' guards: without jax the emulator's tests and doctests skip, saying why
(the rest still runs); a parametrized test that collects zero cases fails the run."""
import os
import subprocess
import sys

import textwrap

import pytest

pytest_plugins = ["pytester"]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_without_jax_emulator_tests_skip_with_the_reason(tmp_path):
    # hide jax from a fresh interpreter, as on Python 3.10 where it cannot be installed
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nsys.modules['jax'] = None\nsys.modules['jaxlib'] = None\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path), TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "-n", "0",
         "tests/emulator/xla/test_executable.py", "spatial_tf/emulator/xla/executable.py",
         "tests/test_summarize.py"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "6 passed, 13 skipped" in out, out
    assert ("SKIPPED [3] spatial_tf/emulator/xla/executable.py: needs jax and jaxlib (the CPU "
            "emulator), which are not installed here. Fix: pip install "
            "'spatial-tf[emulator]'") in out


def _with_the_suite_guard(pytester):
    """A pytester project whose conftest takes the hook from tests/conftest.py itself."""
    path = os.path.join(REPO, "tests", "conftest.py")
    pytester.makeconftest(textwrap.dedent(f"""
        import importlib.util
        _spec = importlib.util.spec_from_file_location("suite_conftest", {path!r})
        _module = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_module)
        pytest_collection_modifyitems = _module.pytest_collection_modifyitems
    """))


def test_a_parametrized_test_with_zero_cases_fails_the_run(pytester):
    _with_the_suite_guard(pytester)
    pytester.makepyfile(test_user=textwrap.dedent("""
        import pytest

        CASES = [n for n in range(4) if n > 10]  # a table filtered down to nothing

        @pytest.mark.parametrize("n", CASES)
        def test_each(n):
            assert n > 10

        def test_other():
            pass
    """))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*parametrized test(s) with zero cases: test_user.py::test_each[[]NOTSET[]]. A test whose "
        "case list is empty checks nothing. Fix: give it at least one case.*"
    ])


def test_parametrized_tests_with_cases_run_as_usual(pytester):
    _with_the_suite_guard(pytester)
    pytester.makepyfile(test_user=textwrap.dedent("""
        import pytest

        @pytest.mark.parametrize("n", [1, 2])
        def test_each(n):
            assert n > 0

        @pytest.mark.skip(reason="not on this machine")
        def test_skipped():
            pass
    """))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, skipped=1)


def test_notebooks_run_first_then_slow_tests_and_everything_else_keeps_its_order():
    from tests.conftest import longest_first

    class Item:
        def __init__(self, nodeid):
            self.nodeid = nodeid

        def get_closest_marker(self, name):
            return name if name == "slow" and "slow" in self.nodeid else None

    ids = ["tests/a.py::t1", "docs/guide.md::[CodeFence#1]", "notebooks/x.ipynb::x.ipynb",
           "tests/b.py::t2[case.ipynb]", "tests/c.py::slow_one", "notebooks/a.ipynb::a.ipynb",
           "README.md::[CodeFence#1]", "tests/d.py::slow_two"]
    assert [i.nodeid for i in longest_first([Item(n) for n in ids])] == [
        "notebooks/x.ipynb::x.ipynb", "notebooks/a.ipynb::a.ipynb", "tests/c.py::slow_one",
        "tests/d.py::slow_two", "tests/a.py::t1", "docs/guide.md::[CodeFence#1]",
        "tests/b.py::t2[case.ipynb]", "README.md::[CodeFence#1]"]


def _root_conftest():
    """The repository's root conftest.py as a module of its own (the suite's folder is
    already set, so loading it creates and removes nothing)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("root_conftest",
                                                  os.path.join(REPO, "conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_run_removes_the_compile_folders_of_runs_that_were_killed(tmp_path):
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    dead_pid = int(ended.stdout)
    names = {"dead": f"spatial_tf_test_compiles_{dead_pid}_ab12",
             "alive": f"spatial_tf_test_compiles_{os.getpid()}_cd34",
             "old_unnamed": "spatial_tf_test_compiles_x9k2",
             "new_unnamed": "spatial_tf_test_compiles_q7w1",
             "other": "someone_elses_folder"}
    for name in names.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / "entry.json").write_text("{}")
    two_days_ago = os.path.getmtime(tmp_path) - 2 * 24 * 3600
    os.utime(tmp_path / names["old_unnamed"], (two_days_ago, two_days_ago))

    _root_conftest()._remove_abandoned_caches(tmp_path)

    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [names["alive"], names["new_unnamed"], names["other"]])
