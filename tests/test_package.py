import subprocess
import sys

import pytest

import spatial_tf


def test_every_export_resolves():
    for name in spatial_tf.__all__:
        assert getattr(spatial_tf, name) is not None, name
    assert set(spatial_tf.__all__) <= set(dir(spatial_tf))


def test_unknown_attribute():
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        spatial_tf.nope


def test_import_is_cheap_and_does_not_load_tensorflow():
    code = "import sys, spatial_tf; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_tensorflow_message():
    code = (
        "import sys; sys.modules['tensorflow'] = None\n"
        "import spatial_tf\n"
        "try:\n    spatial_tf.split\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'spatial-tf[cpu]'" in out.stdout and "tensorflow-tpu" in out.stdout
