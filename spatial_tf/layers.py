"""Keras layers that apply a spec to an intermediate tensor of a model.

XLA's SPMD partitioner propagates the input's split through the model, but at some ops
(a reshape, a concatenation of differently split tensors, a head that mixes axes) it may
choose to reassemble or re-split activations. ``Split(spec)`` pins the split of the
tensor that passes through it, as ``spatial_tf.split`` does in a step function: under
a ``TPUStrategy`` or ``spatial_tf.Emulator`` the annotation takes effect; elsewhere it is
an identity.

>>> import keras
>>> inputs = keras.Input((16, 16, 16, 1))
>>> x = keras.layers.Conv3D(4, 3, padding="same")(inputs)
>>> x = Split([1, 2, 2, 2, 1], name="keep_2x2x2")(x)
>>> model = keras.Model(inputs, keras.layers.Conv3D(2, 1)(x))
>>> model.layers[2]
<Split name=keep_2x2x2, spec=[1, 2, 2, 2, 1]>

``HaloConv2D`` / ``HaloConv3D`` are Keras' convolutions (same arguments, weights and
results) whose backward pass keeps a split input unpadded, taking less memory per core
(``spatial_tf.halo_conv``); they also convolve a list of inputs as their channel
concatenation without building it.

``partition_friendly(model)`` changes a user's built Keras or tf_keras model in place so
its training step keeps the split: tf_keras' fused batch norm (``FusedBatchNormV3``, which
XLA cannot partition: it gathers the whole activation on every core) becomes the unfused
form, and stride-1 convolutions compute their kernel gradient as ``HaloConv*D`` does
(``spatial_tf.partition_friendly``). ``unfuse_batch_norm(model)`` does the first part only;
``keep_gradients_whole(optimizer)`` (or ``partition_friendly(model, optimizer=...)``) makes
an optimizer keep the gradients whole on every core, like the weights.

``FrameConv2D``, ``FrameMaxPooling2D``, ``FrameAveragePooling2D`` and ``FrameResizing``
apply a 2D layer to each frame of a clip ``(batch, frames, height, width, channels)``
without folding the frames into the batch, so a split of the frames stays local
(``spatial_tf.per_frame``); ``FrameConv2D.from_conv2d(conv)`` converts a ``Conv2D``.

``LocalResizing`` / ``LocalUpSampling2D`` / ``LocalUpSampling3D`` are Keras' ``Resizing``
/ ``UpSampling2D`` / ``UpSampling3D`` by integer factors (bilinear, nearest, area), the
same values computed so that XLA keeps the split (``spatial_tf.resize``);
``partition_friendly`` computes Keras' own layers so where the factors are integers.
"""
import keras

from spatial_tf import frames
from spatial_tf.annotate import split
from spatial_tf.halo_conv import HaloConv2D, HaloConv3D
from spatial_tf.partition_friendly import (
    Change,
    changed_layers,
    keep_gradients_whole,
    partition_friendly,
    unfuse_batch_norm,
)
from spatial_tf.per_frame import (
    FrameAveragePooling2D,
    FrameConv2D,
    FrameMaxPooling2D,
    FrameResizing,
)
from spatial_tf.resize_layers import LocalResizing, LocalUpSampling2D, LocalUpSampling3D
from spatial_tf.spec import PartialTile, Replicate, Tile

frames.register_exclusion(__file__)  # the user's line is never here

__all__ = ["Split", "HaloConv2D", "HaloConv3D", "MaskedBatchNormalization",
           "LocalResizing", "LocalUpSampling2D", "LocalUpSampling3D",
           "partition_friendly", "Change", "changed_layers", "unfuse_batch_norm",
           "keep_gradients_whole", "FrameConv2D", "FrameMaxPooling2D",
           "FrameAveragePooling2D", "FrameResizing"]


@keras.saving.register_keras_serializable(package="spatial_tf")
class MaskedBatchNormalization(keras.layers.BatchNormalization):
    """``keras.layers.BatchNormalization`` called with ``mask=`` (``(batch, *spatial)``, 1 on
    real voxels): its training statistics cover the real voxels only (Keras' masked
    moments), and its output carries no Keras mask, so the convolutions after it take
    none (Keras would warn and drop it). For zero-padded volumes of odd sizes; weights,
    names and results otherwise those of Keras' layer.

    >>> import numpy as np
    >>> norm = MaskedBatchNormalization(momentum=0.0)
    >>> x = np.array([[[1.0], [3.0], [0.0]]])           # the last voxel is padding
    >>> _ = norm(x, mask=np.array([[1.0, 1.0, 0.0]]), training=True)
    >>> float(norm.moving_mean.numpy()[0])
    2.0
    """

    def compute_mask(self, inputs, mask=None):
        return None


@keras.saving.register_keras_serializable(package="spatial_tf")
class Split(keras.layers.Layer):
    """Identity layer that annotates its input with ``spec`` (one tensor's split).

    Args:
      spec: the split of the tensor, batch axis included: a list of split counts
        (``[1, 2, 2, 2, 1]``), ``Tile(...)``, ``PartialTile(...)``, or ``None`` /
        ``Replicate()`` to replicate it.
      num_cores_per_replica: cores to annotate for when no TPUStrategy or Emulator is
        active (by default the product of ``spec``).

    The layer has no weights and keeps shape and dtype; it is registered with Keras, so
    ``keras.models.load_model`` restores it once ``spatial_tf.layers`` is imported. Invalid specs fail when the layer is called, naming the tensor's
    shape and the fix, as ``spatial_tf.split`` does.
    """

    def __init__(self, spec, num_cores_per_replica=None, **kwargs):
        super().__init__(**kwargs)
        self.spec = _to_config(spec)
        self.num_cores_per_replica = num_cores_per_replica
        self.supports_masking = True

    def call(self, inputs):
        return split(inputs, _from_config(self.spec), num_cores_per_replica=self.num_cores_per_replica)

    def compute_output_shape(self, input_shape):
        return input_shape

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(inputs.shape, dtype=inputs.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(spec=self.spec, num_cores_per_replica=self.num_cores_per_replica)
        return config

    def __repr__(self):
        return f"<Split name={self.name}, spec={self.spec}>"


def _to_config(spec):
    """A JSON-friendly form: a list of ints, ``{"partial": [...]}`` or None."""
    if spec is None or isinstance(spec, Replicate):
        return None
    if isinstance(spec, PartialTile):
        return {"partial": list(spec.dims)}
    if isinstance(spec, Tile):
        return list(spec.dims)
    if isinstance(spec, dict) and set(spec) == {"partial"}:
        return {"partial": [int(d) for d in spec["partial"]]}
    if isinstance(spec, (list, tuple)) and all(isinstance(d, int) and not isinstance(d, bool)
                                               for d in spec):
        return [int(d) for d in spec]
    raise TypeError(
        f"Split: spec is {spec!r}; expected one tensor's split: a list of split counts such as "
        f"[1, 2, 2, 2, 1], Tile(...), PartialTile(...), or None to replicate."
    )


def _from_config(config):
    if config is None:
        return Replicate()
    if isinstance(config, dict):
        return PartialTile(*config["partial"])
    return list(config)
