"""Seconds per step on a TPU, predicted from what XLA's TPU compiler wrote into the program.

The TPU compiler (libtpu, compile-only) leaves its own cost model's estimate on each
fusion, convolution and copy of the compiled program: ``"estimated_cycles"`` in the
instruction's ``backend_config``. ``step_time`` adds them up in program order (a loop's
body times its trip count, the longest branch of a conditional), turns cycles into
seconds with the generation's TensorCore clock, and prices each collective, which
carries no estimate, from its bytes per core and the generation's inter-chip links
(``tpu_generations.Timing``). A collective the compiler made asynchronous (a
``*-start`` / ``*-done`` pair) is hidden behind the work scheduled between the two;
only what sticks out is added.

Collectives are priced at first order: a halo exchange (collective-permute) sends its
bytes over one link; all-gather, reduce-scatter and all-to-all move ``(n-1)/n`` of the
gathered bytes over a bidirectional ring (two links); an all-reduce twice that. Link
latency, on-chip transfers between a chip's two TensorCores (v2, v3) and congestion are
left out; so are the input pipeline (infeed, host-to-device copies) and host callbacks,
which ``StepTime.left_out`` names when the program has them.

>>> text = '''ENTRY %main (p: f32[1024]) -> f32[1024] {
...   %p = f32[1024]{0} parameter(0)
...   %f = f32[1024]{0} fusion(%p), kind=kLoop, calls=%c, backend_config={"estimated_cycles":"938416"}
...   ROOT %cp = f32[1024]{0} collective-permute(%f), source_target_pairs={{0,1},{1,0}}
... }'''
>>> t = step_time(text, "v3", num_cores=2)
>>> round(t.seconds * 1e3, 3), {k: round(v * 1e6, 2) for k, v in t.parts.items()}
(1.0, {'elementwise and reductions': 1000.0, 'collective-permute': 0.04})
"""
import dataclasses
import json
import re
from typing import Dict, List, Optional, Tuple

from spatial_tf.emulator.xla.hlo_text import INSTRUCTION, KINDS, computations
from spatial_tf.emulator.xla.hlo_text import collectives as read_collectives
from spatial_tf.error import Error
from spatial_tf.tpu_generations import Generation, generation

__all__ = ["StepTime", "step_time", "NoStepTime", "COMPUTE_PARTS", "SOURCE",
           "seconds_text", "gradient_all_reduce"]

SOURCE = "XLA:TPU's cost model (estimated cycles) and the generation's clock and ICI links"

# what the cycles of one instruction are spent on, by what it computes
MATRIX = "convolutions and matmuls"
VECTOR = "elementwise and reductions"
COPIES = "layout copies"
COMPUTE_PARTS = (MATRIX, VECTOR, COPIES)

_CYCLES = re.compile(r'"estimated_cycles":"(\d+)"')
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_CALLS = re.compile(r"\bcalls=%?([\w.\-]+)")
_BODY = re.compile(r"\bbody=%?([\w.\-]+)")
_CONDITION = re.compile(r"\bcondition=%?([\w.\-]+)")
_BRANCHES = re.compile(r"\bbranch_computations=\{([^}]*)\}")
_TO_APPLY = re.compile(r"\bto_apply=%?([\w.\-]+)")
_GROUPS = re.compile(r"replica_groups=\{\{([\d,]*)\}")
_IOTA_GROUPS = re.compile(r"replica_groups=\[(\d+),(\d+)\]")
_OPERANDS = re.compile(r"%([\w.\-]+)")
_TARGET = re.compile(r'custom_call_target="([^"]*)"')
# work the step does that the compiled program does not time
_HOST = {"infeed": "infeed (the input pipeline's transfers to the device)",
         "outfeed": "outfeed (transfers back to the host)",
         "send": "host sends", "recv": "host receives",
         "send-done": "host sends", "recv-done": "host receives"}


class NoStepTime(Error, ValueError):
    """No step time can be given (the reason says why); nothing is estimated instead."""


