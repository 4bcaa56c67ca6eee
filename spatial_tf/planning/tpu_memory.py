"""An estimate of a program's per-core memory on TPU, from XLA:CPU's compiled HLO.

XLA:CPU stores an array densely. TPU stores arrays in tiles: the two minor-most
dimensions of the layout are padded to a whole tile (8 x 128 elements for 32-bit
types, 16 x 128 for 16-bit, 32 x 128 for 8-bit), so a volume with 8 to 32 channels in
the minor dimension takes 4 to 16 times its dense size (tensorflow/tensorflow#30803;
Cloud TPU's performance guide: "the feature dimension is padded to 128").

The padding model (an estimate, not TPU's own buffer assignment):

- every array keeps the layout XLA:CPU gave it (minor-to-major as in the HLO text);
  TPU's layout assignment may pick a different one, usually a less padded one, so the
  estimate leans high for tensors with few channels;
- rank >= 2: minor dimension rounded up to 128, second-minor to 8 (32-bit and wider),
  16 (16-bit) or 32 (8-bit and ``pred``); rank 1: one row, a (8|16|32) x 128 tile per
  128 elements; scalars unpadded;
- arguments and outputs: each entry parameter and result padded as above;
- temp: XLA:CPU's temp bytes times the size-weighted padding factor of the program's
  intermediate values (results of every instruction outside fused computations), since
  the CPU figure is what buffer assignment packed and the factor is how much bigger
  those values are in tiles;
- ``bf16=True``: float32 intermediate values are counted as bfloat16 (mixed precision:
  activations in bf16, weights and their updates in float32).

>>> padded_bytes("f32", (1, 32, 32, 32, 8), (4, 3, 2, 1, 0))  # 8 channels -> 128
16777216
>>> padded_bytes("f32", (1, 32, 32, 32, 8)) / (32 * 32 * 32 * 8 * 4)
16.0
>>> padded_bytes("bf16", (16, 128)), padded_bytes("f32", (3,)), padded_bytes("f32", ())
(4096, 4096, 4)
"""
import dataclasses
import re
from typing import Optional, Sequence

from spatial_tf.emulator.xla import INSTRUCTION as _INSTRUCTION, arrays, element_bytes

__all__ = ["padded_bytes", "TpuEstimate", "estimate", "parse_arrays"]

LANES = 128
_SUBLANES = {1: 32, 2: 16}  # else 8
_HEADER = re.compile(r"^\s*(?P<entry>ENTRY\s+)?%?(?P<name>[\w.\-]+)\s*\(.*\{\s*$")
_FUSED = re.compile(r"\bfusion\(.*?calls=%?([\w.\-]+)")
# instructions whose result is no new buffer (aliases or bookkeeping)
_NO_BUFFER = {"parameter", "tuple", "get-tuple-element", "bitcast", "constant",
              "partition-id", "replica-id", "after-all", "opt-barrier"}

# one reader of HLO shapes for the package: the emulator's (spatial_tf.emulator.xla.hlo_text)
parse_arrays = arrays


def padded_bytes(dtype: str, dims: Sequence[int], minor_to_major: Optional[Sequence[int]] = None) -> int:
    """Bytes of an array of ``dtype`` and ``dims`` in TPU tiles (see the module's model).

    ``minor_to_major`` is the HLO layout (default: the last dimension minor-most).
    """
    size = element_bytes(dtype)
    dims = [int(d) for d in dims]
    if not dims:
        return size
    sublanes = _SUBLANES.get(size, 8)
    if len(dims) == 1:
        return _round_up(dims[0], LANES) * sublanes * size
    order = list(minor_to_major) if minor_to_major else list(range(len(dims)))[::-1]
    minor, second = order[0], order[1]
    count = 1
    for axis, d in enumerate(dims):
        if axis == minor:
            d = _round_up(d, LANES)
        elif axis == second:
            d = _round_up(d, sublanes)
        count *= d
    return count * size


def _round_up(n, m):
    return -(-n // m) * m if n else 0


def _dense(found):
    total = 0
    for dtype, dims, _ in found:
        n = 1
        for d in dims:
            n *= d
        total += n * element_bytes(dtype)
    return total


def _padded(found, bf16=False):
    total = 0
    for dtype, dims, order in found:
        if bf16 and dtype == "f32":
            dtype = "bf16"
        total += padded_bytes(dtype, dims, order)
    return total


@dataclasses.dataclass(frozen=True)
class TpuEstimate:
    """TPU-estimated bytes per core (``argument``, ``output``, ``alias``, ``temp``,
    ``peak``) and the padding factors used (tiled / dense bytes)."""

    argument: int
    output: int
    alias: int
    temp: int
    peak: int
    argument_factor: float
    output_factor: float
    temp_factor: float
    bf16: bool


def estimate(hlo_text: str, cpu: dict, *, bf16: bool = False) -> TpuEstimate:
    """The TPU estimate for a compiled program's ``hlo_text`` and its XLA:CPU memory
    figures ``cpu`` (``argument``, ``output``, ``alias``, ``temp`` bytes per core)."""
    lines = hlo_text.splitlines()
    fused = {m.group(1) for line in lines for m in [_FUSED.search(line)] if m}
    params, results, values = [], [], []
    computation, entry = None, False
    for line in lines:
        header = _HEADER.match(line)
        if header and "=" not in line.split("(", 1)[0]:
            computation, entry = header.group("name"), bool(header.group("entry"))
            continue
        m = _INSTRUCTION.match(line)
        if m is None or computation in fused:
            continue
        found = arrays(m.group("shape"))
        op = m.group("op")
        if entry and op == "parameter":
            params += found
        elif entry and m.group("root"):
            results += found
        if op not in _NO_BUFFER:
            values += found
    arg_factor = _factor(params, _padded(params))
    out_factor = _factor(results, _padded(results))
    temp_factor = _factor(values, _padded(values, bf16))
    argument = round(cpu["argument"] * arg_factor)
    output = round(cpu["output"] * out_factor)
    alias = round(cpu["alias"] * min(arg_factor, out_factor))
    temp = round(cpu["temp"] * temp_factor)
    return TpuEstimate(argument, output, alias, temp, argument + output - alias + temp,
                       arg_factor, out_factor, temp_factor, bf16)


def _factor(found, padded):
    dense = _dense(found)
    return padded / dense if dense else 1.0
