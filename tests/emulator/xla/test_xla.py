"""The jax boundary: device set-up, the missing-jax message, version warning."""
import os
import subprocess
import sys
import textwrap

import pytest

import spatial_tf
from spatial_tf.emulator import configure
from spatial_tf.emulator.xla import _xla


def test_devices_are_shared_and_counted():
    devices = _xla.cpu_devices(8)
    assert len(devices) == 8 and devices == _xla.cpu_devices(8)
    assert len(_xla.cpu_devices(1)) == 1


def test_asking_for_more_devices_than_started_says_how_to_fix():
    have = len(_xla._load().jax.devices("cpu"))
    with pytest.raises(RuntimeError, match=rf"needs {have + 1} virtual CPU devices but jax started with {have}.*configure\({have + 1}\)"):
        _xla.cpu_devices(have + 1)
    with pytest.raises(RuntimeError, match="cannot change once jax is running"):
        configure(have + 1)
    configure(have)  # enough already: nothing to do


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-3, ValueError), (2.0, TypeError), (True, TypeError)])
def test_configure_checks_its_argument(bad, error):
    with pytest.raises(error, match=r"configure: num_devices is .*expected a positive int"):
        configure(bad)


def test_unverified_jax_version_warns():
    with pytest.warns(UserWarning, match=r"verified with jax 0\.10\.2 up to \(not including\) 0\.11\.0; found jax 0\.12\.1"):
        _xla._check_version("0.12.1")


def test_device_count_from_environment(tmp_path):
    script = textwrap.dedent(
        """
        from spatial_tf.emulator.xla import _xla
        print(len(_xla._load().jax.devices("cpu")) if _xla.cpu_devices(2) else 0)
        """
    )
    root = os.path.dirname(os.path.dirname(spatial_tf.__file__))
    env = {"SPATIAL_TF_CPU_DEVICES": "16", "PYTHONPATH": root, "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         cwd=str(tmp_path), check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "16"


def test_bad_device_count_in_environment(monkeypatch):
    monkeypatch.setenv("SPATIAL_TF_CPU_DEVICES", "many")
    with pytest.raises(ValueError, match="SPATIAL_TF_CPU_DEVICES='many'; expected a positive int"):
        _xla._default_count()


def test_the_emulator_imports_without_jax(tmp_path):
    script = (
        "import sys; sys.modules['jax'] = sys.modules['jaxlib'] = None\n"
        "import spatial_tf.emulator\n"
        "try:\n    spatial_tf.emulator.Emulator(2)\n"
        "except ImportError as e:\n    print(e)\n"
    )
    root = os.path.dirname(os.path.dirname(spatial_tf.__file__))
    env = {"PYTHONPATH": root, "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         cwd=str(tmp_path), check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert 'Fix: pip install "spatial-tf[emulator]"' in out.stdout


@pytest.mark.parametrize("value, expected", [
    ("1", {"xla_backend_optimization_level": 0}), (" On ", {"xla_backend_optimization_level": 0}),
    ("true", {"xla_backend_optimization_level": 0}), ("0", {}), ("off", {}), ("", {}),
])
def test_fast_compile_reads_on_and_off(monkeypatch, value, expected):
    monkeypatch.setenv("SPATIAL_TF_FAST_COMPILE", value)
    assert _xla.fast_compile_options() == expected


def test_a_fast_compile_value_that_is_neither_is_refused(monkeypatch):
    monkeypatch.setenv("SPATIAL_TF_FAST_COMPILE", "fastest")
    with pytest.raises(ValueError, match=r"SPATIAL_TF_FAST_COMPILE='fastest'; expected 1 .* or 0\. "
                                         r"Fix: SPATIAL_TF_FAST_COMPILE=1, or unset it"):
        _xla.fast_compile_options()


def test_a_fast_compile_partitions_alike_and_is_cached_apart(monkeypatch, tmp_path):
    import tensorflow as tf

    from spatial_tf.emulator import Emulator

    monkeypatch.setenv("SPATIAL_TF_COMPILE_CACHE", str(tmp_path))
    kernel = tf.Variable(tf.random.stateless_normal([3, 3, 2, 4], (1, 2), dtype=tf.float64))

    def step(x):
        x = spatial_tf.split(x, [1, 2, 2, 1])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.nn.conv2d(x, kernel, 1, "SAME") ** 2)
        return loss, tape.gradient(loss, kernel)

    x = tf.random.stateless_normal([2, 16, 16, 2], (3, 4), dtype=tf.float64)
    found = {}
    for value in ("0", "1"):
        monkeypatch.setenv("SPATIAL_TF_FAST_COMPILE", value)
        emulator = Emulator(4)
        memory = emulator.compile(step, (x,)).memory()
        found[value] = (memory, [v.numpy() for v in emulator.run(step, args=(x,))])
    assert found["0"][0] == found["1"][0]  # buffer assignment is before code generation
    for slow, fast in zip(found["0"][1], found["1"][1]):
        assert abs(slow - fast).max() <= 1e-12 * abs(slow).max()
    assert len(list(tmp_path.glob("*.bin"))) == 2  # the step compiled once per option
