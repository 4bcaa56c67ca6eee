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

``unfuse_batch_norm(model)`` switches tf_keras' fused batch norm (``FusedBatchNormV3``,
which XLA cannot partition: it gathers the whole activation on every core) to the unfused
form, which keeps the split and needs only an all-reduce of per-channel sums.
"""
import keras

from spatial_tf.annotate import split
from spatial_tf.halo_conv import HaloConv2D, HaloConv3D
from spatial_tf.spec import PartialTile, Replicate, Tile

__all__ = ["Split", "HaloConv2D", "HaloConv3D", "unfuse_batch_norm"]


def unfuse_batch_norm(model) -> list:
    """Make every fused batch norm layer of ``model`` (nested models and layers too) unfused.

    For tf_keras models (Model Garden's), whose ``BatchNormalization`` uses the fused
    kernel by default; the weights and the math are unchanged (the same normalization
    by batch statistics, and the same moving averages). Call it before the first
    (traced) step: a step already compiled keeps the kernel it was traced with. Keras 3's ``BatchNormalization`` is never fused: nothing changes.
    Returns the names of the layers changed.

    >>> import keras
    >>> model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.BatchNormalization()])
    >>> unfuse_batch_norm(model)
    []
    """
    if not hasattr(model, "trainable_weights"):
        raise TypeError(f"unfuse_batch_norm: got {type(model).__name__}; expected a Keras or "
                        f"tf_keras model (or layer).")
    changed, pending, seen = [], [model], set()
    while pending:  # the model, its layers, nested models' layers
        layer = pending.pop(0)
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        if "BatchNormalization" in type(layer).__name__ and getattr(layer, "fused", False) is not False:
            layer.fused = False  # None (decided at build) or True: both may pick the fused kernel
            changed.append(layer.name)
        pending.extend(getattr(layer, "layers", []))
        # layers a custom layer holds in its attributes (Model Garden's blocks keep their
        # batch norms in lists): tf_keras layers are tf.Modules, which list them all
        pending.extend(getattr(layer, "submodules", ()))
    return changed


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
