"""U-Net for volumes (3D) and images (2D) in Keras 3, the model spatial partitioning is for.

The 3D U-Net of Çiçek et al. (2016): at each resolution level two 3x3(x3) convolutions
with batch norm and ReLU, then a 2x downsampling (max pooling or a stride-2
convolution); on the way up a stride-2 transposed convolution, concatenation with the
encoder's features at that level (cropped to fit when ``padding="valid"``) and two more
convolutions; a 1x1(x1) convolution gives per-voxel class logits. ``UNetOptions`` holds
how the blocks are built; the sizes are arguments.

>>> model = unet3d((16, 16, 16, 1), num_classes=2, depth=2, base_filters=4)
>>> model.output_shape
(None, 16, 16, 16, 2)
>>> unet((20, 20, 3), num_classes=1, depth=2, base_filters=4,
...      options=UNetOptions(padding="valid")).output_shape
(None, 4, 4, 1)
"""
import dataclasses
from typing import Any, Optional, Sequence, Tuple, Union

import keras

from spatial_tf.checks import check_int, fold_keywords
from spatial_tf.halo_conv import HaloConv2D, HaloConv3D
from spatial_tf.layers import MaskedBatchNormalization
from spatial_tf.models._option_checks import check_flag, check_fraction, check_options_type
from spatial_tf.models.precision import output_dtype, resolve_dtype_policy
from spatial_tf.models.sizes import output_size, valid_sizes
from spatial_tf.models.unet3d_presets import ModelGardenUNetOptions, build_preset, check_preset
from spatial_tf.table import plural

__all__ = ["unet3d", "unet", "UNetOptions", "output_size"]

_LAYERS = {
    2: (keras.layers.Conv2D, keras.layers.Conv2DTranspose, keras.layers.MaxPooling2D,
        keras.layers.Cropping2D),
    3: (keras.layers.Conv3D, keras.layers.Conv3DTranspose, keras.layers.MaxPooling3D,
        keras.layers.Cropping3D),
}
_HALO_CONV = {2: HaloConv2D, 3: HaloConv3D}

DTypePolicy = Optional[Union[str, keras.DTypePolicy]]


