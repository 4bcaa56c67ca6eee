"""A strided convolution computed on the space-to-depth input, at stride 1.

A TPU lays an activation out with its channels on the 128 lanes of a vector register,
so an image or clip of 3 channels takes 128/3 = 43 times its values in memory wherever
the compiler keeps it in that layout (for instance the input held for the first
convolution's kernel gradient). Folding each ``s x s`` patch of a stride-``s``
convolution's input into the channels (space to depth) gives ``s**2`` times the channels
at ``1/s**2`` the pixels, and the convolution becomes a stride-1 one with a smaller
kernel built from the same weights: the same output, the same gradients, a quarter of
the padded input at stride 2. TPU image models use the same rewrite for their first
layer (``conv0_space_to_depth`` in the MLPerf TPU ResNet-50 and SSD, which fold in the
input pipeline; here the fold is a one-hot convolution inside the step).

For a spatial axis of size ``n`` (a multiple of the stride ``s``) with kernel size
``k`` and padding ``b`` before, output ``o[i] = sum_d x[s*i + d - b] w[d]``; writing
``d - b = s*q + p`` (``0 <= p < s``) reads input block ``i + q`` at offset ``p``, so the
new kernel is ``W'[q - q_min, p] = w[d]`` and the new convolution pads ``-q_min`` blocks
before and ``q_max`` after.

>>> import numpy as np
>>> x = tf.constant(np.random.default_rng(0).normal(size=(1, 8, 8, 3)))
>>> w = tf.constant(np.random.default_rng(1).normal(size=(3, 3, 3, 4)))
>>> y = strided_conv_by_space_to_depth(x, w, strides=2, padding="SAME")
>>> expected = tf.nn.conv2d(x, w, 2, "SAME")
>>> tuple(y.shape), float(tf.reduce_max(tf.abs(y - expected))) < 1e-12
((1, 4, 4, 4), True)
"""
import math
from typing import List, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from spatial_tf import frames

frames.register_exclusion(__file__)  # the user's line is never here

__all__ = ["strided_conv_by_space_to_depth", "space_to_depth_problem"]

# given explicitly: without it, TensorFlow's eager gradient of a Conv3D fails reading it
_CHANNELS_LAST = {1: "NWC", 2: "NHWC", 3: "NDHWC"}


