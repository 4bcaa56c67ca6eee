"""Make a weight's in-place update wait for every read of the weight in the step.

An optimizer updates a weight in place (XLA aliases the parameter to the output), and
XLA orders instructions by their data only. A read of the weight that the update does
not depend on, such as a convolution's input gradient or a regularizer's ``L2Loss``
whose value reaches only the reported loss, may be scheduled after the update, so XLA's
copy insertion keeps a copy of the weight alive for it: weight-sized memory on every
core. Making the weight's gradient depend on each such read orders the update after it.

The helpers here add that dependency without changing any value: they add zero times a
scalar taken from the read. XLA does not fold ``0 * a`` in floating point (it would turn
a non-finite ``a`` into 0), so the dependency survives; a non-finite read makes the
gradient non-finite too, which an overflowing step already is.

>>> v = tf.Variable([3.0, 4.0])
>>> l2 = ordered_loss(lambda: tf.reduce_sum(tf.square(v)))
>>> with tf.GradientTape() as tape:
...     loss = l2()
>>> float(loss), tape.gradient(loss, v).numpy().tolist()
(25.0, [6.0, 8.0])
"""
import contextlib
from typing import Callable

import keras
import tensorflow as tf

from spatial_tf import frames

frames.register_exclusion(__file__)  # the user's line is never here

__all__ = ["after", "ordered_convolution", "ordered_call", "ordered_loss", "ordered_regularizer",
           "is_ordered"]

_MARK = "_spatial_tf_ordered"


def after(value: tf.Tensor, read: tf.Tensor) -> tf.Tensor:
    """``value``, made to depend on ``read`` without changing it.

    Adds zero times a scalar of ``read`` (the maximum of its first channel: a scalar
    all-reduce when ``read`` is split), so whatever waits for ``value`` waits for ``read``.

    >>> after(tf.constant([1.0, 2.0]), tf.constant([[5.0, 6.0]])).numpy().tolist()
    [1.0, 2.0]
    """
    read = tf.convert_to_tensor(read)
    probe = read if read.shape.rank == 0 else read[..., :1]
    return value + tf.zeros([], value.dtype) * tf.cast(tf.reduce_max(probe), value.dtype)


def ordered_convolution(convolve: Callable, x: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """``convolve(x, kernel)`` with TensorFlow's gradients, the kernel's made to wait
    for the input's (the kernel's last read in the step).

    >>> x, w = tf.ones((1, 4, 4, 1)), tf.ones((1, 1, 1, 2))
    >>> conv = lambda x, w: tf.nn.conv2d(x, w, strides=2, padding="SAME")
    >>> ordered_convolution(conv, x, w).shape
    TensorShape([1, 2, 2, 2])
    """
    return _ordered(convolve, x, kernel)


def ordered_call(call: Callable[[tf.Tensor], tf.Tensor], x: tf.Tensor) -> tf.Tensor:
    """``call(x)`` (a layer's call on one input) with TensorFlow's gradients, the
    gradients of the weights it reads made to wait for the input's: for layers with no
    ``convolution_op`` to wrap (transposed, depthwise, separable convolutions).

    >>> layer = keras.layers.Conv2DTranspose(2, 2, strides=2)
    >>> layer.build((1, 3, 3, 1))
    >>> x = tf.ones((1, 3, 3, 1))
    >>> with tf.GradientTape() as tape:
    ...     y = ordered_call(layer, x)
    >>> y.shape, [g.shape for g in tape.gradient(y, layer.trainable_variables)]
    (TensorShape([1, 6, 6, 2]), [TensorShape([2, 2, 2, 1]), TensorShape([2])])
    """
    return _ordered(call, x)


def _ordered(fn, x, *weights):
    """``fn(x, *weights)``, each weight's gradient (tensors in ``weights``, variables
    ``fn`` reads) made to wait for ``x``'s."""
    @tf.custom_gradient
    def ordered(x, *weights):
        with tf.GradientTape() as tape:
            tape.watch([x, *weights])
            y = fn(x, *weights)
        # where TensorFlow puts a gradient (gradient_tape/<op>/...), so a report can
        # trace the gradient's ops to this layer
        scope = None if tf.executing_eagerly() else f"gradient_tape/{y.op.name}/"

        def grad(g, variables=None):
            with tf.name_scope(scope) if scope else contextlib.nullcontext():
                dx, *dws = tape.gradient(y, [x, *weights, *(variables or [])],
                                         output_gradients=g)
                dws = [dw if dw is None or dx is None else after(dw, dx) for dw in dws]
            inputs = [dx, *dws[:len(weights)]]
            return (inputs, dws[len(weights):]) if variables else inputs

        return y, grad

    return ordered(x, *weights)


def ordered_loss(loss: Callable[[], tf.Tensor]) -> Callable[[], tf.Tensor]:
    """A zero-argument loss of weights (a regularizer's), whose weight gradients wait
    for its value, so the update waits for the loss's own read of each weight.

    Only for losses computed from variables alone (a weight regularizer): a tensor the
    loss captures from elsewhere would get no gradient through the returned callable.

    >>> v = tf.Variable(2.0)
    >>> float(ordered_loss(lambda: v * v)())
    4.0
    """
    if is_ordered(loss):
        return loss

    def ordered():
        @tf.custom_gradient
        def value_and_grad():
            with tf.GradientTape() as tape:
                value = loss()

            def grad(dy, variables=None):
                grads = tape.gradient(value, variables or [], output_gradients=dy)
                return [], [None if g is None else after(g, value) for g in grads]

            return value, grad

        return value_and_grad()

    setattr(ordered, _MARK, True)
    return ordered


def ordered_regularizer(regularizer: Callable) -> Callable:
    """``regularizer`` (a Keras 3 variable's), whose weight gradient waits for its value.

    Called with a tensor (Keras' stateless calls), it is ``regularizer`` unchanged.

    >>> import keras
    >>> v = keras.Variable([3.0, 4.0])
    >>> float(ordered_regularizer(keras.regularizers.L2(0.5))(v))
    12.5
    """
    if is_ordered(regularizer):
        return regularizer

    def ordered(x):
        if not isinstance(x, (tf.Variable, keras.Variable)):
            return regularizer(x)
        return ordered_loss(lambda: regularizer(x))()

    setattr(ordered, _MARK, True)
    return ordered


def is_ordered(loss: Callable) -> bool:
    """Whether ``loss`` came from ``ordered_loss`` or ``ordered_regularizer``.

    >>> is_ordered(ordered_loss(lambda: tf.constant(1.0))), is_ordered(len)
    (True, False)
    """
    return bool(getattr(loss, _MARK, False))

