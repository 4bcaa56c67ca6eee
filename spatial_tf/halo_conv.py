"""Convolutions whose backward pass keeps split activations unpadded.

Under spatial partitioning, XLA's SPMD partitioner gives each core's piece of a
convolution's input a halo (the neighbours' edge rows) before convolving. TensorFlow's
gradient of a convolution computes the kernel gradient from the *input* with that halo,
so XLA builds the padded copy in the forward pass and keeps it until the backward pass:
each full-resolution activation is then held once plain and once padded, and with
pieces 8 voxels thick a padded copy is 25% larger (95% for 8³ pieces split on three
axes). ``HaloConv2D`` / ``HaloConv3D`` compute the same kernel gradient with the roles of
the two operands swapped, so the halo is exchanged on the *output gradient*, which
exists only in the backward pass and is freed right after; the stored input stays
unpadded. Results, weights and gradients are those of ``keras.layers.Conv2D`` /
``Conv3D`` (equal to rounding; float64 agrees to about 1e-13).

A list of inputs is convolved as their concatenation along the channels, without
building it: a U-Net's skip connection then costs no extra full-resolution copy.

>>> import numpy as np
>>> layer = HaloConv3D(4, 3, padding="same")
>>> a, b = np.ones((1, 8, 8, 8, 2), "float32"), np.ones((1, 8, 8, 8, 3), "float32")
>>> tuple(layer([a, b]).shape), tuple(layer.kernel.shape)   # kernel of 2 + 3 channels
((1, 8, 8, 8, 4), (3, 3, 3, 5, 4))

Only stride 1, dilation 1 and ``groups=1`` take the unpadded path (the convolutions
that need a halo in a U-Net); other settings compute TensorFlow's own gradient.
``conv_by_groups`` computes a grouped convolution (``groups`` between 1 and the channels,
which XLA's SPMD partitioner gathers whole on every core) as one such convolution per
group; a depthwise one (one input channel per group) XLA partitions as it is.
"""
import contextlib
from typing import Callable, List, Optional, Sequence

import keras
import tensorflow as tf

from spatial_tf import frames
from spatial_tf.update_order import after as _after

frames.register_exclusion(__file__)  # the user's line is never here

__all__ = ["HaloConv2D", "HaloConv3D", "conv_keeping_input_unpadded", "conv_of_concatenation",
           "conv_by_groups"]


def conv_keeping_input_unpadded(x, kernel, padding: str):
    """``tf.nn.convolution(x, kernel, padding=padding)`` (stride 1, NHWC / NDHWC) whose
    kernel gradient exchanges halos of the output gradient instead of the input.

    The kernel gradient ``dW[k] = sum_p x[p + k - b] * g[p]`` (``b`` the padding before)
    equals, reversed along the spatial axes, the kernel gradient of a convolution with
    input ``g`` (padded by ``K - 1 - b`` before and ``K - 1 - a`` after) and output
    gradient ``x``; TensorFlow's ``Conv*DBackpropFilter`` computes it with ``g`` as the
    padded operand.

    >>> import numpy as np
    >>> x = tf.constant(np.arange(16.0).reshape(1, 4, 4, 1))
    >>> w = tf.ones((3, 3, 1, 1), tf.float64)
    >>> y = conv_keeping_input_unpadded(x, w, "SAME")
    >>> bool(tf.reduce_all(y == tf.nn.convolution(x, w, padding="SAME")))
    True
    """
    rank = len(x.shape) - 2
    if rank not in (2, 3):
        raise ValueError(f"conv_keeping_input_unpadded: x has shape {x.shape}; expected a "
                         f"batch of 2D (NHWC) or 3D (NDHWC) inputs. Fix: put the batch axis first and "
                         f"the channels last.")
    padding = padding.upper()

    @tf.custom_gradient
    def conv(x, kernel):
        y = tf.nn.convolution(x, kernel, padding=padding)
        # the gradient's ops go where TensorFlow puts a gradient (gradient_tape/<op>/...),
        # so a report can trace them to this convolution
        scope = None if tf.executing_eagerly() else f"gradient_tape/{y.op.name}/"

        def grad(g):
            with tf.name_scope(scope) if scope else contextlib.nullcontext():
                return _gradients(x, kernel, g, padding)

        return y, grad

    return conv(x, kernel)


