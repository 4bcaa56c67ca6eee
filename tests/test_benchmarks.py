"""Every script in benchmarks/ loads by its path alone, from another directory, as
tests/integration loads model_garden_retinanet.py: a script whose imports only work when
it is run from its own folder fails here, in the main suite, not in the integration job."""
import os
import pathlib
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parent.parent

# loads each *.py of a folder by path in one process; prints "name: error" per failure
_LOADER = textwrap.dedent("""
    import importlib.util, pathlib, sys
    folder = pathlib.Path(sys.argv[1]).resolve()
    for path in sorted(folder.glob("*.py")):
        spec = importlib.util.spec_from_file_location("loaded_" + path.stem, path)
        path_before = list(sys.path)
        try:
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        except BaseException as error:
            print(f"{path.name}: {error!r}")
        # each script starts clean: no folder another put on sys.path, none of its modules
        sys.path[:] = path_before
        for name, module in list(sys.modules.items()):
            if folder in pathlib.Path(getattr(module, "__file__", None) or "/").parents:
                del sys.modules[name]
""")


_WITHOUT_PYTHONPATH = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def load_failures(folder, cwd):
    """``name: error`` of each script of ``folder`` that fails to load by path."""
    run = subprocess.run([sys.executable, "-c", _LOADER, str(folder)], cwd=cwd,
                         capture_output=True, text=True, timeout=300,
                         env=_WITHOUT_PYTHONPATH)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.splitlines()


def test_the_check_sees_a_sibling_import_that_needs_the_scripts_folder(tmp_path):
    (tmp_path / "_helper.py").write_text("VALUE = 1\n")
    (tmp_path / "needs_cwd.py").write_text("from _helper import VALUE\n")
    (tmp_path / "fixed.py").write_text(
        "import os, sys\nsys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\n"
        "from _helper import VALUE\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert load_failures(tmp_path, elsewhere) == [
        "needs_cwd.py: ModuleNotFoundError(\"No module named '_helper'\")"]


def test_every_benchmark_loads_by_path_from_another_folder(tmp_path):
    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    assert len(scripts) >= 20, "benchmarks/ went missing"
    assert load_failures(ROOT / "benchmarks", tmp_path) == []
