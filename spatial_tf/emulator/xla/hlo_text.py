"""Read collectives out of XLA's HLO text: kind, result shape, bytes, originating TF op.

The one reader of HLO text: the compiled steps (XLA:CPU's and XLA:TPU's, both
``ProgramText``), the report, the step time and the planner read programs through it.

>>> line = ('  %all-gather.3 = f32[2,16,8]{2,1,0} all-gather(%p), channel_id=3, '
...         'dimensions={1}, metadata={op_type="Conv2D" op_name="model/conv/Conv2D"}')
>>> [(c.kind, c.shape, c.bytes, c.op_name, c.dimensions) for c in collectives(line)]
[('all-gather', 'f32[2,16,8]', 1024, 'model/conv/Conv2D', (1,))]
>>> shape_bytes("(f32[3,3], bf16[4])")
44
"""
import dataclasses
import re
from typing import Dict, List, Optional, Tuple

__all__ = ["Collective", "collectives", "op_names", "computations", "shape_bytes", "dims", "tuple_elements", "KINDS",
           "GATHER_KINDS", "element_bytes", "arrays", "INSTRUCTION", "ProgramText"]

# kind -> what it means in a spatially partitioned program
KINDS = {
    "collective-permute": "halo exchange between neighbouring cores",
    "all-gather": "resharding: pieces gathered into a bigger tensor",
    "all-to-all": "resharding: pieces exchanged between split axes",
    "all-reduce": "sums across cores (gradients, batch statistics, losses)",
    "reduce-scatter": "sums across cores, result left split",
}

# the kinds that put split pieces back together: where a split does not survive
GATHER_KINDS = ("all-gather", "all-to-all")

