"""Shared test set-up: virtual CPU devices for TensorFlow, configured once per session.

TensorFlow fixes its device list the first time it is used, so the split into
``NUM_VIRTUAL_CPUS`` logical CPUs happens here at import time, before any test runs.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

from spatial_tf.devices import virtual_cpus as _virtual_cpus  # noqa: E402

NUM_VIRTUAL_CPUS = 8
_DEVICES = _virtual_cpus(NUM_VIRTUAL_CPUS)


@pytest.fixture
def parse_error(capsys):
    """``parse_error(argv)``: run the CLI on ``argv``, expect argparse's exit 2 with one
    line on stderr and no traceback; return that line (used by tests/commands)."""
    from spatial_tf.__main__ import main

    def run(argv):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        return err

    return run


_SUMMARY_STATE = ("writer", "step", "is_recording", "is_recording_distribution_strategy")


@pytest.fixture(autouse=True)
def summary_state_restored():
    """``tf.summary``'s process-wide state (default writer, default step, record_if)
    as each test found it, restored after it: a test that leaves a default step set must
    not change what the next test in the same worker writes. TensorFlow's own
    ``_test_summary_for_replica_zero_only`` (ported in test_tf_tpu_strategy.py) calls
    ``summary_ops.set_step(0)`` and never unsets it; two summary tests that ran after it
    in one worker wrote step 0 where 5 and 6 were set."""
    from spatial_tf._tf_internals import summary_ops_v2

    state = summary_ops_v2._summary_state
    saved = {name: getattr(state, name, None) for name in _SUMMARY_STATE}
    yield
    for name, value in saved.items():
        setattr(state, name, value)


@pytest.fixture(scope="session")
def cli():
    """``cli(argv)``: the CLI's ``main(argv)`` (its exit status), with Keras' global state
    cleared first (``keras.backend.clear_session``), as in a new ``python -m spatial_tf``
    process. Keras then numbers the layers from the start, as such a process does, so the
    same command traces the same program, op names included, and reads its compile from
    the suite's compile cache when an earlier command (a test's, or a process's) compiled
    it; ``main`` called again in one process would name the layers ``conv3d_7`` where it
    named ``conv3d`` and compile the program anew."""
    def run(argv):
        import keras

        from spatial_tf.__main__ import main

        keras.backend.clear_session()
        return main(argv)

    return run


@pytest.fixture(scope="session")
def virtual_cpus():
    """The names of the virtual CPU devices, e.g. ['/job:localhost/.../device:CPU:0', ...]."""
    return list(_DEVICES)


def pytest_collection_modifyitems(config, items):
    """Fail the run when a parametrized test collected zero cases (it would only skip);
    run the notebooks first (see ``longest_first``)."""
    items[:] = longest_first(items)
    empty = [
        item.nodeid for item in items
        if any(m.name == "skip" and str(m.kwargs.get("reason", "")).startswith(
            "got empty parameter set") for m in item.iter_markers())
    ]
    if empty:
        raise pytest.UsageError(
            f"parametrized test(s) with zero cases: {', '.join(empty)}. A test whose case "
            f"list is empty checks nothing. Fix: give it at least one case."
        )


def longest_first(items):
    """``items`` with the notebooks (a minute or more each) first, then the other tests
    marked ``slow``, the rest in collection order: pytest-xdist hands the first quarter
    out round-robin and the rest on demand, so long items started first end with the rest
    instead of after it.

    >>> class Item:
    ...     def __init__(self, nodeid, slow=False): self.nodeid, self.slow = nodeid, slow
    ...     def get_closest_marker(self, name): return name if self.slow else None
    >>> [i.nodeid for i in longest_first([Item("tests/a.py::t"), Item("tests/c.py::s", True),
    ...                                   Item("notebooks/b.ipynb")])]
    ['notebooks/b.ipynb', 'tests/c.py::s', 'tests/a.py::t']
    """
    return sorted(items, key=lambda item: (
        not item.nodeid.split("::")[0].endswith(".ipynb"),
        item.get_closest_marker("slow") is None))