@dataclasses.dataclass(frozen=True)
class UNetOptions:
    """How ``unet`` and ``unet3d`` build their blocks; the sizes are arguments of those.

    Attributes:
      batch_norm: batch norm after every 3x3 convolution; convolutions feeding batch norm
        (and the transposed ones, whose bias batch norm would cancel) then have no bias.
      padding: ``"same"`` (output size = input size) or ``"valid"`` (the original
        U-Net: every convolution shrinks its input, skips are center-cropped).
      downsample: ``"pool"`` (2x max pooling) or ``"conv"`` (stride-2 3x3 convolution).
      conv: ``"halo"`` (``spatial_tf.layers.HaloConv3D`` / ``HaloConv2D``: Keras'
        convolution whose backward pass keeps split activations unpadded, the skip
        concatenation folded into the first decoder convolution; less memory per core
        when split, the same results and weights) or ``"keras"`` (``keras.layers.Conv3D``
        after a ``Concatenate`` layer: the layer structure of checkpoints written
        before ``"halo"`` existed).
      norm_momentum: batch norm's moving-average momentum (Keras' default 0.99 needs a few
        hundred steps before inference-mode statistics settle; 0.9 suits short runs).
      masked_batch_norm: the model takes a second input, ``mask`` (``(batch, *spatial)``,
        1 on real voxels, 0 on padding), and every batch norm computes its training
        statistics over the real voxels only (Keras' masked moments; the mask is max-pooled
        to each level's resolution), so zero padding of odd-sized volumes does not shift
        them. Needs ``batch_norm`` and ``"same"`` padding. ``spatial_tf.train``'s steps
        pass a batch's mask to such a model (``spatial_tf.steps.run_model``). The weights
        are the plain model's, but the mask's layers shift the layer positions checkpoints
        are keyed by: a checkpoint restores into a model built with the same setting.

    >>> UNetOptions(padding="valid", norm_momentum=0.9).conv
    'halo'
    >>> UNetOptions(downsample="stride")
    Traceback (most recent call last):
    ...
    ValueError: UNetOptions: downsample is 'stride'; expected 'pool' (2x max pooling) or 'conv' (a stride-2 3x3 convolution). Fix: e.g. UNetOptions(downsample='pool').
    """

    batch_norm: bool = True
    padding: str = "same"
    downsample: str = "pool"
    conv: str = "halo"
    norm_momentum: float = 0.99
    masked_batch_norm: bool = False

    def __post_init__(self):
        where = "UNetOptions"
        check_flag(self.batch_norm, where, "batch_norm",
                   "UNetOptions(batch_norm=False) leaves batch norm out; else leave the default")
        if self.padding not in ("same", "valid"):
            raise ValueError(
                f"UNetOptions: padding is {self.padding!r}; expected 'same' (output size = "
                f"input size) or 'valid' (every convolution shrinks its input, as in the "
                f"original U-Net). Fix: e.g. UNetOptions(padding='same').")
        if self.downsample not in ("pool", "conv"):
            raise ValueError(
                f"UNetOptions: downsample is {self.downsample!r}; expected 'pool' (2x max "
                f"pooling) or 'conv' (a stride-2 3x3 convolution). Fix: e.g. "
                f"UNetOptions(downsample='pool').")
        if self.conv not in ("halo", "keras"):
            raise ValueError(
                f"UNetOptions: conv is {self.conv!r}; expected 'halo' (spatial_tf's HaloConv "
                f"layers, the default) or 'keras'. Fix: UNetOptions(conv='keras') rebuilds "
                f"the layer structure of checkpoints written before 'halo' existed; else "
                f"leave the default.")
        check_fraction(self.norm_momentum, where, "norm_momentum",
                       "e.g. UNetOptions(norm_momentum=0.99) (Keras' default), or 0.9 for "
                       "short runs")
        check_flag(self.masked_batch_norm, where, "masked_batch_norm",
                   "UNetOptions(masked_batch_norm=True) keeps padding out of batch norm's "
                   "statistics; else leave the default")
        if self.masked_batch_norm and (not self.batch_norm or self.padding != "same"):
            raise ValueError(
                f"UNetOptions: masked_batch_norm=True with batch_norm={self.batch_norm}, "
                f"padding={self.padding!r}; expected batch_norm=True and padding='same' (the "
                f"mask is pooled level by level, which 'valid' convolutions would shrink "
                f"away from). Fix: UNetOptions(masked_batch_norm=True, batch_norm=True, "
                f"padding='same'), or leave masked_batch_norm False.")


def unet3d(input_shape: Sequence[int] = (64, 64, 64, 1), num_classes: int = 2,
           depth: Optional[int] = None, base_filters: Optional[int] = None, *,
           preset: Optional[str] = None,
           options: Optional[Union[UNetOptions, ModelGardenUNetOptions]] = None,
           dtype_policy: DTypePolicy = None, name: Optional[str] = None,
           **deprecated: Any) -> keras.Model:
    """A 3D U-Net for ``(depth, height, width, channels)`` volumes; see ``unet``.

    ``depth`` and ``base_filters`` default to 3 and 8. ``preset="model_garden"`` builds
    Model Garden's volumetric U-Net instead (4 levels, 32 base filters unless given;
    ``options`` is then a ``ModelGardenUNetOptions``; ``spatial_tf.models.unet3d_presets``
    lists what the preset sets). ``deprecated``: the fields of the options class as
    keywords, as earlier releases took them (each warns with a ``DeprecationWarning``).

    >>> unet3d((8, 8, 8, 1), depth=2, base_filters=4, preset="model_garden",
    ...        options=ModelGardenUNetOptions(upsample="nearest")).output_shape
    (None, 8, 8, 8, 2)
    """
    if len(input_shape) != 4:
        raise ValueError(
            f"unet3d: input_shape is {tuple(input_shape)}; expected 4 sizes (depth, "
            f"height, width, channels), e.g. (64, 64, 64, 1). Use unet() for 2D images."
        )
    if preset is not None:
        check_preset(preset, options, deprecated)
        garden = fold_keywords("unet3d", deprecated,
                               {"options": (ModelGardenUNetOptions, options)})["options"]
        return build_preset(preset, input_shape, num_classes, depth, base_filters, garden,
                            dtype_policy, name)
    check_options_type(options, UNetOptions, "unet3d", "unet3d(..., options=UNetOptions(...)); "
                       "ModelGardenUNetOptions go with preset='model_garden'")
    folded = fold_keywords("unet3d", deprecated, {"options": (UNetOptions, options)})["options"]
    return unet(input_shape, num_classes, 3 if depth is None else depth,
                8 if base_filters is None else base_filters, options=folded,
                dtype_policy=dtype_policy, name=name)