def _gradients(x, kernel, g, padding: str):
    """``(dx, dw)`` of ``conv_keeping_input_unpadded``: dw from the output gradient's halo."""
    rank = len(x.shape) - 2
    backprop_input, backprop_filter = _BACKPROP[rank]
    ones = [1] * (rank + 2)
    dx = backprop_input(input_sizes=tf.shape(x), filter=kernel, out_backprop=g,
                        strides=ones, padding=padding)
    sizes = kernel.shape[:rank]
    if padding == "SAME" and all(size % 2 for size in sizes):
        g_padded, swapped_padding = g, "SAME"   # the same padding on both sides
    else:
        pads = [[0, 0]]
        for size in sizes:  # where the forward convolution padded x: (before, after)
            before, after = ((size - 1) // 2, size - 1 - (size - 1) // 2) \
                if padding == "SAME" else (0, 0)
            pads.append([size - 1 - before, size - 1 - after])
        g_padded, swapped_padding = tf.pad(g, pads + [[0, 0]]), "VALID"
    swapped = backprop_filter(
        input=g_padded, filter_sizes=list(sizes) + [kernel.shape[-1], kernel.shape[-2]],
        out_backprop=x, strides=ones, padding=swapped_padding)
    spatial = list(range(rank))
    dw = tf.transpose(tf.reverse(swapped, spatial), spatial + [rank + 1, rank])
    # the kernel's last read is dx: the kernel's in-place update must wait for it
    return dx, _after(dw, dx)


def conv_of_concatenation(pieces: Sequence, kernel, padding: str = "SAME", *,
                          convolve: Optional[Callable] = None,
                          channels: Optional[Sequence[int]] = None):
    """``conv_keeping_input_unpadded(concat(pieces, -1), kernel, padding)`` without building
    the concatenation: each piece is convolved with its slice of the kernel's input
    channels and the results are summed. ``convolve(x, kernel)`` replaces the
    convolution (e.g. a Keras layer's ``convolution_op``), ``channels`` each piece's
    channel count (default: its last axis).

    >>> import numpy as np
    >>> a, b = tf.ones((1, 4, 4, 2), tf.float64), tf.ones((1, 4, 4, 1), tf.float64)
    >>> w = tf.constant(np.arange(27.0).reshape(3, 3, 3, 1))
    >>> y = conv_of_concatenation([a, b], w, "SAME")
    >>> bool(tf.reduce_all(y == tf.nn.convolution(tf.concat([a, b], -1), w, padding="SAME")))
    True
    """
    if convolve is None:
        def convolve(x, k):
            return conv_keeping_input_unpadded(x, k, padding)
    if len(pieces) == 1:
        return convolve(pieces[0], kernel)
    channels = channels or [int(x.shape[-1]) for x in pieces]
    outputs, start = [], 0
    for x, count in zip(pieces, channels, strict=True):
        outputs.append(convolve(x, kernel[..., start:start + count, :]))
        start += count
    return tf.add_n(outputs)


def conv_by_groups(x, kernel, groups: int, padding: str = "SAME", *,
                   convolve: Optional[Callable] = None):
    """A grouped convolution of ``x`` (``kernel``: ``[*window, channels / groups, out]``,
    as Keras keeps it) as one convolution per group, the results concatenated along the
    channels: group ``j`` convolves input channels ``j * channels / groups ...`` with the
    kernel's output channels ``j * out / groups ...``, as TensorFlow's grouped
    convolution does. Each group is ``conv_keeping_input_unpadded(piece, kernel_piece,
    padding)``, or ``convolve(piece, kernel_piece)`` (e.g. a Keras layer's
    ``convolution_op``, strides and dilations included) when given.

    XLA's SPMD partitioner gathers a grouped convolution's split input whole on every
    core (forward and both gradients) unless each group has one input channel (depthwise,
    which it partitions with halo exchanges); one convolution per group keeps the split.

    >>> import numpy as np
    >>> x = tf.constant(np.arange(32.0).reshape(1, 2, 4, 4))
    >>> w = tf.constant(np.arange(36.0).reshape(3, 3, 2, 2))
    >>> y = conv_by_groups(x, w, 2)
    >>> bool(tf.reduce_all(y == tf.concat([
    ...     tf.nn.convolution(x[..., :2], w[..., :1], padding="SAME"),
    ...     tf.nn.convolution(x[..., 2:], w[..., 1:], padding="SAME")], -1)))
    True
    """
    channels, out = int(x.shape[-1]), int(kernel.shape[-1])
    if groups < 1 or channels != groups * int(kernel.shape[-2]) or out % groups:
        raise ValueError(
            f"conv_by_groups: x has {channels} channels and the kernel shape "
            f"{tuple(kernel.shape)}, which do not make {groups} groups; expected x's "
            f"channels = groups * kernel.shape[-2] and kernel.shape[-1] a multiple of "
            f"groups. Fix: pass the layer's groups and its kernel as Keras keeps it.")
    if convolve is None:
        def convolve(piece, kernel_piece):
            return conv_keeping_input_unpadded(piece, kernel_piece, padding)
    if groups == 1:
        return convolve(x, kernel)
    pieces, kernels = tf.split(x, groups, axis=-1), tf.split(kernel, groups, axis=-1)
    return tf.concat([convolve(p, k) for p, k in zip(pieces, kernels)], axis=-1)


_BACKPROP = {
    2: (tf.raw_ops.Conv2DBackpropInput, tf.raw_ops.Conv2DBackpropFilter),
    3: (tf.raw_ops.Conv3DBackpropInputV2, tf.raw_ops.Conv3DBackpropFilterV2),
}


class _HaloConv:
    """What ``HaloConv2D`` and ``HaloConv3D`` add to Keras' convolution."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.input_spec = None  # a list of inputs is accepted; build() checks shapes
        self._channels: List[int] = []

    def build(self, input_shape):
        shapes = _shapes(input_shape)
        rank = self.rank + 2
        for i, shape in enumerate(shapes):
            if len(shape) != rank or shape[-1] is None:
                raise ValueError(
                    f"{self.name}: input {i} has shape {tuple(shape)}; expected {rank} axes "
                    f"(batch, {self.rank} spatial, channels) with a known channel count. "
                    f"Fix: give each input its batch axis and channels last.")
            if tuple(shape[1:-1]) != tuple(shapes[0][1:-1]):
                raise ValueError(
                    f"{self.name}: input {i} has spatial shape {tuple(shape[1:-1])} but "
                    f"input 0 has {tuple(shapes[0][1:-1])}; the inputs are concatenated "
                    f"along the channels, so their spatial shapes must match. Fix: crop or "
                    f"pad them to one size first.")
        self._channels = [int(shape[-1]) for shape in shapes]
        super().build(tuple(shapes[0][:-1]) + (sum(self._channels),))
        self.input_spec = None

    def compute_output_shape(self, input_shape):
        shapes = _shapes(input_shape)
        return super().compute_output_shape(
            tuple(shapes[0][:-1]) + (sum(int(s[-1]) for s in shapes),))

    def call(self, inputs):
        inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        plain = (self.data_format != "channels_last" or self.groups != 1
                 or any(s != 1 for s in self.strides)
                 or any(d != 1 for d in self.dilation_rate))
        kernel = tf.convert_to_tensor(self.kernel)
        if plain:  # Keras' convolution (TensorFlow's gradient), one kernel slice per input
            y = conv_of_concatenation(inputs, kernel, convolve=self.convolution_op,
                                      channels=self._channels)
        else:
            y = conv_of_concatenation(inputs, kernel, self.padding)
        if self.use_bias:
            y = y + self.bias
        return self.activation(y) if self.activation is not None else y


def _shapes(input_shape) -> Sequence[Sequence]:
    """One shape per input: ``input_shape`` is one shape or a list of them."""
    if input_shape and isinstance(input_shape[0], (list, tuple)):
        return [tuple(s) for s in input_shape]
    return [tuple(input_shape)]


@keras.saving.register_keras_serializable(package="spatial_tf")
class HaloConv2D(_HaloConv, keras.layers.Conv2D):
    """``keras.layers.Conv2D`` (same arguments, weights and results) that takes one input
    or a list to concatenate along the channels, and whose backward pass keeps a split
    input unpadded (see the module docstring)."""


@keras.saving.register_keras_serializable(package="spatial_tf")
class HaloConv3D(_HaloConv, keras.layers.Conv3D):
    """``keras.layers.Conv3D`` (same arguments, weights and results) that takes one input
    or a list to concatenate along the channels, and whose backward pass keeps a split
    input unpadded (see the module docstring)."""