def _same_padding(size: int, kernel: int, stride: int) -> int:
    """TensorFlow's "SAME" padding before the first element of an axis."""
    output = -(-size // stride)
    return max((output - 1) * stride + kernel - size, 0) // 2


def _blocks(kernel: int, stride: int, before: int) -> Tuple[int, int]:
    """``(q_min, q_max)``: the first and last input block a window reads, relative to the
    output's own block."""
    return (-before) // stride, (kernel - 1 - before) // stride


def space_to_depth_problem(input_shape: Sequence, kernel_size: Sequence[int],
                           strides: Sequence[int], padding: str) -> Union[str, None]:
    """Why ``strided_conv_by_space_to_depth`` cannot compute this convolution, or None.

    >>> space_to_depth_problem([2, 16, 16, 3], [3, 3], [2, 2], "SAME") is None
    True
    >>> space_to_depth_problem([2, 15, 16, 3], [3, 3], [2, 2], "SAME")
    'spatial axis 1 has size 15, not a multiple of its stride 2'
    """
    if padding.upper() not in ("SAME", "VALID"):
        return f"padding {padding!r} is neither 'same' nor 'valid'"
    if all(s == 1 for s in strides):
        return "the convolution has stride 1"
    for axis, (size, stride) in enumerate(zip(input_shape[1:-1], strides), start=1):
        if size is None or int(size) % stride:
            return f"spatial axis {axis} has size {size}, not a multiple of its stride {stride}"
    return None


def strided_conv_by_space_to_depth(x, kernel, strides: Union[int, Sequence[int]],
                                   padding: str):
    """``tf.nn.convolution(x, kernel, strides, padding)`` (channels last, 1 to 3 spatial
    axes, dilation 1) computed as a stride-1 convolution of ``x`` with each stride's
    patch folded into the channels, and a kernel made of ``kernel``'s weights.

    Gradients flow to ``x`` and ``kernel`` through the fold, the pads and the kernel's
    rearrangement, so they equal the strided convolution's. Raises ``ValueError``
    where ``space_to_depth_problem`` gives a reason.
    """
    x, kernel = tf.convert_to_tensor(x), tf.convert_to_tensor(kernel)
    rank = len(x.shape) - 2
    strides = [strides] * rank if isinstance(strides, int) else list(strides)
    sizes = list(kernel.shape[:rank])
    problem = space_to_depth_problem(x.shape, sizes, strides, padding)
    if problem:
        raise ValueError(f"strided_conv_by_space_to_depth: {problem}. Fix: use "
                         "tf.nn.convolution for this convolution.")
    before = ([_same_padding(int(n), k, s) for n, k, s in zip(x.shape[1:-1], sizes, strides)]
              if padding.upper() == "SAME" else [0] * rank)
    blocks = [_blocks(k, s, b) for k, s, b in zip(sizes, strides, before)]
    # "same" reads zeros past both ends; "valid" (b = 0, q_min = 0) reads no block past the last
    after = [hi if padding.upper() == "SAME" else 0 for _, hi in blocks]
    padded = tf.pad(_space_to_depth(x, strides),
                    [[0, 0]] + [[-lo, a] for (lo, _), a in zip(blocks, after)] + [[0, 0]])
    return tf.nn.convolution(padded, _folded_kernel(kernel, strides, before, blocks),
                             padding="VALID", data_format=_CHANNELS_LAST[rank])


def _space_to_depth(x, strides: List[int]):
    """``[b, n1, ..., c] -> [b, n1/s1, ..., s1 * ... * c]``, the patch offsets major.

    Computed as a stride-``s`` convolution with a one-hot kernel, not as reshapes and a
    transpose: those would hold the input with a last axis of ``c`` and a second-to-last
    of ``s``, which a TPU pads to its (8, 128) tiles (170 times the values for 2 x 3).
    """
    channels = int(x.shape[-1])
    folded = math.prod(strides) * channels
    one_hot = np.eye(folded, dtype=x.dtype.as_numpy_dtype).reshape(
        list(strides) + [channels, folded])
    return tf.nn.convolution(x, tf.constant(one_hot), strides=strides, padding="VALID",
                             data_format=_CHANNELS_LAST[len(strides)])


def _folded_kernel(kernel, strides: List[int], before: List[int],
                   blocks: List[Tuple[int, int]]):
    """The stride-1 kernel ``[q1, ..., s1, ..., c, f] -> [q1, ..., s1 * ... * c, f]``:
    ``W'[q - q_min, p] = w[s*q + p + b]``, zero where no weight falls."""
    rank = len(strides)
    pads = []
    for k, s, b, (lo, hi) in zip(kernel.shape[:rank], strides, before, blocks):
        # kernel index d = s*q + p + b sits at s*(q - lo) + p = d - b - s*lo; the
        # padded axis has (hi - lo + 1) * s entries
        start = -b - s * lo
        pads.append([start, (hi - lo + 1) * s - start - int(k)])
    padded = tf.pad(kernel, pads + [[0, 0], [0, 0]])
    shape = []
    for (lo, hi), s in zip(blocks, strides):
        shape += [hi - lo + 1, s]
    channels, filters = int(kernel.shape[-2]), int(kernel.shape[-1])
    split = tf.reshape(padded, shape + [channels, filters])
    order = [2 * a for a in range(rank)] + [2 * a + 1 for a in range(rank)]
    return tf.reshape(tf.transpose(split, order + [2 * rank, 2 * rank + 1]),
                      shape[0::2] + [channels * math.prod(strides), filters])
