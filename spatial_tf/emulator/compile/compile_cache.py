"""Compile results kept across processes, in a user cache folder.

A TPU compile takes seconds to many minutes on a CPU machine, so what the TPU compiler
said of a program is stored once, keyed on everything the answer depends on (the
program's bytes, the target, the options, the compiler's version and its flags in
``LIBTPU_INIT_ARGS``), and a second ``report``, ``plan`` or ``pytest`` run of the same
step reads it back. The emulator's CPU executables are kept the same way (jaxlib's
``serialize_executable``); like any compiled program, load only a cache folder you wrote
yourself.

The folder is ``$SPATIAL_TF_COMPILE_CACHE`` if set, else ``$XDG_CACHE_HOME/spatial_tf/
compiles`` (``~/.cache/spatial_tf/compiles``); ``SPATIAL_TF_COMPILE_CACHE=off`` turns the
cache off. Each entry is one JSON file, written whole or not at all (a temporary file
renamed into place), so an interrupted compile leaves no broken entry.

>>> import tempfile, os
>>> os.environ["SPATIAL_TF_COMPILE_CACHE"] = tempfile.mkdtemp()
>>> k = key(b"program", "v3", 8)
>>> load(k) is None
True
>>> store(k, {"status": "compiled"})
>>> load(k)
{'status': 'compiled'}
>>> del os.environ["SPATIAL_TF_COMPILE_CACHE"]
"""
import functools
import hashlib
import json
import logging
import os
import pathlib
import platform
import tempfile
from typing import Optional

__all__ = ["ENV", "directory", "key", "program_key", "host_cpu", "load", "store",
           "load_bytes", "store_bytes"]

ENV = "SPATIAL_TF_COMPILE_CACHE"
_OFF = ("", "0", "off", "false", "no")
_log = logging.getLogger("spatial_tf")
_warned: set = set()


def directory() -> Optional[pathlib.Path]:
    """The cache folder, or None when the cache is off."""
    raw = os.environ.get(ENV)
    if raw is not None:
        return None if raw.strip().lower() in _OFF else pathlib.Path(raw).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "spatial_tf" / "compiles"


def key(*parts) -> str:
    """A hex digest of ``parts`` (bytes as they are, anything else by its ``repr``)."""
    digest = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else repr(part).encode()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


@functools.lru_cache(maxsize=None)
def host_cpu() -> str:
    """This machine's processor as XLA:CPU compiles for it (architecture and, on Linux,
    the instruction-set flags): part of a CPU executable's key, so a cache folder shared
    between machines (a network home) never hands one an executable for another's CPU."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        pass
    return key(platform.machine(), platform.processor(), flags)[:16]


def program_key(hlo: bytes, *parts) -> str:
    """``key`` of a serialized ``HloModuleProto`` and ``parts``, with the names that
    depend on the trace (TensorFlow names a module and its computations after the traced
    function and a counter, e.g. ``a_inference_step_246__``) left out, so the same step
    traced again, in this process or another, has the same key."""
    from spatial_tf._tf_internals import hlo_pb2

    module = hlo_pb2.HloModuleProto.FromString(hlo)
    module.name, module.id, module.entry_computation_name = "", 0, ""
    for computation in module.computations:
        computation.name = ""
    return key(module.SerializeToString(deterministic=True), *parts)


def load(entry: str) -> Optional[dict]:
    """The stored result for ``entry``, or None (not stored, cache off, or unreadable)."""
    data = load_bytes(entry, ".json")
    try:
        return None if data is None else json.loads(data)
    except ValueError:
        return None


def store(entry: str, value: dict) -> None:
    """Store ``value`` for ``entry``; a folder that cannot be written is reported once
    (as a warning on the ``spatial_tf`` logger) and the result is simply not kept."""
    store_bytes(entry, json.dumps(value).encode(), ".json")


def load_bytes(entry: str, suffix: str = ".bin") -> Optional[bytes]:
    """The stored bytes for ``entry``, or None."""
    folder = directory()
    if folder is None:
        return None
    try:
        return (folder / f"{entry}{suffix}").read_bytes()
    except OSError:
        return None


def store_bytes(entry: str, data: bytes, suffix: str = ".bin") -> None:
    """Store ``data`` for ``entry``, whole or not at all (see ``store``)."""
    folder = directory()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(dir=folder, suffix=".partial")
        with os.fdopen(handle, "wb") as f:
            f.write(data)
        os.replace(partial, folder / f"{entry}{suffix}")
    except OSError as e:
        if str(folder) not in _warned:
            _warned.add(str(folder))
            _log.warning("spatial_tf: compile results are not cached: %s cannot be written "
                         "(%s). Fix: set %s to a writable folder, or %s=off.",
                         folder, e, ENV, ENV)
