"""spatial_tf.Error: every exception class the package defines derives from it and keeps
its built-in base."""
import ast
import importlib
import pathlib

import spatial_tf

PACKAGE = pathlib.Path(spatial_tf.__file__).parent

# the built-in base each keeps, written out here (what `except ValueError` etc. relies on)
EXPECTED = {
    "NotCompiled": Exception, "ParityError": AssertionError, "CompileError": ValueError,
    "TpuCompilerUnavailable": ImportError, "TpuCompileTimeout": TimeoutError,
    "NoStepTime": ValueError, "TPUUnavailableError": RuntimeError, "TPUError": RuntimeError,
    "CheckpointMismatchError": ValueError, "CheckpointUnreadableError": ValueError,
    "TensorFlowInternalsError": ImportError,
}


def _exception_classes():
    """(module, class name) of every public class in the package whose bases name an
    exception (read from the source, so a new one cannot be missed)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") \
                    and module != "spatial_tf.error":
                bases = [ast.unparse(b) for b in node.bases]
                if any(b.endswith(("Error", "Exception", "Unavailable", "Timeout")) for b in bases):
                    found.append((module.removesuffix(".__init__"), node.name))
    return found


def test_every_exception_class_derives_from_spatial_tf_error_and_keeps_its_base():
    classes = _exception_classes()
    assert sorted(name for _, name in classes) == sorted(EXPECTED)
    for module, name in classes:
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, spatial_tf.Error), f"{module}.{name}"
        assert issubclass(cls, EXPECTED[name]), f"{module}.{name}"


def test_catching_the_base_catches_what_the_package_raised():
    from spatial_tf.emulator.tpu.tpu_compile import TpuCompileTimeout

    try:
        raise TpuCompileTimeout("step: not done after 1 s")
    except spatial_tf.Error as e:
        assert isinstance(e, TimeoutError) and str(e) == "step: not done after 1 s"
