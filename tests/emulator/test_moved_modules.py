"""The emulator's modules that moved to another part still import at their old path for
one release: the same objects, with a DeprecationWarning that names the new path."""
import importlib
import sys

import pytest

MOVED = {
    "spatial_tf.emulator.compile.errors": "spatial_tf.emulator.xla.errors",
    "spatial_tf.emulator.compile.compile_cache": "spatial_tf.emulator.xla.compile_cache",
    "spatial_tf.emulator.compile.tpu_compile": "spatial_tf.emulator.tpu.tpu_compile",
    "spatial_tf.emulator.compile.step_time": "spatial_tf.emulator.tpu.step_time",
    "spatial_tf.emulator.diagnose.hlo_text": "spatial_tf.emulator.xla.hlo_text",
}


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_an_old_path_warns_and_gives_the_moved_modules_names(old, new):
    sys.modules.pop(old, None)  # imported before (a doctest's collection): import anew
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}; the old path works "
                                                f"for one release"):
        module = importlib.import_module(old)
    moved = importlib.import_module(new)
    assert moved.__all__ and module.__all__ == moved.__all__
    for name in moved.__all__:
        assert getattr(module, name) is getattr(moved, name), name
    private = sorted(n for n in vars(moved) if n.startswith("_") and not n.startswith("__"))
    if private:  # names outside __all__ are the moved module's too
        assert getattr(module, private[0]) is getattr(moved, private[0])
    with pytest.raises(AttributeError):
        module.no_such_name


def test_the_exported_error_is_the_moved_one():
    import spatial_tf
    from spatial_tf.emulator.xla.errors import CompileError

    assert spatial_tf.CompileError is CompileError
    assert spatial_tf.emulator.CompileError is CompileError
