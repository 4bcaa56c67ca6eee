"""How long the TPU compiler took here before: a record beside the compile cache, read to
say how long a new compile should take.

A TPU compile that fits takes a minute to many minutes on a CPU machine, one that runs
out of memory seconds. Each finished compile appends one line to
``compile_times.jsonl`` in the cache folder (``compile_cache.directory()``): the target
generation, the cores, the program's size in bytes, whether it fitted and the seconds.
``expected`` answers from the fitting compiles of the same generation and core count
whose programs were of similar size (within a factor of 2): the median of the nearest
three. Lines are short and appended whole (``O_APPEND``), so processes sharing the folder
do not mix them; an unreadable line is skipped. ``compile_cache.clear`` removes the record
with the results.

>>> import os, tempfile
>>> os.environ["SPATIAL_TF_COMPILE_CACHE"] = tempfile.mkdtemp()
>>> for size, seconds in [(1000, 90.0), (1200, 110.0), (5000, 400.0)]:
...     record("v5e", 8, size, True, seconds)
>>> expected("v5e", 8, 1100)
Expected(seconds=100.0, compiles=2)
>>> expected("v5e", 4, 1100) is None   # no compile of 4 cores recorded
True
>>> del os.environ["SPATIAL_TF_COMPILE_CACHE"]
"""
import json
import math
import os
import statistics
from typing import NamedTuple, Optional

from spatial_tf.emulator.xla import compile_cache

__all__ = ["FILE", "Expected", "record", "expected", "expected_text"]

FILE = compile_cache.TIMES_FILE
SIMILAR = 2.0  # programs within this factor of size count as similar
NEAREST = 3


class Expected(NamedTuple):
    """The median seconds of ``compiles`` earlier fitting compiles of similar programs."""

    seconds: float
    compiles: int


def record(generation: str, cores: int, program_bytes: int, fits: bool,
           seconds: float) -> None:
    """Append one finished compile; nothing happens when the cache is off or its folder
    cannot be written (the compile's answer does not depend on it)."""
    folder = compile_cache.directory()
    if folder is None:
        return
    line = json.dumps({"generation": generation, "cores": int(cores),
                       "bytes": int(program_bytes), "fits": bool(fits),
                       "seconds": round(float(seconds), 2)}) + "\n"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def expected(generation: str, cores: int, program_bytes: int) -> Optional[Expected]:
    """How long a fitting compile of a program of ``program_bytes`` should take, from the
    nearest (at most three) similar fitting compiles recorded; None without any."""
    near = []
    for entry in _entries():
        if (entry.get("generation") == generation and entry.get("cores") == cores
                and entry.get("fits") and entry.get("bytes", 0) > 0):
            distance = abs(math.log(entry["bytes"] / max(program_bytes, 1)))
            if distance <= math.log(SIMILAR):
                near.append((distance, float(entry["seconds"])))
    if not near:
        return None
    seconds = [s for _, s in sorted(near)[:NEAREST]]
    return Expected(statistics.median(seconds), len(seconds))


def expected_text(found: Optional[Expected]) -> str:
    """The progress line's note: ``about 1 min 40 s if it fits (2 similar compiles)``.

    >>> expected_text(Expected(100.0, 2))
    'about 1 min 40 s if it fits, as 2 similar compiles took here'
    >>> expected_text(Expected(45.0, 1))
    'about 45 s if it fits, as 1 similar compile took here'
    >>> expected_text(None)
    ''
    """
    if found is None:
        return ""
    total = int(round(found.seconds))
    minutes, seconds = divmod(total, 60)
    when = f"{minutes} min {seconds} s" if minutes else f"{seconds} s"
    compiles = "1 similar compile" if found.compiles == 1 else \
        f"{found.compiles} similar compiles"
    return f"about {when} if it fits, as {compiles} took here"


def _entries():
    folder = compile_cache.directory()
    if folder is None:
        return
    try:
        with open(folder / FILE) as f:
            lines = f.readlines()
    except OSError:
        return
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            yield entry