@dataclasses.dataclass(frozen=True)
class StepTime:
    """A predicted TPU step time and where it goes.

    Attributes:
      seconds: the predicted time of one step of the compiled program.
      parts: seconds by part: the compiler's cycles by what they compute
        (``COMPUTE_PARTS``) and each collective kind's exposed time.
      hidden: seconds of collectives the compiler overlapped with compute (not in
        ``seconds``).
      generation: the generation's name; ``libtpu``: the compiler's version.
      num_cores: cores per replica the program was compiled for.
      left_out: what the prediction does not count, one line each.
    """

    seconds: float
    parts: Dict[str, float]
    hidden: float
    generation: str
    libtpu: str
    num_cores: int
    left_out: Tuple[str, ...] = ()

    @property
    def source(self) -> str:
        return f"{SOURCE} (TPU {self.generation}, libtpu {self.libtpu})"

    @property
    def compute_seconds(self) -> float:
        return sum(self.parts.get(p, 0.0) for p in COMPUTE_PARTS)

    @property
    def collective_seconds(self) -> float:
        return self.seconds - self.compute_seconds

    def dominant(self) -> str:
        """The part that takes the most time."""
        return max(self.parts, key=lambda part: self.parts[part]) if self.parts else ""

    def breakdown(self) -> str:
        """The parts, largest first, each at least 0.1% of the step; hidden collectives."""
        shown = [f"{k} {seconds_text(v)}" for k, v in
                 sorted(self.parts.items(), key=lambda kv: -kv[1])
                 if v >= self.seconds / 1000]
        if self.hidden > 0:
            shown.append(f"{seconds_text(self.hidden)} of collectives hidden behind compute")
        return ", ".join(shown)

    def __str__(self):
        text = f"{seconds_text(self.seconds)} per step ({self.breakdown()}); {self.source}"
        return text + (f"; not counted: {'; '.join(self.left_out)}" if self.left_out else "")


def seconds_text(value: float) -> str:
    """Seconds with their unit, three figures: ``0.742 s``, ``12.3 ms``, ``45.0 us``.

    >>> seconds_text(3.0217), seconds_text(0.7421), seconds_text(0.01234), seconds_text(4.5e-5)
    ('3.022 s', '0.742 s', '12.3 ms', '45.0 us')
    """
    if value >= 0.1:
        return f"{value:.3f} s"
    scaled, unit = (value * 1e3, "ms") if value >= 1e-3 else (value * 1e6, "us")
    decimals = 0 if scaled >= 100 else (1 if scaled >= 10 else 2)
    return f"{scaled:.{decimals}f} {unit}"


def step_time(hlo_text: str, target, *, num_cores: int, libtpu: str = "?") -> StepTime:
    """The ``StepTime`` of a program the TPU compiler compiled for ``target`` (a
    generation name or ``Generation``), partitioned over ``num_cores`` cores.

    Raises:
      NoStepTime: the generation's clock or links are not in its record, or the text has
        no cost estimates (not a program compiled by the TPU compiler).
    """
    gen = target if isinstance(target, Generation) else generation(target)
    timing = gen.timing
    if timing is None:
        raise NoStepTime(f"no step time for TPU {gen.name}: {gen.timing_missing}; "
                         f"spatial_tf gives none rather than guess.")
    entry, bodies = computations(hlo_text)
    if entry is None or not _CYCLES.search(hlo_text):
        raise NoStepTime("no step time: the program carries no estimated cycles (only a "
                         "program compiled by XLA's TPU compiler does).")
    walk = _Walk(bodies, timing)
    walk.computation(entry, 1.0)
    clock = timing.clock_hz
    parts = {k: v / clock for k, v in walk.cycles.items() if v > 0}
    for kind, seconds in walk.exposed.items():
        if seconds > 0:
            parts[kind] = seconds
    return StepTime(sum(parts.values()), parts, walk.hidden, gen.name, libtpu, num_cores,
                    tuple(sorted(walk.left_out)))


