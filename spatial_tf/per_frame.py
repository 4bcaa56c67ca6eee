"""2D layers applied to each frame of a clip ``(batch, frames, height, width, channels)``
without folding the frames into the batch.

Folding them (``tf.reshape(x, [-1, h, w, c])``, einops' ``"b t h w c -> (b t) h w c"``)
makes XLA gather a clip split along its frames on every core, and Keras'
``TimeDistributed`` sends each frame to every core. These layers keep the 5-D shape, so
a split of the frames stays local, and compute what ``TimeDistributed`` of the 2D layer
computes:

- ``FrameConv2D``: a ``Conv3D`` with a ``(1, kh, kw)`` kernel; ``from_conv2d(conv)``
  converts a ``keras.layers.Conv2D``, weights included.
- ``FrameMaxPooling2D`` / ``FrameAveragePooling2D``: 3D pooling with a ``(1, ph, pw)``
  window.
- ``FrameResizing``: Keras' ``Resizing`` of each frame's height and width.

>>> import numpy as np
>>> clip = np.random.rand(2, 4, 8, 8, 3).astype("float32")
>>> tuple(FrameConv2D(5, 3, padding="same")(clip).shape)
(2, 4, 8, 8, 5)
>>> tuple(FrameMaxPooling2D()(clip).shape), tuple(FrameResizing(16, 12)(clip).shape)
((2, 4, 4, 4, 3), (2, 4, 16, 12, 3))
"""
import keras
import numpy as np
import tensorflow as tf

from spatial_tf import frames, resize
from spatial_tf.checks import check_int

frames.register_exclusion(__file__)  # the user's line is never here

__all__ = ["FrameConv2D", "FrameMaxPooling2D", "FrameAveragePooling2D", "FrameResizing"]

INTERPOLATIONS = ("bilinear", "nearest", "bicubic", "area", "lanczos3", "lanczos5")


def _pair(value, name, where):
    """``value`` (an int or two ints) as a tuple of two positive ints.

    >>> _pair(3, "kernel_size", "FrameConv2D"), _pair([1, 2], "strides", "FrameConv2D")
    ((3, 3), (1, 2))
    """
    values = (value, value) if isinstance(value, (int, np.integer)) else value
    if isinstance(values, (list, tuple)) and len(values) == 2:
        return tuple(check_int(v, name, f"{name}=(3, 3)", where=where) for v in values)
    raise ValueError(f"{where}: {name} is {value!r}; expected an int or two ints (height, "
                     f"width) of one frame. Fix: e.g. {name}=(3, 3); the frames axis "
                     f"is never mixed.")


def _channels_last(kwargs, where):
    """Drop ``data_format`` from ``kwargs``, refusing any but channels last."""
    data_format = kwargs.pop("data_format", None)
    if data_format not in (None, "channels_last"):
        raise ValueError(f"{where}: data_format is {data_format!r}; expected "
                         f"'channels_last' (batch, frames, height, width, channels). Fix: "
                         f"move the channels last: tf.transpose(x, [0, 2, 3, 4, 1]) for "
                         f"(batch, channels, frames, height, width).")


def _check_clip(shape, where, image_layer):
    """Refuse an input that is not a clip of rank 5."""
    if len(shape) != 5:
        raise ValueError(f"{where}: the input has shape {tuple(shape)}; expected a clip of "
                         f"rank 5, (batch, frames, height, width, channels). Fix: add the "
                         f"frames axis (x[:, None] for one frame), or use "
                         f"keras.layers.{image_layer} for images.")


def _two_d(config, keys):
    """``config`` with the frames axis (always 1) dropped from the tuples under ``keys``."""
    for key in keys:
        if config.get(key) is not None:
            config[key] = tuple(config[key])[1:]
    config.pop("data_format", None)
    return config


