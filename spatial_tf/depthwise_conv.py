"""A depthwise convolution whose kernel gradient is never a channels x channels tensor.

TensorFlow computes a depthwise convolution's kernel gradient (``groups`` equal to the
input channels) as one convolution with ``batch_group_count`` equal to the channels.
XLA's CPU and TPU compilers expand that into a dense convolution whose result is
``window x channels x channels`` and keep its diagonal: at a video network's deep
levels (384 channels, a 5x3x3 window) that is 25 MiB for a kernel of 67 KiB, held whole
on every core however the activations are split. MoViNet-A0's fifteen depthwise kernels
make most of what stays whole per core in its train step (``docs/benchmarks.md``).

The same gradient is, for each example ``n``, a depthwise convolution of the padded
input ``x[n]`` with the output gradient ``g[n]`` as its kernel (dilated by the stride),
whose output is the window: ``dw[k, c] = sum_n sum_p x_pad[n, s * p + k, c] * g[n, p, c]``.
It needs no channels x channels tensor, and XLA's SPMD partitioner splits it as it
splits an ordinary kernel gradient (halo exchange, then an all-reduce of the window).
Where the activation is larger than the dense expansion (early levels: few channels,
many pixels) TensorFlow's own gradient costs less, so ``per_example_is_smaller``
chooses by the two sizes.

>>> import numpy as np
>>> x = tf.constant(np.arange(50.0).reshape(1, 5, 5, 2))
>>> g = tf.ones((1, 3, 3, 2), tf.float64)
>>> dw = depthwise_kernel_gradient(x, g, (3, 3, 1, 2), strides=2, padding="SAME")
>>> dw.shape, float(dw[1, 1, 0, 0])      # x[0, ::2, ::2, 0] summed
(TensorShape([3, 3, 1, 2]), 216.0)
"""
import contextlib
from typing import Callable, Sequence, Union

import tensorflow as tf

from spatial_tf import frames
from spatial_tf.update_order import after as _after

frames.register_exclusion(__file__)  # the user's line is never here

__all__ = ["conv_with_depthwise_kernel_gradient", "depthwise_kernel_gradient",
           "per_example_is_smaller"]


def per_example_is_smaller(x_shape: Sequence, kernel_shape: Sequence) -> bool:
    """Whether ``depthwise_kernel_gradient`` needs less memory than XLA's dense expansion
    of TensorFlow's gradient: the expansion holds ``window * channels * outputs`` values,
    the per-example form about one input-sized copy (``x_shape``'s elements). False when
    a size is unknown.

    >>> per_example_is_smaller((2, 8, 6, 6, 384), (5, 3, 3, 1, 384))   # a deep level
    True
    >>> per_example_is_smaller((2, 8, 96, 96, 24), (1, 5, 5, 1, 24))   # an early one
    False
    """
    sizes = list(x_shape) + list(kernel_shape)
    if any(s is None for s in sizes):
        return False
    channels, outputs = int(x_shape[-1]), int(kernel_shape[-1])
    window = 1
    for size in kernel_shape[:-2]:
        window *= int(size)
    activation = 1
    for size in x_shape:
        activation *= int(size)
    return window * channels * outputs > activation


def depthwise_kernel_gradient(x, g, kernel_shape: Sequence[int],
                              strides: Union[int, Sequence[int]] = 1, padding: str = "SAME"):
    """The kernel gradient of a depthwise convolution of ``x`` (``[N, *spatial, C]``;
    kernel ``[*window, 1, C * M]``, as Keras keeps a ``groups=C`` kernel) given its output
    gradient ``g``, as one depthwise convolution per example (see the module's text).
    Dilation 1 only."""
    rank = len(x.shape) - 2
    window = [int(k) for k in kernel_shape[:rank]]
    strides = [strides] * rank if isinstance(strides, int) else list(strides)
    padding = padding.upper()
    pads, crops = [[0, 0]], []
    for size, k, s, out in zip(x.shape[1:-1], window, strides, g.shape[1:-1]):
        needed = (int(out) - 1) * s + k       # the input rows the outputs read
        before = max(needed - int(size), 0) // 2 if padding == "SAME" else 0
        pads.append([before, max(needed - int(size) - before, 0)])
        crops.append(needed)
    x = tf.pad(x, pads + [[0, 0]])
    x = x[(slice(None),) + tuple(slice(0, n) for n in crops)]
    return tf.reshape(_per_example(x, g, strides), list(kernel_shape))


@tf.function(jit_compile=True)  # grouped convolutions: XLA's, TensorFlow's CPU has no 3D ones
def _per_example(x, g, dilations):
    """``sum_n conv(x[n], g[n] as the kernel)``, ``[1, *window, C * M]``."""
    total = None
    for n in range(int(x.shape[0])):
        kernel = tf.expand_dims(g[n], -2)       # [*out, 1, C * M]: the example's gradient
        term = tf.nn.convolution(x[n:n + 1], kernel, padding="VALID", dilations=dilations)
        total = term if total is None else total + term
    return total


def conv_with_depthwise_kernel_gradient(convolve: Callable, x, kernel,
                                        strides: Union[int, Sequence[int]] = 1,
                                        padding: str = "SAME"):
    """``convolve(x, kernel)`` (a depthwise convolution with these ``strides`` and
    ``padding``, e.g. a Keras ``Conv3D(groups=channels)``'s ``convolution_op``) with
    TensorFlow's input gradient and the kernel gradient of ``depthwise_kernel_gradient``
    (made to wait for the input's, ``update_order``) where ``per_example_is_smaller``;
    elsewhere ``convolve(x, kernel)`` with TensorFlow's gradients.

    >>> import numpy as np
    >>> x = tf.constant(np.random.default_rng(0).normal(size=(2, 3, 3, 8)))   # a deep level
    >>> w = tf.constant(np.random.default_rng(1).normal(size=(3, 3, 1, 8)))
    >>> conv = lambda x, w: tf.nn.convolution(x, w, padding="SAME")
    >>> @tf.function(jit_compile=True)   # grouped gradients: XLA, not TensorFlow's CPU kernels
    ... def difference(x, w):
    ...     with tf.GradientTape(persistent=True) as tape:
    ...         tape.watch(w)
    ...         ours, theirs = conv_with_depthwise_kernel_gradient(conv, x, w), conv(x, w)
    ...     return tf.reduce_max(tf.abs(tape.gradient(ours, w) - tape.gradient(theirs, w)))
    >>> float(difference(x, w)) < 1e-12
    True
    """
    if not per_example_is_smaller(x.shape, kernel.shape):
        return convolve(x, kernel)  # TensorFlow's gradients: the update order costs more here

    @tf.custom_gradient
    def conv(x, kernel):
        y = convolve(x, kernel)
        scope = None if tf.executing_eagerly() else f"gradient_tape/{y.op.name}/"

        def grad(g):
            with tf.name_scope(scope) if scope else contextlib.nullcontext():
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    again = convolve(x, kernel)
                dx = tape.gradient(again, x, output_gradients=g)
                dw = depthwise_kernel_gradient(x, g, kernel.shape, strides, padding)
            return dx, _after(dw, dx)

        return y, grad

    return conv(x, kernel)
