"""pytest plugin: an ``emulator`` fixture, laid out by ``@pytest.mark.spatial_tf``.

Loaded automatically once spatial_tf is installed (entry point ``pytest11``).

- ``emulator``: a ``spatial_tf.Emulator``; 2 cores x 1 replica unless the test is
  marked ``@pytest.mark.spatial_tf(cores=4, replicas=2)``. Lists run the test once per
  layout: ``@pytest.mark.spatial_tf(cores=[1, 2, 4])`` gives three tests (ids ``1x1``,
  ``2x1``, ``4x1``). One emulator per layout is shared by the session, so a step
  compiled in one test is not compiled again in the next.
- Virtual CPU devices: jax fixes its CPU device count when it starts. After
  collection, before any test runs, the plugin sets it to what the marked tests need
  (at least spatial_tf's default of 128; more with ``SPATIAL_TF_CPU_DEVICES`` or the ini
  option ``spatial_tf_cpu_devices``), unless jax was started or configured already.

Example test file (docs/guide-testing.md has a complete one)::

    import pytest, tensorflow as tf, spatial_tf
    from spatial_tf.testing import assert_partitioned_matches

    @pytest.mark.spatial_tf(cores=[2, 4])
    def test_step(emulator):
        step = lambda x: tf.reduce_sum(spatial_tf.split(x, [1, emulator.num_cores_per_replica]))
        assert_partitioned_matches(emulator, step, (tf.ones([2, 8]),))
"""
import itertools
import os

import pytest

from spatial_tf.table import plural

__all__ = ["emulator", "layouts", "MARKER"]

MARKER = "spatial_tf"
DEFAULT_LAYOUT = (2, 1)  # cores per replica, replicas
_INI = "spatial_tf_cpu_devices"
_made: dict = {}


def pytest_addoption(parser):
    parser.addini(
        _INI, "virtual CPU devices jax starts with for spatial_tf emulators "
        "(default: what the tests need, at least 128)", default="",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        f"{MARKER}(cores=2, replicas=1): layout of the 'emulator' fixture; lists of "
        f"values run the test once per combination",
    )


def layouts(marker, where="@pytest.mark.spatial_tf"):
    """``[(cores, replicas), ...]`` from a ``spatial_tf`` marker (or the default)."""
    if marker is None:
        return [DEFAULT_LAYOUT]
    if marker.args:
        raise TypeError(
            f"{where}: got positional arguments {marker.args!r}; expected keywords. Fix: "
            f"@pytest.mark.spatial_tf(cores=4, replicas=2)."
        )
    unknown = set(marker.kwargs) - {"cores", "replicas"}
    if unknown:
        raise TypeError(
            f"{where}: {plural(len(unknown), 'unknown argument')} {sorted(unknown)}; expected "
            f"cores= and replicas=. Fix: @pytest.mark.spatial_tf(cores=4, replicas=2)."
        )
    cores = _values(marker.kwargs.get("cores", DEFAULT_LAYOUT[0]), "cores", where)
    replicas = _values(marker.kwargs.get("replicas", DEFAULT_LAYOUT[1]), "replicas", where)
    from spatial_tf.checks import CORE_COUNTS

    for c in cores:
        if c not in CORE_COUNTS:
            raise ValueError(
                f"{where}: cores={c}; expected a power of two from 1 to 128. Fix: e.g. "
                f"cores=4."
            )
    return list(itertools.product(cores, replicas))


def _values(value, name, where):
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                         for v in values):
        raise ValueError(
            f"{where}: {name}={value!r}; expected a positive int or a non-empty list of "
            f"them. Fix: e.g. {name}=2 or {name}=[1, 2]."
        )
    return values


def pytest_generate_tests(metafunc):
    if "emulator" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None:
        return
    try:
        found = layouts(marker, f"{metafunc.definition.nodeid}: @pytest.mark.spatial_tf")
    except (TypeError, ValueError) as e:
        pytest.fail(f"{type(e).__name__}: {e}", pytrace=False)  # the message, no traceback
    metafunc.parametrize("emulator", found, indirect=True,
                         ids=[f"{c}x{r}" for c, r in found])


def pytest_collection_modifyitems(session, config, items):
    needed = [
        c * r
        for item in items
        if "emulator" in getattr(item, "fixturenames", ())
        for c, r in [getattr(getattr(item, "callspec", None), "params", {}).get(
            "emulator", DEFAULT_LAYOUT)]
    ]
    if needed:
        _configure_devices(config, max(needed))


def _configure_devices(config, needed):
    from spatial_tf.emulator import DEFAULT_CPU_DEVICES, DEVICES_ENV, configure

    raw = config.getini(_INI) or os.environ.get(DEVICES_ENV)
    count = max(needed, DEFAULT_CPU_DEVICES)
    if raw:
        try:
            count = max(needed, int(raw))
        except ValueError:
            raise pytest.UsageError(
                f"{_INI} / {DEVICES_ENV} is {raw!r}; expected a positive int. Fix: "
                f"e.g. {_INI} = 256."
            ) from None
    # started or configured by someone else: then the fixture says if there are too few
    configure(count, only_if_unset=True)


@pytest.fixture
def emulator(request):
    """A ``spatial_tf.Emulator`` with the layout of the test's ``spatial_tf`` marker."""
    from spatial_tf.emulator import Emulator

    cores, replicas = getattr(request, "param", DEFAULT_LAYOUT)
    key = (cores, replicas)
    if key not in _made:
        _made[key] = Emulator(num_cores_per_replica=cores, num_replicas=replicas)
    return _made[key]