def unet(input_shape: Sequence[int], num_classes: int = 2, depth: int = 3,
         base_filters: int = 8, *, options: Optional[UNetOptions] = None,
         dtype_policy: DTypePolicy = None, name: Optional[str] = None,
         **deprecated: Any) -> keras.Model:
    """A U-Net for 2D ``(h, w, c)`` or 3D ``(d, h, w, c)`` inputs.

    Args:
      input_shape: spatial sizes then channels, without the batch axis.
      num_classes: channels of the output logits.
      depth: resolution levels (``depth - 1`` downsamplings); filters double per level
        starting at ``base_filters``.
      options: how the blocks are built (``UNetOptions()``: batch norm, ``"same"``
        padding, max pooling, ``HaloConv`` layers).
      dtype_policy: Keras dtype policy of every layer but the logits, e.g.
        ``"mixed_bfloat16"`` (float32 variables, bfloat16 compute); the logits layer
        computes in the variable dtype (float32), so the output is float32. None:
        ``"mixed_bfloat16"`` under a ``TPUStrategy``, else Keras' global policy (float32
        unless set).
      deprecated: ``padding=`` and the other fields of ``UNetOptions`` as keywords, as
        earlier releases took them (each warns with a ``DeprecationWarning``).

    Raises:
      ValueError: a bad size, or spatial sizes that do not survive the downsamplings
        (the message gives the sizes that do).

    >>> unet((16, 16, 3), num_classes=4, depth=2, base_filters=4,
    ...      options=UNetOptions(downsample="conv")).output_shape
    (None, 16, 16, 4)
    """
    check_options_type(options, UNetOptions, "unet", "unet(..., options=UNetOptions(...))")
    options = fold_keywords("unet", deprecated, {"options": (UNetOptions, options)})["options"]
    input_shape = _check_sizes(tuple(input_shape), num_classes, depth, base_filters, options)
    policy = resolve_dtype_policy(dtype_policy, "unet")
    layers = _UNetLayers(len(input_shape) - 1, policy, options)
    inputs = keras.Input(input_shape, dtype=policy.variable_dtype, name="image")
    masks = _level_masks(input_shape[:-1], depth) if options.masked_batch_norm else None
    x, skips = inputs, []
    for level in range(depth - 1):
        x = layers.block(x, base_filters * 2**level, f"down{level}", masks and masks[level])
        skips.append(x)
        x = layers.downsample(x, base_filters * 2**level, f"down{level}")
    x = layers.block(x, base_filters * 2 ** (depth - 1), "bottom", masks and masks[-1])
    for level in reversed(range(depth - 1)):
        x = layers.upsample(x, skips[level], base_filters * 2**level, f"up{level}",
                            masks and masks[level])
    logits = layers.logits(x, num_classes)
    model_inputs = inputs if masks is None else [inputs, masks[0]]
    return keras.Model(model_inputs, logits, name=name or f"unet{layers.ndim}d")