class _Walk:
    """Cycles and collective seconds of one program, computation by computation."""

    def __init__(self, bodies, timing):
        self.bodies = bodies
        self.timing = timing
        self.cycles: Dict[str, float] = {}
        self.exposed: Dict[str, float] = {}
        self.hidden = 0.0
        self.left_out: set = set()

    def computation(self, name, times):
        """Add computation ``name``, run ``times`` times; return the seconds of one run."""
        lines = self.bodies.get(name, [])
        pending: Dict[str, Tuple[str, float, float]] = {}  # start -> kind, seconds, cycles since
        total = 0.0
        for line in lines:
            m = INSTRUCTION.match(line)
            if m is None:  # computations() keeps instruction lines only
                continue
            op, inst = m.group("op"), m.group("name")
            found = _CYCLES.search(line)
            cycles = float(found.group(1)) if found else 0.0
            if cycles:
                for key, (kind, seconds, since) in pending.items():
                    pending[key] = (kind, seconds, since + cycles)
                self._add(self._part(line, op), cycles * times)
                total += cycles / self.timing.clock_hz
                continue
            if op in KINDS or op.endswith("-start") or op == "async-start":
                priced = self._collective(line)
                if priced is not None:
                    kind, seconds = priced
                    if op in KINDS:
                        self._expose(kind, seconds * times)
                        total += seconds
                    else:
                        pending[inst] = (kind, seconds, 0.0)
                    continue
            if op.endswith("-done") or op == "async-done":
                started = next((o for o in _OPERANDS.findall(line[m.end():]) if o in pending),
                               None)
                if started is not None:
                    kind, seconds, since = pending.pop(started)
                    covered = min(seconds, since / self.timing.clock_hz)
                    self.hidden += covered * times
                    self._expose(kind, (seconds - covered) * times)
                    total += seconds - covered
                    continue
            total += self._control_flow(line, op, times)
            if op in _HOST:
                self.left_out.add(_HOST[op])
            elif op == "custom-call" and _calls_host(line):
                self.left_out.add("host callbacks (custom-calls to the host)")
        for kind, seconds, _ in pending.values():  # a start with no done: count it whole
            self._expose(kind, seconds * times)
            total += seconds
        return total

    def _control_flow(self, line, op, times):
        if op == "while":
            body, condition = _BODY.search(line), _CONDITION.search(line)
            trip = _TRIP.search(line)
            n = int(trip.group(1)) if trip else 1
            if trip is None:
                self.left_out.add("loops of unknown trip count (counted once)")
            seconds = 0.0
            for found in (body, condition):
                if found:
                    seconds += self.computation(found.group(1), times * n)
            return n * seconds
        if op == "conditional":
            branches = _BRANCHES.search(line)
            names = [b.strip().lstrip("%") for b in branches.group(1).split(",")] \
                if branches else []
            if not names:
                return 0.0
            # the longest branch: cost each alone, then keep only its figures
            costs = [_Walk(self.bodies, self.timing).computation(b, 1.0) for b in names]
            longest = names[costs.index(max(costs))]
            self.left_out.add("conditionals (their longest branch counted)")
            return self.computation(longest, times)
        if op == "call":
            called = _TO_APPLY.search(line)
            return self.computation(called.group(1), times) if called else 0.0
        return 0.0

    def _part(self, line, op):
        if op in ("copy", "copy-start"):
            return COPIES
        if op in ("convolution", "dot"):
            return MATRIX
        called = _CALLS.search(line)
        if called:
            body = "\n".join(self.bodies.get(called.group(1), []))
            if " convolution(" in body or " dot(" in body:
                return MATRIX
        return VECTOR

    def _add(self, part, cycles):
        self.cycles[part] = self.cycles.get(part, 0.0) + cycles

    def _expose(self, kind, seconds):
        self.exposed[kind] = self.exposed.get(kind, 0.0) + seconds

    def _collective(self, line):
        """``(kind, seconds)`` of a collective instruction line, or None."""
        if " async-start(" in line:  # a wrapped collective: price the one it runs
            called = _CALLS.search(line)
            body = self.bodies.get(called.group(1), []) if called else []
            inner = [i for i in body if _op(i) in KINDS]
            return self._collective(inner[0]) if inner else None
        found = read_collectives(line)
        if not found:
            return None
        c = found[0]
        link = self.timing.ici_link_bandwidth
        if c.kind == "collective-permute":
            return c.kind, c.bytes / link
        n = _group_size(line)
        if n <= 1:
            return c.kind, 0.0
        ring = 2 * link  # a bidirectional ring over one torus axis
        if c.kind == "all-reduce":
            return c.kind, 2 * (n - 1) / n * c.bytes / ring
        if c.kind == "reduce-scatter":
            return c.kind, (n - 1) * c.bytes / ring
        return c.kind, (n - 1) / n * c.bytes / ring


def _calls_host(line):
    """Whether a custom-call runs on the host (its target names the host).

    >>> _calls_host('%c = f32[] custom-call(%x), custom_call_target="xla_python_host_callback"')
    True
    """
    target = _TARGET.search(line)
    return target is not None and "host" in target.group(1).lower()


def _op(line):
    """The opcode of an instruction line ("" if it is none)."""
    m = INSTRUCTION.match(line)
    return m.group("op") if m else ""


def gradient_all_reduce(gradient_bytes: int, num_replicas: int, target) -> float:
    """Seconds to sum ``gradient_bytes`` per replica over ``num_replicas`` data-parallel
    replicas (a bidirectional ring all-reduce over the generation's ICI links, priced as
    ``step_time`` prices a compiled all-reduce): the part of a data-parallel step that a
    program compiled for one replica does not hold.

    >>> round(gradient_all_reduce(136 * 10**6, 8, "v3") * 1e3, 2)   # RetinaNet's f32 grads
    1.19
    """
    gen = target if isinstance(target, Generation) else generation(target)
    if gen.timing is None:
        raise NoStepTime(f"no step time for TPU {gen.name}: {gen.timing_missing}.")
    if num_replicas <= 1:
        return 0.0
    return 2 * (num_replicas - 1) / num_replicas * gradient_bytes / (
        2 * gen.timing.ici_link_bandwidth)


def _group_size(line):
    """Devices in each group of a collective (``replica_groups``), 1 if none are listed.

    >>> _group_size("all-reduce(%a), replica_groups={{0,1,2,3},{4,5,6,7}}")
    4
    >>> _group_size("all-gather(%a), replica_groups=[2,4]<=[8]")
    4
    """
    listed = _GROUPS.search(line)
    if listed:
        return len([d for d in listed.group(1).split(",") if d])
    iota = _IOTA_GROUPS.search(line)
    return int(iota.group(2)) if iota else 1
