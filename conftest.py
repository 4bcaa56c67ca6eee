"""Skip what needs an optional dependency that is not installed, and say which and why.

The CPU emulator needs jax and jaxlib (``pip install "spatial-tf[emulator]"``, Python
3.11 or later). Without them, its tests (``tests/emulator``), its doctests
(``spatial_tf/emulator``), the README and docs examples and the notebooks (they run on
the emulator) and tests marked ``emulator`` are skipped with that reason; the rest of the
suite runs. Notebooks are marked ``slow``.

A README or docs code block fenced as ``python fixture:tpu`` needs a real TPU: the ``tpu``
fixture runs it where one is found and otherwise skips it with the reason. One fenced
``python fixture:tpu_compiler`` needs libtpu (XLA's TPU compiler, ``pip install
"spatial-tf[tpu-compile]"``), and so do the doctests of the modules in ``_LIBTPU_DOCTESTS``:
skipped with that reason without it.
"""
import importlib.util
import os
import pathlib
import shutil
import sys
import tempfile
import time

import pytest

# The suite's compiles are cached in a folder of its own, made anew for each run (shared
# by its xdist workers, which inherit the variable), so no test reads a result another
# run left; users' own suites use the default folder (spatial_tf.emulator.xla.compile_cache).
# A run removes its folder when it ends; one killed before that (SIGTERM, SIGKILL) leaves it,
# so each run first removes the folders of runs whose process is gone.
_CACHE_ENV = "SPATIAL_TF_COMPILE_CACHE"
_CACHE_PREFIX = "spatial_tf_test_compiles_"


def _process_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _remove_abandoned_caches(parent):
    """Remove ``<parent>/spatial_tf_test_compiles_<pid>_*`` folders whose run has ended."""
    for folder in pathlib.Path(parent).glob(_CACHE_PREFIX + "*"):
        pid = folder.name[len(_CACHE_PREFIX):].split("_")[0]
        if pid.isdigit():
            abandoned = not _process_alive(int(pid))
        else:  # named before runs put their process id in the name: a day old
            abandoned = time.time() - folder.stat().st_mtime > 24 * 3600
        if abandoned:
            shutil.rmtree(folder, ignore_errors=True)


if _CACHE_ENV not in os.environ:
    _remove_abandoned_caches(tempfile.gettempdir())
    os.environ[_CACHE_ENV] = _OWN_CACHE = tempfile.mkdtemp(
        prefix=f"{_CACHE_PREFIX}{os.getpid()}_")
else:
    _OWN_CACHE = None


# The suite's steps are small: XLA:CPU compiles them without LLVM's optimizations (same
# partitions, collectives and memory figures; about a third less compile CPU). Inherited
# by the xdist workers, the notebooks' kernels and the CLI processes tests start.
os.environ.setdefault("SPATIAL_TF_FAST_COMPILE", "1")


def pytest_unconfigure(config):
    if _OWN_CACHE and not hasattr(config, "workerinput"):  # the controller, after the run
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)

_ROOT = pathlib.Path(__file__).resolve().parent
# not doctest modules: this file, and the old paths of moved modules (importing one only
# warns, which tests/emulator/test_moved_modules.py checks)
collect_ignore = ["conftest.py"] + [
    str(path) for path in sorted((_ROOT / "spatial_tf").rglob("*.py"))
    if "__getattr__ = moved(__name__" in path.read_text()]
_EMULATOR_DIRS = (_ROOT / "tests" / "emulator", _ROOT / "spatial_tf" / "emulator",
                  _ROOT / "docs", _ROOT / "README.md", _ROOT / "notebooks")
JAX_MISSING_REASON = (
    "needs jax and jaxlib (the CPU emulator), which are not installed here. Fix: pip "
    "install 'spatial-tf[emulator]' (Python 3.11 or later) to run these."
)


def jax_available():
    """True when both jax and jaxlib can be imported (without importing them)."""
    for name in ("jax", "jaxlib"):
        if name in sys.modules and sys.modules[name] is None:  # import explicitly blocked
            return False
        try:
            if importlib.util.find_spec(name) is None:
                return False
        except (ImportError, ValueError):
            return False
    return True


LIBTPU_MISSING_REASON = (
    "needs libtpu (XLA's TPU compiler), which is not installed here. Fix: pip install "
    "'spatial-tf[tpu-compile]' (Linux, Python 3.11 or later) to run these."
)
_LIBTPU_DOCTESTS = (_ROOT / "spatial_tf" / "planning" / "search.py",)


def libtpu_available():
    """True when libtpu is installed (it is only loaded by the TPU compiler's worker)."""
    import importlib.metadata

    try:
        importlib.metadata.version("libtpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _needs_jax(item):
    path = pathlib.Path(str(item.path)).resolve()
    return item.get_closest_marker("emulator") is not None or any(
        d == path or d in path.parents for d in _EMULATOR_DIRS
    )


def pytest_collection_modifyitems(config, items):
    for item in items:  # a notebook (run by nbmake) takes half a minute to three here
        if pathlib.Path(str(item.path)).suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
    # (tests/conftest.py's longest_first puts them, and the other slow tests, first)
    if not libtpu_available():
        no_libtpu = pytest.mark.skip(reason=LIBTPU_MISSING_REASON)
        for item in items:
            if pathlib.Path(str(item.path)).resolve() in _LIBTPU_DOCTESTS:
                item.add_marker(no_libtpu)
    if jax_available():
        return
    skip = pytest.mark.skip(reason=JAX_MISSING_REASON)
    for item in items:
        if _needs_jax(item):
            item.add_marker(skip)

@pytest.fixture
def tpu():
    """Skip unless this machine can reach a TPU (no network wait)."""
    from spatial_tf.strategy import TPUUnavailableError, _resolve_target

    try:
        _resolve_target(None)
    except TPUUnavailableError as e:
        pytest.skip(f"needs a real TPU: {str(e).split(' Fix:')[0]}")


@pytest.fixture
def tpu_compiler():
    """Skip unless libtpu (XLA's TPU compiler, compile-only) is installed."""
    if not libtpu_available():
        pytest.skip(LIBTPU_MISSING_REASON)


# The project's own plugin (spatial_tf.testing.plugin) for the README's example test file:
# an installed spatial_tf loads it through its entry point, a bare checkout here.
def _plugin_installed():
    import importlib.metadata

    return any(e.value == "spatial_tf.testing.plugin"
               for e in importlib.metadata.entry_points(group="pytest11"))


if not _plugin_installed():
    pytest_plugins = ["spatial_tf.testing.plugin"]
