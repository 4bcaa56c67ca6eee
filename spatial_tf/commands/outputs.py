"""Where the commands write: each output path is checked before any work, and written
whole or not at all.

``check_file`` and ``check_dir`` refuse an output path that cannot be written (a folder
that is missing and cannot be created, or is not writable; a directory where a file is
expected; a file where a directory is expected) or that is the same file as an input,
with an argparse-style message (``argument --png: ...; expected ... Fix: ...``). They
change nothing: a folder that is missing is created only when the output is written.
``write_atomically`` writes to a temporary name in the output's folder and renames it
over the output with ``os.replace``, so a crash or an error leaves the old file (or
none), never a partial one.

>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> check_file("--png", os.path.join(folder, "new", "x.png"))
>>> check_file("--png", folder)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: argument --png: ... is a directory; expected a file to write. Fix: ...
>>> write_atomically(os.path.join(folder, "new", "x.txt"), lambda tmp: open(tmp, "w").write("hi"))
>>> sorted(os.listdir(os.path.join(folder, "new")))
['x.txt']
"""
import contextlib
import os
import tempfile
import uuid
from typing import Any, Callable, List, Optional, Sequence, Tuple

__all__ = ["check_file", "check_dir", "model_dir_inputs", "write_atomically"]

Inputs = Sequence[Tuple[str, Optional[str]]]  # (option, path) of what a command reads


def check_file(option: str, path: str, inputs: Inputs = (), example: str = "out.png") -> None:
    """Raise ValueError unless ``path`` can be written as a file and is none of
    ``inputs`` (``(option, path)`` pairs; None paths are skipped). ``example`` is the
    file name the message suggests when ``path`` is a directory."""
    if os.path.isdir(path):
        raise ValueError(f"argument {option}: {path} is a directory; expected a file to write. "
                         f"Fix: name a file in it, e.g. {option} {os.path.join(path, example)}")
    for other, source in inputs:
        if source is not None and _same_file(path, source):
            raise ValueError(f"argument {option}: {path} is the same file as {other} {source}; "
                             f"expected a file of its own (writing it would overwrite that "
                             f"one). Fix: choose another path for {option}")
    _check_folder(option, path, os.path.dirname(os.path.abspath(path)))


def check_dir(option: str, path: str) -> None:
    """Raise ValueError unless ``path`` is a writable directory or can be created as one."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"argument {option}: {path} is a file; expected a directory (created "
                         f"when missing). Fix: choose another {option}")
    _check_folder(option, path, os.path.abspath(path))


def _check_folder(option, path, folder):
    """``folder`` exists and is writable, or its nearest existing parent is a writable
    directory (so it can be created). Probes with a temporary file, removed at once."""
    parent = folder
    while not os.path.exists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ValueError(f"argument {option}: {path} cannot be written: {parent} is a file, "
                         f"not a folder; expected a path whose folders exist or can be "
                         f"created. Fix: choose another path for {option}")
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".spatial_tf-probe-")
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise ValueError(f"argument {option}: {path} cannot be written: {parent} is not "
                         f"writable ({e.strerror}); expected a path in a folder you can write "
                         f"to (missing folders are created). Fix: choose another path for "
                         f"{option}, or make {parent} writable") from None


def _same_file(a, b):
    """True when paths ``a`` and ``b`` name the same file (links and ``..`` resolved)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return os.path.realpath(a) == os.path.realpath(b)


def model_dir_inputs(model_dir: Optional[str]) -> List[Tuple[str, str]]:
    """``("--model-dir", file)`` for the files of a model dir an output must not replace:
    ``model.json``, the ``checkpoint`` file and the ``ckpt-*`` files."""
    if model_dir is None or not os.path.isdir(model_dir):
        return []
    return [("--model-dir", os.path.join(model_dir, name)) for name in sorted(os.listdir(model_dir))
            if name in ("model.json", "checkpoint") or name.startswith("ckpt-")]


def _extension(name):
    """``.nii.gz`` or the last suffix: the temporary name keeps it (writers go by it)."""
    return ".nii.gz" if name.lower().endswith(".nii.gz") else os.path.splitext(name)[1]


def write_atomically(path: str, write: Callable[[str], Any]) -> None:
    """``write(temporary_path)``, then rename the temporary file over ``path``.

    The temporary file is in ``path``'s folder (created when missing), keeps its
    extension and is removed when ``write`` fails; its data is flushed to the disk before
    the rename. The file gets the permissions a new file gets (the umask applies)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    name = os.path.basename(path)
    ext = _extension(name)
    tmp = os.path.join(folder, f".{name[: len(name) - len(ext)]}.{uuid.uuid4().hex[:8]}.tmp{ext}")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
