"""What XLA:CPU allocates that XLA's TPU compiler does not, found in the CPU program.

The emulator's memory figures are XLA:CPU's buffer assignment. One difference from a
TPU's is large enough to change a verdict: TensorFlow computes a depthwise convolution's
kernel gradient (``groups`` equal to the channels) as a convolution with
``batch_group_count``, which XLA:CPU expands into a dense convolution whose result is
``channels x window x channels``, then keeps its diagonal. That buffer is whole on every
core (25 MiB for one 5x3x3 kernel of 384 channels; most of MoViNet-A0's per-core floor on
the emulator). XLA's TPU compiler keeps the grouped convolution as it is (MoViNet-A0's
step compiled for v5e holds its 15 ``batch_group_count`` convolutions and no such
buffer), so on a TPU that memory is not spent. ``notes`` says so in the report, with the
sizes, so a ratio inflated by it is not read as the TPU's.

>>> text = chr(10).join([
...     "  %convolution.3 = f32[384,5,3,3,384]{4,3,2,1,0} convolution(%a, %b), window={}",
...     "  %iota.1 = s32[5,3,3,384,384]{4,3,2,1,0} iota(), iota_dimension=4"])
>>> [(e.shape, e.bytes) for e in expanded_depthwise_gradients(text, [[5, 3, 3, 1, 384]])]
[('f32[384,5,3,3,384]', 26542080)]
"""
import dataclasses
import math
from typing import Iterable, List, Sequence

from spatial_tf.emulator.xla.hlo_text import INSTRUCTION, arrays, element_bytes
from spatial_tf.table import format_bytes

__all__ = ["Expansion", "expanded_depthwise_gradients", "notes"]


@dataclasses.dataclass(frozen=True)
class Expansion:
    """One depthwise kernel gradient XLA:CPU computes as a dense convolution."""

    shape: str  # the dense result, e.g. "f32[384,5,3,3,384]"
    bytes: int


def expanded_depthwise_gradients(hlo_text: str,
                                 variable_shapes: Iterable[Sequence[int]]) -> List[Expansion]:
    """The convolutions of ``hlo_text`` whose result is ``[channels, *window, outputs]``
    for a depthwise kernel among ``variable_shapes``, with the ``[*window, channels,
    outputs]`` iota that masks its diagonal: XLA's expansion of that kernel's gradient.
    A depthwise kernel is ``[*window, 1, channels]`` (``groups`` equal to the channels) or
    ``[*window, channels, multiplier]`` (``DepthwiseConv2D``)."""
    kernels = set()
    for shape in map(list, variable_shapes):
        if len(shape) >= 3 and shape[-2] == 1 and shape[-1] > 1:
            kernels.add((shape[-1], tuple(shape[:-2]), shape[-1]))
        if len(shape) >= 3 and shape[-2] > 1:
            kernels.add((shape[-2], tuple(shape[:-2]), shape[-2] * shape[-1]))
    if not kernels:
        return []
    convolutions, masks = [], set()
    for line in hlo_text.splitlines():
        match = INSTRUCTION.match(line)
        if match is not None and match.group("op") in ("convolution", "iota"):
            shape = arrays(match.group("shape"))
            if len(shape) != 1:
                continue
            [(dtype, sizes, _)] = shape
            if match.group("op") == "iota":
                masks.add(sizes)
            elif len(sizes) >= 3:
                convolutions.append((dtype, sizes))
    found = []
    for dtype, sizes in convolutions:
        # the expansion, and the iota mask XLA keeps its diagonal with: [*window, C, D]
        # (a regular kernel gradient may have the expansion's shape, never the mask)
        if ((sizes[0], sizes[1:-1], sizes[-1]) in kernels
                and sizes[1:-1] + (sizes[0], sizes[-1]) in masks):
            found.append(Expansion(f"{dtype}[{','.join(map(str, sizes))}]",
                                   math.prod(sizes) * element_bytes(dtype)))
    return found


def notes(hlo_text: str, variable_shapes: Iterable[Sequence[int]]) -> List[str]:
    """The report's lines on what only XLA:CPU allocates (empty when nothing is found)."""
    found = expanded_depthwise_gradients(hlo_text, variable_shapes)
    if not found:
        return []
    largest = max(found, key=lambda e: e.bytes)
    count = f"{len(found)} depthwise kernel gradient{'s' if len(found) > 1 else ''}"
    return [f"XLA:CPU computes {count} as dense channels x window x channels "
            f"convolutions (largest {largest.shape}, {format_bytes(largest.bytes)}), whole "
            f"on every core and in the unpartitioned step alike; XLA's TPU compiler keeps "
            f"them grouped, so a TPU does not spend this memory and the XLA:CPU temp above "
            f"overstates a TPU's. The TPU compiler's figures: report(..., target=\"v5e\") "
            f"(libtpu installed)."]
