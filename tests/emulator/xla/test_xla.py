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