@keras.saving.register_keras_serializable(package="spatial_tf")
class FrameConv2D(keras.layers.Conv3D):
    """``keras.layers.Conv2D`` on each frame of a clip: a ``Conv3D`` whose kernel is
    ``(1, kh, kw, in, out)``, the ``Conv2D`` kernel with a leading 1. Arguments are
    ``Conv2D``'s (2D sizes; ``activation``, ``use_bias``, initializers... as keywords).

    >>> import numpy as np
    >>> conv = keras.layers.Conv2D(4, 3, padding="same")
    >>> _ = conv(np.zeros((1, 8, 8, 2)))
    >>> tuple(FrameConv2D.from_conv2d(conv).kernel.shape)
    (1, 3, 3, 2, 4)
    """

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid",
                 dilation_rate=(1, 1), groups=1, **kwargs):
        where = type(self).__name__
        _channels_last(kwargs, where)
        super().__init__(
            filters, (1,) + _pair(kernel_size, "kernel_size", where),
            strides=(1,) + _pair(strides, "strides", where), padding=padding,
            data_format="channels_last",
            dilation_rate=(1,) + _pair(dilation_rate, "dilation_rate", where),
            groups=groups, **kwargs)
        self.input_spec = None  # build names a wrong rank, with the fix

    def build(self, input_shape):
        _check_clip(input_shape, type(self).__name__, "Conv2D")
        super().build(input_shape)

    def get_config(self):
        return _two_d(super().get_config(), ("kernel_size", "strides", "dilation_rate"))

    @classmethod
    def from_conv2d(cls, conv, name=None):
        """The ``FrameConv2D`` with ``conv``'s settings and, once ``conv`` is built, its
        weights; named ``name`` (default ``frame_<conv's name>``)."""
        if not isinstance(conv, keras.layers.Conv2D):
            raise TypeError(f"FrameConv2D.from_conv2d: conv is a {type(conv).__name__}; "
                            f"expected a keras.layers.Conv2D. Fix: pass the Conv2D layer "
                            f"the clip's frames would go through.")
        config = conv.get_config()
        config["name"] = name or f"frame_{conv.name}"
        layer = cls.from_config(config)
        if conv.built:
            weights = conv.get_weights()
            layer.build((None, None, None, None, weights[0].shape[-2] * conv.groups))
            layer.set_weights([weights[0][None]] + weights[1:])
        return layer


class _FramePooling:
    """What both pooling layers share: 2D sizes in, 3D pooling of each frame."""

    _image_layer = ""

    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", **kwargs):
        pool, stride = self._frame_arguments(pool_size, strides, kwargs)
        super().__init__(pool, strides=stride, padding=padding,
                         data_format="channels_last", **kwargs)
        self.input_spec = None

    def _frame_arguments(self, pool_size, strides, kwargs):
        where = type(self).__name__
        _channels_last(kwargs, where)
        pool = _pair(pool_size, "pool_size", where)
        stride = pool if strides is None else _pair(strides, "strides", where)
        return (1,) + pool, (1,) + stride

    def build(self, input_shape):
        _check_clip(input_shape, type(self).__name__, self._image_layer)
        super().build(input_shape)

    def get_config(self):
        return _two_d(super().get_config(), ("pool_size", "strides"))


@keras.saving.register_keras_serializable(package="spatial_tf")
class FrameMaxPooling2D(_FramePooling, keras.layers.MaxPooling3D):
    """``keras.layers.MaxPooling2D`` on each frame of a clip (3D max pooling with a
    ``(1, ph, pw)`` window); ``FrameMaxPooling2D(**pool.get_config())`` converts one.

    >>> tuple(FrameMaxPooling2D(2)(np.zeros((1, 3, 8, 8, 2), "float32")).shape)
    (1, 3, 4, 4, 2)
    """

    _image_layer = "MaxPooling2D"


@keras.saving.register_keras_serializable(package="spatial_tf")
class FrameAveragePooling2D(_FramePooling, keras.layers.AveragePooling3D):
    """``keras.layers.AveragePooling2D`` on each frame of a clip (3D average pooling
    with a ``(1, ph, pw)`` window); ``FrameAveragePooling2D(**pool.get_config())``
    converts one.

    >>> tuple(FrameAveragePooling2D(2)(np.zeros((1, 3, 8, 8, 2), "float32")).shape)
    (1, 3, 4, 4, 2)
    """

    _image_layer = "AveragePooling2D"


