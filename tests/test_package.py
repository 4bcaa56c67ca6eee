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


REPO = __import__("pathlib").Path(__file__).resolve().parent.parent
_DOTTED = __import__("re").compile(r"\bspatial_tf(?:\.[A-Za-z_]\w*)+")


def _documented_names():
    names = set()
    for doc in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:  # troubleshooting/ too
        names |= set(_DOTTED.findall(doc.read_text()))
    return sorted(names)


def test_docs_name_some_attributes():
    names = _documented_names()
    # the forms README's example and layout rely on; all must be among those found
    assert {"spatial_tf.topology.synthetic", "spatial_tf.split", "spatial_tf.auto"} <= set(names)


def test_every_name_written_in_readme_and_docs_resolves_after_a_plain_import():
    names = _documented_names()
    code = (
        "import functools, spatial_tf\n"
        "missing = []\n"
        f"for dotted in {names!r}:\n"
        "    try:\n"
        "        functools.reduce(getattr, dotted.split('.')[1:], spatial_tf)\n"
        "    except AttributeError as e:\n"
        "        missing.append(f'{dotted}: {e}')\n"
        "print('MISSING', missing)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True)
    assert "MISSING []" in out.stdout, out.stdout + out.stderr


def test_subpackages_are_attributes_and_load_lazily():
    code = (
        "import sys, spatial_tf\n"
        "print('before', 'spatial_tf.topology' in sys.modules)\n"
        "print('name', spatial_tf.topology.synthetic('v3-32').name)\n"
        "print('after', 'spatial_tf.topology' in sys.modules)\n"
        "print('dir', 'topology' in dir(spatial_tf))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True)
    assert out.stdout.split("\n")[:4] == ["before False", "name v3-32", "after True", "dir True"]


def test_error_types_users_catch_are_exported():
    from spatial_tf.emulator.xla.errors import CompileError
    from spatial_tf.emulator.diagnose.parity import ParityError
    from spatial_tf.strategy import TPUError, TPUUnavailableError

    assert spatial_tf.CompileError is CompileError
    assert spatial_tf.ParityError is ParityError
    assert spatial_tf.TPUUnavailableError is TPUUnavailableError
    assert spatial_tf.TPUError is TPUError


def test_helpers_that_skip_checks_are_not_top_level():
    assert "annotate_tensor" not in spatial_tf.__all__
    with pytest.raises(AttributeError, match="has no attribute 'annotate_tensor'"):
        spatial_tf.annotate_tensor


_TYPED_MODULES = [
    "spatial_tf.spec", "spatial_tf.spec.paths", "spatial_tf.topology", "spatial_tf.summarize",
    "spatial_tf.strategy", "spatial_tf.annotate", "spatial_tf.devices", "spatial_tf.data",
    "spatial_tf.models", "spatial_tf.checks", "spatial_tf._tf_internals", "spatial_tf.detection",
]


def test_public_signatures_have_type_hints():
    import importlib
    import inspect

    checked, untyped = 0, []
    for module_name in _TYPED_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            fn = obj.__init__ if inspect.isclass(obj) else obj
            if not inspect.isfunction(fn):
                continue  # dataclasses' generated __init__, constants
            checked += 1
            sig = inspect.signature(fn)
            missing = [p for p, v in sig.parameters.items()
                       if p not in ("self", "cls") and v.annotation is inspect.Parameter.empty]
            if missing or sig.return_annotation is inspect.Signature.empty:
                untyped.append(f"{module_name}.{name}{sig}")
    assert checked > 30
    assert untyped == []