def _level_masks(spatial: Tuple[int, ...], depth: int) -> list:
    """The ``mask`` input and its max-pooled copies at each lower level: a coarse voxel
    is real when any voxel it pools is."""
    ndim = len(spatial)
    mask = keras.Input(spatial, dtype="float32", name="mask")
    masks = [mask]
    for level in range(1, depth):
        sizes = tuple(s // 2**level for s in spatial)
        x = keras.layers.Reshape(tuple(s // 2 ** (level - 1) for s in spatial) + (1,),
                                 dtype="float32", name=f"mask{level}_channel")(masks[-1])
        x = _LAYERS[ndim][2](2, dtype="float32", name=f"mask{level}_pool")(x)
        masks.append(keras.layers.Reshape(sizes, dtype="float32", name=f"mask{level}")(x))
    return masks


def _check_sizes(input_shape: Tuple[int, ...], num_classes: int, depth: int,
                 base_filters: int, options: UNetOptions) -> Tuple[int, ...]:
    """``input_shape`` after checking it and the sizes ``unet`` takes as arguments."""
    if len(input_shape) - 1 not in _LAYERS:
        raise ValueError(
            f"unet: input_shape is {input_shape}; expected (height, width, channels) or "
            f"(depth, height, width, channels)."
        )
    for arg, value in (("depth", depth), ("base_filters", base_filters),
                       ("num_classes", num_classes)):
        check_int(value, arg, f"{arg}=4", where="unet")
    padding, downsample = options.padding, options.downsample
    for axis, size in enumerate(input_shape[:-1]):
        if output_size(size, depth, padding, downsample) is None:
            raise ValueError(
                f"unet: spatial size {size} (axis {axis}) does not halve cleanly "
                f"{plural(depth - 1, 'time')} with padding={padding!r}, "
                f"downsample={downsample!r}. Fix: use a size such as "
                f"{valid_sizes(size, depth, padding, downsample)}."
            )
    return input_shape


class _UNetLayers:
    """The U-Net's layers of one dimensionality, dtype policy and ``UNetOptions``."""

    def __init__(self, ndim: int, policy: Any, options: UNetOptions):
        self.ndim, self.policy, self.options = ndim, policy, options
        self.halo = options.conv == "halo"
        self.conv_class = _HALO_CONV[ndim] if self.halo else _LAYERS[ndim][0]

    def conv(self, *args, **kwargs):
        return self.conv_class(*args, dtype=self.policy, **kwargs)

    def block(self, x, filters, prefix, mask=None):
        """Two convolutions with batch norm and ReLU; ``x`` may be [upsampled, skip]; batch
        norm's statistics over the voxels ``mask`` marks, when given."""
        options, policy = self.options, self.policy
        for i in (1, 2):
            if isinstance(x, list) and not self.halo:
                x = keras.layers.Concatenate(dtype=policy, name=f"{prefix}_concat")(x)
            x = self.conv(filters, 3, padding=options.padding, use_bias=not options.batch_norm,
                          name=f"{prefix}_conv{i}")(x)
            if options.batch_norm:
                if mask is None:
                    x = keras.layers.BatchNormalization(momentum=options.norm_momentum,
                                                        dtype=policy, name=f"{prefix}_bn{i}")(x)
                else:
                    x = MaskedBatchNormalization(momentum=options.norm_momentum, dtype=policy,
                                                 name=f"{prefix}_bn{i}")(x, mask=mask)
            x = keras.layers.ReLU(dtype=policy, name=f"{prefix}_relu{i}")(x)
        return x

    def downsample(self, x, filters, prefix):
        if self.options.downsample == "pool":
            return _LAYERS[self.ndim][2](2, dtype=self.policy, name=f"{prefix}_pool")(x)
        return self.conv(filters, 3, strides=2, padding=self.options.padding,
                         name=f"{prefix}_stride2")(x)

    def upsample(self, x, skip, filters, prefix, mask=None):
        """Transposed convolution, the skip (center-cropped to fit) and a block."""
        x = _LAYERS[self.ndim][1](filters, 2, strides=2, use_bias=not self.options.batch_norm,
                                  dtype=self.policy, name=f"{prefix}_transpose")(x)
        margins = [s - u for s, u in zip(skip.shape[1:-1], x.shape[1:-1])]
        if any(margins):
            skip = _LAYERS[self.ndim][3]([(m // 2, m - m // 2) for m in margins],
                                         dtype=self.policy, name=f"{prefix}_crop")(skip)
        return self.block([x, skip], filters, prefix, mask)

    def logits(self, x, num_classes):
        return _LAYERS[self.ndim][0](num_classes, 1, dtype=output_dtype(self.policy),
                                     name="logits")(x)
