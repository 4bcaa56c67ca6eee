"""What fills a TPU program's temp memory at its peak, read from the TPU compiler's dump.

Set ``SPATIAL_TF_TPU_COMPILER_DUMP=DIR`` and compile for a TPU target (``report``,
``lower().compile()``, ``plan``): each TPU compile then runs anew (not read from the
compile cache) and XLA writes its dump under ``DIR/<step>-<N>cores-<random>/``.
``peak(folder)`` reads the buffer assignment and live ranges there and returns the temp
buffers live when the most bytes are: each with its instruction, shape, bytes and the TensorFlow op it came
from (the instruction's ``op_name`` metadata). ``by_op`` adds them up per op, so a
partitioned program's peak can be set beside the one-core program's
(``benchmarks/tpu_buffers.py``).

>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> with open(os.path.join(folder, "m.after_optimizations-buffer-assignment.txt"), "w") as f:
...     _ = f.write(_EXAMPLE_ASSIGNMENT)
>>> with open(os.path.join(folder, "m.after_optimizations-live-range.txt"), "w") as f:
...     _ = f.write(_EXAMPLE_LIVE_RANGE)
>>> with open(os.path.join(folder, "m.after_optimizations.txt"), "w") as f:
...     _ = f.write(_EXAMPLE_HLO)
>>> p = peak(folder)
>>> p.temp, p.peak, [b.name for b in p.buffers]
(3072, 2048, ['conv{}', 'pad{}'])
>>> by_op(p.buffers)
[('model/conv2d/Conv2D', 1024, 1), ('model/conv2d/Pad', 1024, 1)]
"""
import glob
import os
import re
from collections import defaultdict
from typing import Dict, List, NamedTuple, Tuple

from spatial_tf.emulator.xla import hlo_text

__all__ = ["DUMP_ENV", "Buffer", "Peak", "peak", "by_op"]

DUMP_ENV = "SPATIAL_TF_TPU_COMPILER_DUMP"
_SUFFIX = ".after_optimizations-buffer-assignment.txt"
_ALLOCATION = re.compile(r"^allocation \d+: size (\d+)(.*):$")
_VALUE = re.compile(r"^ value: <\d+ (\S+) @\d+> \(size=(\d+),offset=\d+\): (.*)$")
_LIVE = re.compile(r"^\s+(\S+\{[\d,]*\}):(\d+)-(\d+)$")
_NOT_TEMP = ("parameter", "constant", "thread-local", "maybe-live-out", "output shape")

_EXAMPLE_ASSIGNMENT = """allocation 0: size 4096, parameter 0, shape |f32[1024]| at ShapeIndex {}:
 value: <1 x @0> (size=4096,offset=0): f32[1024]
allocation 1: size 3072, preallocated-temp:
 value: <2 pad @0> (size=1024,offset=0): f32[256]
 value: <3 conv @0> (size=1024,offset=1024): f32[256]
 value: <4 relu @0> (size=1024,offset=2048): f32[256]
allocation 2: size 512, color 1, preallocated-temp:
 value: <5 scratch @1> (size=512,offset=0): f32[128]
"""
_EXAMPLE_LIVE_RANGE = """HloLiveRange (max 4):
  BufferLiveRange:
    x{}:0-4
    pad{}:1-2
    conv{}:2-3
    relu{}:3-4
"""
_EXAMPLE_HLO = """  %pad = f32[256] pad(%x), metadata={op_name="model/conv2d/Pad"}
  %conv = f32[256] convolution(%pad), metadata={op_type="Conv2D" op_name="model/conv2d/Conv2D"}
"""


class Buffer(NamedTuple):
    """One temp buffer: the instruction (and tuple index) that defines it, its shape as the
    compiler laid it out, its bytes, the TensorFlow op it came from ('' if unknown) and
    the schedule positions it is live between."""

    name: str
    shape: str
    size: int
    op_name: str
    live: Tuple[int, int]


class Peak(NamedTuple):
    """A compiled program's temp memory: ``temp`` bytes allocated (what the compiler's
    memory statistics report), ``peak`` bytes live at once (at schedule position ``at``),
    and the ``buffers`` live then, largest first."""

    module: str
    temp: int
    peak: int
    at: int
    buffers: List[Buffer]


def peak(folder: str) -> Peak:
    """The temp buffers at the peak of the largest program the TPU compiler dumped in
    ``folder`` (the step; a worker also dumps small helper programs).

    Raises:
      FileNotFoundError: no buffer assignment in ``folder`` (the message says how to get one).
    """
    found = [p for p in glob.glob(os.path.join(folder, "*" + _SUFFIX))
             if not p.endswith(".cpu_after_optimizations-buffer-assignment.txt")]
    if not found:
        raise FileNotFoundError(
            f"{folder}: no TPU buffer assignment (*{_SUFFIX}) here. Fix: set {DUMP_ENV} to a "
            f"folder and compile for a TPU target; each compile writes a folder of its own "
            f"under it.")
    return max((_read(path[:-len(_SUFFIX)]) for path in found), key=lambda p: p.temp)


def by_op(buffers: List[Buffer]) -> List[Tuple[str, int, int]]:
    """``(op_name, bytes, buffer count)`` per TensorFlow op, most bytes first."""
    total: Dict[str, List[int]] = defaultdict(lambda: [0, 0])
    for b in buffers:
        total[b.op_name][0] += b.size
        total[b.op_name][1] += 1
    return sorted(((op, n, count) for op, (n, count) in total.items()),
                  key=lambda row: (-row[1], row[0]))


def _read(prefix: str) -> Peak:
    with open(prefix + _SUFFIX) as f:
        values, temp = _temp_values(f)
    with open(prefix + ".after_optimizations-live-range.txt") as f:
        live = {m.group(1): (int(m.group(2)), int(m.group(3)))
                for m in map(_LIVE.match, f) if m}
    with open(prefix + ".after_optimizations.txt") as f:
        ops = hlo_text.op_names(f)
    end = max((e for _, e in live.values()), default=0)
    buffers = [Buffer(name, shape, size, ops.get(name.split("{")[0], ""),
                      live.get(name, (0, end))) for name, size, shape in values]
    at, most = _busiest(buffers, end)
    held = sorted((b for b in buffers if b.live[0] <= at <= b.live[1]),
                  key=lambda b: (-b.size, b.name))
    return Peak(os.path.basename(prefix), temp, most, at, held)


def _temp_values(lines):
    """``([(name, size, shape)], temp bytes)`` of the default memory's temp allocations."""
    values, temp, in_temp = [], 0, False
    for line in lines:
        line = line.rstrip("\n")
        allocation = _ALLOCATION.match(line)
        if allocation:
            tags = allocation.group(2)
            in_temp = "color " not in tags and not any(t in tags for t in _NOT_TEMP)
            temp += int(allocation.group(1)) if in_temp else 0
            continue
        value = _VALUE.match(line)
        if value and in_temp:
            name = value.group(1) if "{" in value.group(1) else value.group(1) + "{}"
            values.append((name, int(value.group(2)), value.group(3)))
    return values, temp


def _busiest(buffers: List[Buffer], end: int) -> Tuple[int, int]:
    """``(position, bytes)`` where the most bytes are live (the first such position)."""
    change = [0] * (end + 2)
    for b in buffers:
        change[b.live[0]] += b.size
        change[b.live[1] + 1] -= b.size
    best, at, running = -1, 0, 0
    for position in range(end + 1):
        running += change[position]
        if running > best:
            best, at = running, position
    return at, max(best, 0)
