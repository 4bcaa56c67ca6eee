"""Which source files are spatial_tf's own plumbing, declared by the files themselves.

A report names the line of the user's code that made an op: the innermost frame of the
op's stack outside TensorFlow, Keras, the standard library and spatial_tf's modules that
build ops for users (``split``, the layers ``partition_friendly`` installs, the
emulator). Each such module declares itself on import, as jax's
``traceback_util.register_exclusion(__file__)`` does, so a new module that builds ops
cannot be forgotten in a list kept elsewhere:

>>> import os
>>> register_exclusion(os.path.join(os.sep, "somewhere", "plumbing.py"))
>>> is_excluded(os.path.join(os.sep, "somewhere", "plumbing.py"))
True
>>> is_excluded(os.path.join(os.sep, "somewhere", "user_code.py"))
False
"""
import os
import threading

__all__ = ["register_exclusion", "is_excluded", "excluded"]

_lock = threading.Lock()
_EXCLUDED: set = set()


def register_exclusion(path: str) -> None:
    """Declare ``path`` (a module's ``__file__``, or a package folder) as spatial_tf's
    own: frames in it are never the user's line."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "")
    with _lock:
        _EXCLUDED.add(path)


def excluded() -> tuple:
    """The declared files and folders (folders end with the path separator)."""
    with _lock:
        return tuple(sorted(_EXCLUDED))


def is_excluded(filename: str) -> bool:
    """Whether ``filename`` is one of the declared files or inside a declared folder."""
    return any(filename == p or (p.endswith(os.sep) and filename.startswith(p))
               for p in excluded())
