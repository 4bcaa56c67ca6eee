"""What spatial_tf knows about each kind of Keras layer, in one table.

One record per kind: the Keras 3 and tf_keras classes that are of it (a layer is of the
first kind whose classes its class or a base class is named in), how
``partition_friendly`` changes it, the TensorFlow op types its forward and backward
passes produce, the remedy ``Emulator.report`` gives for a gather at those ops, and the
spatial_tf modules that build its ops once changed (each declares its frames as the
library's, ``spatial_tf.frames``). ``partition_friendly`` picks its rule from ``change``
and the report's remedies pick their text from ``remedy``: a new kind is one record here.

>>> kind_of(type("Conv3D", (), {})).change
'halo'
>>> [k.name for k in KINDS if "DepthwiseConv2dNative" in k.op_types]
['depthwise convolution', 'separable convolution']
>>> remedy_for_op("FusedBatchNormGradV3"), remedy_for_op("MatMul")
('fused batch norm', None)
"""
import dataclasses
from typing import Optional, Tuple

__all__ = ["LayerKind", "KINDS", "CHANGES", "REMEDIES", "kind_of", "remedy_for_op"]

CHANGES = ("halo", "ordered", "unfuse", "resize", "keep", "none")
"""What ``partition_friendly`` does to a kind: the halo form of a stride-1 convolution
(``halo_conv``; one convolution per group for a grouped one; other settings ordered),
TensorFlow's gradients ordered before the update (``update_order``), batch norm
unfused, a resize by integer factors computed as ``spatial_tf.resize`` computes it, kept as
it is with a ``Change`` saying why (its gradients keep the split), nothing (not even a
``Change``)."""

REMEDIES = ("convolution", "fused batch norm", "resize")
"""The remedies ``Emulator.report`` names for a gather at a kind's ops
(``spatial_tf/emulator``'s ``remedies``)."""

_CONV_OPS = ("Conv2D", "Conv3D", "Conv2DBackpropInput", "Conv3DBackpropInputV2",
             "Conv2DBackpropFilter", "Conv3DBackpropFilterV2")
_DEPTHWISE_OPS = ("DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
                  "DepthwiseConv2dNativeBackpropFilter")
_FUSED_BATCH_NORM_OPS = ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3",
                         "FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3")
_ORDER = ("spatial_tf.partition_friendly", "spatial_tf.update_order")


@dataclasses.dataclass(frozen=True)
class LayerKind:
    """One kind of layer.

    Attributes:
      name: what the kind is called (``"convolution"``).
      classes: Keras 3 / tf_keras class names; a layer whose class or a base class has
        one of these names is of this kind.
      change: what ``partition_friendly`` does to it, one of ``CHANGES``.
      op_types: the TensorFlow op types its forward and backward passes produce.
      remedy: the remedy ``Emulator.report`` gives for a gather at those ops (one of
        ``REMEDIES``), or None.
      modules: the spatial_tf modules that build its ops once ``partition_friendly``
        changed it (each registers its frames with ``spatial_tf.frames``).
    """

    name: str
    classes: Tuple[str, ...]
    change: str
    op_types: Tuple[str, ...] = ()
    remedy: Optional[str] = None
    modules: Tuple[str, ...] = ()


KINDS: Tuple[LayerKind, ...] = (  # first match wins: subclasses before their bases
    LayerKind("halo convolution", ("HaloConv2D", "HaloConv3D"), "none", _CONV_OPS,
              "convolution", ("spatial_tf.halo_conv",)),
    LayerKind("batch norm", ("BatchNormalization",), "unfuse", _FUSED_BATCH_NORM_OPS,
              "fused batch norm"),
    LayerKind("transposed convolution", ("Conv2DTranspose", "Conv3DTranspose"), "ordered",
              ("Conv2DBackpropInput", "Conv3DBackpropInputV2", "Conv2DBackpropFilter",
               "Conv3DBackpropFilterV2", "Conv2D", "Conv3D"), "convolution", _ORDER),
    LayerKind("resize", ("Resizing", "UpSampling2D", "UpSampling3D"), "resize",
              ("ResizeBilinear", "ResizeBilinearGrad", "ResizeNearestNeighbor",
               "ResizeNearestNeighborGrad", "ResizeArea", "ScaleAndTranslate",
               "ScaleAndTranslateGrad"), "resize",
              ("spatial_tf.resize", "spatial_tf.resize_layers")),
    LayerKind("depthwise convolution", ("DepthwiseConv2D", "DepthwiseConv1D"), "keep",
              _DEPTHWISE_OPS, "convolution"),
    LayerKind("separable convolution", ("SeparableConv2D", "SeparableConv1D"), "ordered",
              _DEPTHWISE_OPS + _CONV_OPS, "convolution", _ORDER),
    # groups > 1 too: one convolution per group, or (depthwise) kept as it is
    LayerKind("convolution", ("Conv2D", "Conv3D"), "halo", _CONV_OPS, "convolution",
              ("spatial_tf.halo_conv",) + _ORDER),
)


def kind_of(cls) -> Optional[LayerKind]:
    """The kind of a layer of class ``cls`` (its own name or a base class's), or None."""
    names = {klass.__name__ for klass in cls.__mro__}
    return next((kind for kind in KINDS if names.intersection(kind.classes)), None)


def remedy_for_op(op_type: str) -> Optional[str]:
    """The remedy for a gather at a TensorFlow op of type ``op_type``, or None when no
    kind produces it. Kinds that share an op type give it the same remedy (checked by
    the tests)."""
    return next((kind.remedy for kind in KINDS if op_type in kind.op_types), None)