_BYTES = {
    "pred": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
    "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16,
}
# dtype (fp8 names such as f8e4m3fn included), dims, and the layout's minor-to-major order
_ARRAY = re.compile(r"\b([a-z]+\d*(?:e\d+m\d+\w*)?)\[([\d,]*)\](?:\{([\d,]*)[^}]*\})?")
# one instruction: ``[ROOT] %name = shape op(``
INSTRUCTION = re.compile(
    r"^\s*(?P<root>ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>.*?)\s+"
    r"(?P<op>[a-z][a-z0-9\-]*)\("
)
_COMPUTATION = re.compile(r"^\s*(?:ENTRY\s+)?%?(?P<name>[\w.\-]+)\s.*\{\s*$")
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_OPERAND = re.compile(r"%([\w.\-]+)")
_DIMENSIONS = re.compile(r"\bdimensions=\{([\d,]*)\}")


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective instruction of the partitioned program (sizes are per core);
    ``dimensions``: the axes an all-gather gathers (an all-to-all exchanges), as XLA
    prints them, () for other kinds or where not printed."""

    kind: str
    name: str
    shape: str
    bytes: int
    op_name: str
    dimensions: Tuple[int, ...] = ()


def element_bytes(dtype):
    """Bytes of one element of an HLO ``dtype`` (``f32`` 4, ``bf16`` 2, fp8 types 1).

    >>> element_bytes("bf16"), element_bytes("f8e4m3fn"), element_bytes("c128")
    (2, 1, 16)
    """
    return _BYTES.get(dtype, 1 if dtype.startswith("f8") else 4)


def arrays(shape):
    """``[(dtype, dims, minor_to_major or None), ...]`` of an HLO shape string.

    >>> arrays("(f32[2,3]{1,0}, s32[])")
    [('f32', (2, 3), (1, 0)), ('s32', (), None)]
    """
    found = []
    for dtype, sizes, layout in _ARRAY.findall(re.sub(r"/\*.*?\*/", "", shape)):
        sizes = tuple(int(d) for d in sizes.split(",") if d)
        order = tuple(int(d) for d in layout.split(",") if d) if layout else None
        found.append((dtype, sizes, order if order and len(order) == len(sizes) else None))
    return found


def shape_bytes(shape):
    """Bytes of an HLO shape string (a tuple counts all its arrays)."""
    total = 0
    for dtype, sizes, _ in arrays(shape):
        count = 1
        for d in sizes:
            count *= d
        total += count * element_bytes(dtype)
    return total


def dims(shape):
    """The dimensions of an HLO array shape string, [] for a tuple or a scalar.

    >>> dims("f32[4,3,256,256]{3,2,1,0}"), dims("(f32[2], s32[])")
    ([4, 3, 256, 256], [])
    """
    found = arrays(shape)
    return list(found[0][1]) if len(found) == 1 else []


def _strip_layout(shape):
    shape = re.sub(r"/\*.*?\*/", "", shape)  # /*index=5*/ in long tuples
    while True:
        stripped = re.sub(r"\{[^{}]*\}", "", shape)
        if stripped == shape:
            return shape.strip()
        shape = stripped


def tuple_elements(shape):
    """The top-level elements of a tuple shape, or None if ``shape`` is not a tuple.

    >>> tuple_elements("((f32[8]), f32[4], s32[])")
    ['(f32[8])', 'f32[4]', 's32[]']
    """
    shape = shape.strip()
    if not shape.startswith("("):
        return None
    elements, depth, current = [], 0, ""
    for ch in shape[1:-1]:
        if ch == "," and depth == 0:
            elements.append(current.strip())
            current = ""
            continue
        depth += {"(": 1, ")": -1, "[": 1, "]": -1}.get(ch, 0)
        current += ch
    if current.strip():
        elements.append(current.strip())
    return elements


def _start_result(op, shape):
    """The result part of an async ``*-start`` instruction's shape.

    ``all-reduce-start`` returns its result(s) directly. Every other start returns a
    tuple whose element 1 is the result: ``(operand, result)`` for all-gather-start,
    ``(operand, result, u32[], u32[])`` for collective-permute-start, ``((operands...),
    result, context...)`` for the async wrappers (all-to-all, reduce-scatter, async-start).
    """
    elements = tuple_elements(shape)
    if op == "all-reduce-start" or elements is None or len(elements) < 2:
        return shape
    return elements[1]


def _header(line):
    """The computation a line opens (``%name (params) -> shape {``), or None."""
    m = _COMPUTATION.match(line)
    head = re.sub(r"/\*.*?\*/", "", line).split("{", 1)[0]  # /*index=5*/ in long lists
    return m.group("name") if m and "=" not in head else None


def computations(hlo_text):
    """``(entry, {name: [instruction lines]})``: each computation of ``hlo_text`` with
    its instruction lines in program order (the schedule, in a scheduled module).

    >>> text = "%f (p: f32[]) -> f32[] {\\n  %p = f32[] parameter(0)\\n}\\n" \\
    ...        "ENTRY %main (a: f32[]) -> f32[] {\\n  ROOT %r = f32[] fusion(%a), calls=%f\\n}"
    >>> entry, bodies = computations(text)
    >>> entry, {name: len(lines) for name, lines in bodies.items()}
    ('main', {'f': 1, 'main': 1})
    """
    entry, current = None, None
    bodies: Dict[str, list] = {}
    for line in hlo_text.splitlines():
        name = _header(line)
        if name is not None:
            current = name
            bodies[current] = []
            if line.lstrip().startswith("ENTRY"):
                entry = current
        elif current is not None and INSTRUCTION.match(line):
            bodies[current].append(line)
    return entry, bodies


def _async_called(lines):
    """Computation name -> collective kind, for computations an ``async-start`` runs."""
    called = set()
    for line in lines:
        m = INSTRUCTION.match(line)
        if m and m.group("op") == "async-start":
            calls = _CALLS.search(line)
            if calls:
                called.add(calls.group(1))
    kinds: Dict[str, str] = {}
    current = None
    for line in lines:
        current = _header(line) or current
        m = INSTRUCTION.match(line)
        if current in called and m and m.group("op") in KINDS:
            kinds.setdefault(current, m.group("op"))
    return kinds


def collectives(hlo_text):
    """Every collective instruction in ``hlo_text``, in program order.

    Async pairs count once, at their ``*-start``, with the size of the result. A
    collective XLA's partitioner made without metadata takes the ``op_name`` of its first
    operand that has one (e.g. the optimizer update whose result it gathers):

    >>> line = '%cp = (f32[4,8]{1,0}, f32[4,8]{1,0}, u32[], u32[]) collective-permute-start(%x)'
    >>> [(c.kind, c.bytes) for c in collectives(line)]
    [('collective-permute', 128)]
    >>> text = ('%m = f32[2,8]{1,0} multiply(%a, %b), metadata={op_name="sgd/mul"}\\n'
    ...         '%g = f32[4,8]{1,0} all-gather(%m), dimensions={0}')
    >>> [c.op_name for c in collectives(text)]
    ['sgd/mul']
    """
    lines = hlo_text.splitlines()
    wrapped = _async_called(lines) if "async-start(" in hlo_text else {}
    found, current, named = [], None, op_names(lines)
    for line in lines:
        current = _header(line) or current
        m = INSTRUCTION.match(line)
        if not m or current in wrapped:  # a wrapped collective counts at its async-start
            continue
        op = m.group("op")
        if op in KINDS:
            kind, shape = op, _strip_layout(m.group("shape"))
        elif op.endswith("-start") and op[: -len("-start")] in KINDS:
            kind, shape = op[: -len("-start")], _start_result(op, _strip_layout(m.group("shape")))
        elif op == "async-start":
            calls = _CALLS.search(line)
            kind = wrapped.get(calls.group(1)) if calls else None
            if kind is None:
                continue  # an async call that is not a collective
            shape = _start_result(op, _strip_layout(m.group("shape")))
        else:
            continue
        found.append(Collective(kind, m.group("name"), shape, shape_bytes(shape),
                                named.get(m.group("name")) or _operand_name(line, m, named),
                                _dimensions(line, kind)))
    return found


def op_names(lines) -> dict:
    """Each instruction's TensorFlow ``op_name`` (its metadata), by instruction name, for
    the instructions that have one.

    >>> op_names(['  %c = f32[4]{0} convolution(%p), metadata={op_name="m/Conv2D"}',
    ...           '  ROOT %r = f32[4]{0} copy(%c)'])
    {'c': 'm/Conv2D'}
    """
    named = {}
    for line in lines:
        m = INSTRUCTION.match(line)
        own = _OP_NAME.search(line) if m else None
        if m and own:
            named[m.group("name")] = own.group(1)
    return named


def _dimensions(line, kind):
    """The ``dimensions={...}`` of an all-gather or all-to-all line, else ().

    >>> _dimensions("%g = f32[2,4]{1,0} all-gather(%p), dimensions={1}", "all-gather")
    (1,)
    """
    found = _DIMENSIONS.search(line) if kind in GATHER_KINDS else None
    return tuple(int(d) for d in found.group(1).split(",") if d) if found else ()


def _operand_name(line, match, named):
    """The ``op_name`` of the instruction's first operand that has one, else ""."""
    operands = line[match.end():].split("),")[0]
    return next((named[o] for o in _OPERAND.findall(operands) if o in named), "")


class ProgramText:
    """The partitioned program's text and the collectives read from it, read once: the
    base of a compiled step (``CompiledStep``, ``TpuCompiledStep``), which says how its
    text is read (``_read_hlo_text``)."""

    _hlo_text: Optional[str] = None
    _collectives: Optional[List[Collective]] = None

    def _read_hlo_text(self) -> str:
        raise NotImplementedError

    def hlo_text(self) -> str:
        """The partitioned, optimized program as XLA prints it (printed once)."""
        if self._hlo_text is None:
            self._hlo_text = self._read_hlo_text()
        return self._hlo_text

    def collectives(self) -> List[Collective]:
        """Every collective of the partitioned program, in program order, per core, with
        the TensorFlow op it came from (``op_name``); read from the HLO text once."""
        if self._collectives is None:
            self._collectives = collectives(self.hlo_text())
        return list(self._collectives)

    def gathers(self, min_bytes: int = 0) -> List[Collective]:
        """The all-gathers and all-to-alls of at least ``min_bytes`` per core."""
        return [c for c in self.collectives() if c.kind in GATHER_KINDS and c.bytes >= min_bytes]
