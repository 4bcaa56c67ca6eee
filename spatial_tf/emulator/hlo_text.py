"""Read collectives out of XLA's HLO text: kind, result shape, bytes, originating TF op.

>>> line = ('  %all-gather.3 = f32[2,16,8]{2,1,0} all-gather(%p), channel_id=3, '
...         'dimensions={1}, metadata={op_type="Conv2D" op_name="model/conv/Conv2D"}')
>>> [(c.kind, c.shape, c.bytes, c.op_name) for c in collectives(line)]
[('all-gather', 'f32[2,16,8]', 1024, 'model/conv/Conv2D')]
>>> shape_bytes("(f32[3,3], bf16[4])")
44
"""
import dataclasses
import re

__all__ = ["Collective", "collectives", "shape_bytes", "KINDS"]

# kind -> what it means in a spatially partitioned program
KINDS = {
    "collective-permute": "halo exchange between neighbouring cores",
    "all-gather": "resharding: pieces gathered into a bigger tensor",
    "all-to-all": "resharding: pieces exchanged between split axes",
    "all-reduce": "sums across cores (gradients, batch statistics, losses)",
    "reduce-scatter": "sums across cores, result left split",
}

_BYTES = {
    "pred": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
    "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16,
}
_ARRAY = re.compile(r"\b([a-z]+\d*(?:e\d+m\d+\w*)?)\[([\d,]*)\]")
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>\(.*?\)|\S+)\s+"
    r"(?P<op>" + "|".join(re.escape(k) for k in KINDS) + r")(?P<start>-start)?\("
)
_OP_NAME = re.compile(r'op_name="([^"]*)"')


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective instruction of the partitioned program (sizes are per core)."""

    kind: str
    name: str
    shape: str
    bytes: int
    op_name: str


def shape_bytes(shape):
    """Bytes of an HLO shape string (a tuple counts all its arrays)."""
    total = 0
    for dtype, dims in _ARRAY.findall(shape):
        count = 1
        for d in filter(None, dims.split(",")):
            count *= int(d)
        total += count * _BYTES.get(dtype, 1 if dtype.startswith("f8") else 4)
    return total


def _strip_layout(shape):
    return re.sub(r"\{[^{}]*\}", "", shape)


def collectives(hlo_text):
    """Every collective instruction in ``hlo_text``, in program order."""
    found = []
    for line in hlo_text.splitlines():
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        shape = _strip_layout(m.group("shape"))
        if m.group("start") and shape.startswith("("):
            # async start: (operands..., result...) - the result is the last element
            shape = _ARRAY.findall(shape)[-1]
            shape = f"{shape[0]}[{shape[1]}]"
        op_name = _OP_NAME.search(line)
        found.append(
            Collective(m.group("op"), m.group("name"), shape, shape_bytes(shape),
                       op_name.group(1) if op_name else "")
        )
    return found