@keras.saving.register_keras_serializable(package="spatial_tf")
class FrameResizing(keras.layers.Layer):
    """``keras.layers.Resizing(height, width, interpolation, antialias=...)`` on each
    frame of a clip, one axis at a time (every interpolation Keras offers is separable).

    A bilinear resize by exactly 2 or 1/2 (no antialiasing for 1/2) is
    ``spatial_tf.resize.double`` / ``halve``, local under a split of any axis (a
    one-pixel halo for ``double``). Any other size takes, for each output row (column),
    the few input rows (columns) Keras' resize weighs, with its weights: local under a
    split of the frames, but a split of height or width is gathered. Keras' cropping or
    padding to the aspect ratio is not offered.

    >>> x = np.arange(8.0, dtype="float32").reshape(1, 1, 2, 4, 1)
    >>> FrameResizing(4, 2)(x)[0, 0, :, :, 0].numpy().tolist()
    [[0.5, 2.5], [1.5, 3.5], [3.5, 5.5], [4.5, 6.5]]
    """

    def __init__(self, height, width, interpolation="bilinear", antialias=False, **kwargs):
        super().__init__(**kwargs)
        where = type(self).__name__
        self.height = check_int(height, "height", "FrameResizing(64, 64)", where=where)
        self.width = check_int(width, "width", "FrameResizing(64, 64)", where=where)
        if interpolation not in INTERPOLATIONS:
            raise ValueError(f"{where}: interpolation is {interpolation!r}; expected one of "
                             f"{', '.join(INTERPOLATIONS)} (Keras' Resizing). Fix: e.g. "
                             f"interpolation='bilinear'.")
        self.interpolation = interpolation
        self.antialias = bool(antialias)

    def build(self, input_shape):
        _check_clip(input_shape, type(self).__name__, "Resizing")
        if None in tuple(input_shape)[2:4]:
            raise ValueError(f"{type(self).__name__}: the input has shape "
                             f"{tuple(input_shape)}; expected a known height and width. "
                             f"Fix: give the clip's frames a static size.")
        super().build(input_shape)

    def call(self, inputs):
        x = tf.cast(inputs, self.compute_dtype)
        for axis, size in ((2, self.height), (3, self.width)):
            n = x.shape[axis]
            bilinear = self.interpolation == "bilinear"
            if size == 2 * n and bilinear:
                x = resize.double(x, [axis])
            elif 2 * size == n and bilinear and not self.antialias:
                x = resize.halve(x, [axis])
            elif size != n:
                x = _resample(x, axis, size, self.interpolation, self.antialias)
        return x

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[1], self.height, self.width, input_shape[4])

    def get_config(self):
        config = super().get_config()
        config.update(height=self.height, width=self.width,
                      interpolation=self.interpolation, antialias=self.antialias)
        return config


def _taps(size_in, size_out, interpolation, antialias):
    """``(index, weight)``, each ``[size_out, taps]``: the input positions Keras' resize
    of one axis from ``size_in`` to ``size_out`` weighs for each output, and the weights
    (read off the resize of the identity, so they are Keras' own).

    >>> index, weight = _taps(2, 4, "bilinear", False)
    >>> index.tolist(), weight.tolist()
    ([[0, 0], [0, 1], [0, 1], [1, 0]], [[1.0, 0.0], [0.75, 0.25], [0.25, 0.75], [1.0, 0.0]])
    """
    with tf.init_scope():  # a constant of the layer, computed once at tracing
        identity = np.eye(size_in, dtype="float32")[None, :, :, None]
        matrix = keras.ops.image.resize(identity, (size_out, size_in), interpolation,
                                        antialias=antialias, data_format="channels_last")
        matrix = np.asarray(keras.ops.convert_to_numpy(matrix))[0, :, :, 0]
    taps = max(int(np.count_nonzero(matrix, axis=1).max()), 1)
    index = np.zeros((size_out, taps), "int32")
    weight = np.zeros((size_out, taps), "float64")
    for row, values in enumerate(matrix):
        found = np.flatnonzero(values)
        index[row, :len(found)], weight[row, :len(found)] = found, values[found]
    return index, weight


def _resample(x, axis, size, interpolation, antialias):
    """``x`` resized along ``axis`` to ``size``: a weighted sum of gathered rows."""
    index, weight = _taps(int(x.shape[axis]), size, interpolation, antialias)
    along = [size if a == axis else 1 for a in range(x.shape.rank)]
    total = 0
    for tap in range(index.shape[1]):
        taken = tf.gather(x, index[:, tap], axis=axis)
        total += taken * tf.reshape(tf.constant(weight[:, tap], x.dtype), along)
    return total
