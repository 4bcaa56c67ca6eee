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
cache off. Each entry is one file (``.json`` for the TPU compiler's answers, ``.bin`` for
CPU executables), written whole or not at all (a temporary ``.partial`` file renamed into
place), so an interrupted compile leaves no broken entry; a ``.partial`` file more than an
hour old, left by a process that was killed while writing, is removed at the next store
or ``clear``.

The folder is kept under a size limit, ``$SPATIAL_TF_COMPILE_CACHE_LIMIT`` (a size such as
``2GiB`` or ``500MB``, or bytes; ``0`` or ``off`` for none; default 4 GiB): after each
store the least recently used entries (stored or read longest ago; every read sets the
file's modification time) are removed until the rest fit. The entry just stored stays,
even if it alone is larger. Several processes may share the folder: each writes its own
temporary file, and an entry another process removed first is skipped.
``python -m spatial_tf cache`` lists the folder; ``cache clear`` empties it (``clear()``).

>>> import tempfile, os
>>> os.environ["SPATIAL_TF_COMPILE_CACHE"] = tempfile.mkdtemp()
>>> k = key(b"program", "v3", 8)
>>> load(k) is None
True
>>> store(k, {"status": "compiled"})
>>> load(k)
{'status': 'compiled'}
>>> [(entry.path.name == k + ".json", entry.size) for entry in entries()]
[(True, 22)]
>>> clear()
(1, 22)
>>> del os.environ["SPATIAL_TF_COMPILE_CACHE"]
"""
import contextlib
import errno
import functools
import hashlib
import json
import logging
import os
import pathlib
import platform
import re
import tempfile
import time
from typing import List, NamedTuple, Optional, Tuple

from spatial_tf.table import parse_size

__all__ = ["ENV", "LIMIT_ENV", "DEFAULT_LIMIT", "directory", "key", "program_key",
           "op_names", "renamed",
           "host_cpu", "load", "store", "load_bytes", "store_bytes", "Entry", "entries",
           "total_size", "clear", "limit"]

ENV = "SPATIAL_TF_COMPILE_CACHE"
LIMIT_ENV = "SPATIAL_TF_COMPILE_CACHE_LIMIT"
DEFAULT_LIMIT = 4 * 2**30
STALE_PARTIAL_SECONDS = 3600  # a writer this long gone was killed
_OFF = ("", "0", "off", "false", "no")
_NO_LIMIT = ("0", "off", "none", "no")
# only files this module writes are listed, evicted or removed: keys are sha256 digests
_ENTRY = re.compile(r"^[0-9a-f]{64}\.(?:json|bin)$")
_PARTIAL = re.compile(r"^(?:[0-9a-f]{64}\.|tmp)\w+\.partial$")  # mkstemp's names
TIMES_FILE = "compile_times.jsonl"  # written by compile_times, removed with the results
_log = logging.getLogger("spatial_tf")
_warned: set = set()


class Entry(NamedTuple):
    """One stored result: its file, its size in bytes, and when it was last stored or
    read (the file's modification time, in seconds since the epoch)."""

    path: pathlib.Path
    size: int
    last_used: float


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


def program_key(hlo: bytes, *parts, metadata: bool = True) -> str:
    """``key`` of a serialized ``HloModuleProto`` and ``parts``, with the names that
    depend on the trace (TensorFlow names a module and its computations after the traced
    function and a counter, e.g. ``a_inference_step_246__``) left out, so the same step
    traced again, in this process or another, has the same key. ``metadata=False`` also
    leaves out each instruction's metadata (the TensorFlow op name and source line it
    came from: Keras numbers layers per process, ``sgd/Mul`` then ``sgd_1/Mul``), for
    answers whose op names are put back afterwards (``op_names``, ``renamed``)."""
    from spatial_tf._tf_internals import hlo_pb2

    module = hlo_pb2.HloModuleProto.FromString(hlo)
    module.name, module.id, module.entry_computation_name = "", 0, ""
    for computation in module.computations:
        computation.name = ""
        if not metadata:
            for instruction in computation.instructions:
                instruction.ClearField("metadata")
    return key(module.SerializeToString(deterministic=True), *parts)


def op_names(hlo: bytes) -> List[str]:
    """The TensorFlow op name of each instruction of a serialized ``HloModuleProto``, in
    order: what ``renamed`` maps a stored answer's op names by."""
    from spatial_tf._tf_internals import hlo_pb2

    module = hlo_pb2.HloModuleProto.FromString(hlo)
    return [i.metadata.op_name for c in module.computations for i in c.instructions]


_OP_NAME = re.compile(r'op_name="([^"]*)"')


def renamed(text: str, stored: List[str], names: List[str]) -> str:
    """``text`` (HLO text or a compiler message) with the op names of the program it was
    stored for (``stored``) replaced by those of an identical program (``names``, the
    same instructions in the same order).

    >>> renamed('x = f32[] add(a, b), metadata={op_name="sgd/Mul"}', ["sgd/Mul"],
    ...         ["sgd_1/Mul"])
    'x = f32[] add(a, b), metadata={op_name="sgd_1/Mul"}'
    """
    if stored == names or len(stored) != len(names):
        return text
    mapping: dict = {}
    for old, new in zip(stored, names):
        mapping.setdefault(old, new)
    return _OP_NAME.sub(lambda m: f'op_name="{mapping.get(m.group(1), m.group(1))}"', text)


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
    """The stored bytes for ``entry``, or None. A hit marks the entry as used now (its
    modification time), so the size limit removes it last."""
    folder = directory()
    if folder is None:
        return None
    path = folder / f"{entry}{suffix}"
    try:
        data = path.read_bytes()
    except OSError:
        return None
    with contextlib.suppress(OSError):  # a read-only folder, or evicted meanwhile
        os.utime(path)
    return data


def store_bytes(entry: str, data: bytes, suffix: str = ".bin") -> None:
    """Store ``data`` for ``entry``, whole or not at all (see ``store``), then remove the
    least recently used entries beyond ``limit()``."""
    folder = directory()
    if folder is None:
        return
    path = folder / f"{entry}{suffix}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _write_whole(path, data)
    except OSError as e:
        _warn_not_cached(folder, e)
        return
    _evict(folder, keep=path)


def _write_whole(path: pathlib.Path, data: bytes) -> None:
    """``data`` at ``path`` through a temporary file, which is removed if anything
    (a full disk, an interrupt) stops the write."""
    handle, partial = tempfile.mkstemp(dir=path.parent, prefix=f"{path.stem}.",
                                       suffix=".partial")
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(data)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(partial)
        raise


def _warn_not_cached(folder: pathlib.Path, error: OSError) -> None:
    if str(folder) in _warned:
        return
    _warned.add(str(folder))
    if error.errno == errno.ENOSPC:
        _log.warning("spatial_tf: compile results are not cached: no space left on the disk "
                     "of %s (%s). Fix: free space there (python -m spatial_tf cache clear "
                     "empties this cache), or set %s to a folder on another disk, or %s=off.",
                     folder, error, ENV, ENV)
        return
    _log.warning("spatial_tf: compile results are not cached: %s cannot be written "
                 "(%s). Fix: set %s to a writable folder, or %s=off.",
                 folder, error, ENV, ENV)


def _parse_size(text: str) -> Optional[int]:
    """Bytes from a size limit; None for no limit.

    >>> _parse_size("2GiB"), _parse_size("500MB"), _parse_size("1048576"), _parse_size("off")
    (2147483648, 500000000, 1048576, None)
    """
    if text.strip().lower() in _NO_LIMIT:
        return None
    try:
        size = parse_size(text)
    except ValueError:  # a number with an unknown unit
        size = None
    if size is None:
        raise ValueError(
            f"{LIMIT_ENV} is {text!r}; expected a size such as 2GiB or 500MB, bytes, or "
            f"off for no limit. Fix: e.g. {LIMIT_ENV}=2GiB, or unset it for the default "
            f"4 GiB.")
    return size or None


def limit() -> Optional[int]:
    """The cache's size limit in bytes: ``$SPATIAL_TF_COMPILE_CACHE_LIMIT`` (``2GiB``,
    ``500MB``: KiB, MiB, GiB are powers of 1024, KB, MB, GB of 1000; or bytes), else
    ``DEFAULT_LIMIT`` (4 GiB); None when it is ``0`` or ``off`` (no limit).

    Raises:
      ValueError: a value that is not a size (the message names it and the fix).
    """
    raw = os.environ.get(LIMIT_ENV)
    return DEFAULT_LIMIT if raw is None or not raw.strip() else _parse_size(raw)


def entries() -> List[Entry]:
    """The stored results, most recently used first (none when the cache is off)."""
    folder = directory()
    return [] if folder is None else _scan(folder)[0]


def total_size() -> int:
    """The bytes the stored results take."""
    return sum(entry.size for entry in entries())


def clear() -> Tuple[int, int]:
    """Remove every stored result, the record of compile times (``compile_times``) and
    temporary files of writers killed more than an hour ago; ``(count, bytes)`` of the
    results removed."""
    folder = directory()
    if folder is None:
        return 0, 0
    found, partials = _scan(folder)
    _remove_stale(partials)
    _remove(folder / TIMES_FILE)
    removed = [entry for entry in found if _remove(entry.path)]
    return len(removed), sum(entry.size for entry in removed)


def _scan(folder: pathlib.Path) -> Tuple[List[Entry], List[Entry]]:
    """The entries, most recently used first, and the temporary files; a file removed
    meanwhile (by another process) is left out."""
    found: list = []
    partials: list = []
    try:
        listing = list(os.scandir(folder))
    except OSError:  # not made yet, or not readable
        return found, partials
    for item in listing:
        kind = found if _ENTRY.match(item.name) else (
            partials if _PARTIAL.match(item.name) else None)
        if kind is None:
            continue
        try:
            stat = item.stat()
        except OSError:
            continue
        kind.append(Entry(pathlib.Path(item.path), stat.st_size, stat.st_mtime))
    found.sort(key=lambda entry: entry.last_used, reverse=True)
    return found, partials


def _remove(path: pathlib.Path) -> bool:
    try:
        os.remove(path)
    except OSError:  # removed by another process first, or not ours to remove
        return False
    return True


def _remove_stale(partials: List[Entry]) -> None:
    old = time.time() - STALE_PARTIAL_SECONDS
    for partial in partials:
        if partial.last_used < old:
            _remove(partial.path)


def _evict(folder: pathlib.Path, keep: pathlib.Path) -> None:
    """Remove the least recently used entries until the folder's entries fit ``limit()``;
    ``keep`` (the entry just stored) stays."""
    try:
        most = limit()
    except ValueError as e:
        most = DEFAULT_LIMIT
        if LIMIT_ENV not in _warned:
            _warned.add(LIMIT_ENV)
            _log.warning("spatial_tf: %s The compile cache keeps to 4 GiB meanwhile.", e)
    found, partials = _scan(folder)
    _remove_stale(partials)
    if most is None:
        return
    total = sum(entry.size for entry in found)
    for entry in reversed(found):  # least recently used first
        if total <= most:
            break
        if entry.path != keep:
            _remove(entry.path)  # gone either way: removed here or by another process
            total -= entry.size
