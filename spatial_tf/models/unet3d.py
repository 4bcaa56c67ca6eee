"""U-Net for volumes (3D) and images (2D) in Keras 3, the model spatial partitioning is for.

The 3D U-Net of Çiçek et al. (2016): at each resolution level two 3x3(x3) convolutions
with batch norm and ReLU, then a 2x downsampling (max pooling or a stride-2
convolution); on the way up a stride-2 transposed convolution, concatenation with the
encoder's features at that level (cropped to fit when ``padding="valid"``) and two more
convolutions; a 1x1(x1) convolution gives per-voxel class logits.

>>> model = unet3d((16, 16, 16, 1), num_classes=2, depth=2, base_filters=4)
>>> model.output_shape
(None, 16, 16, 16, 2)
>>> unet((20, 20, 3), num_classes=1, depth=2, base_filters=4, padding="valid").output_shape
(None, 4, 4, 1)
"""
from typing import Any, Optional, Sequence, Union

import keras

from spatial_tf.checks import check_int
from spatial_tf.halo_conv import HaloConv2D, HaloConv3D
from spatial_tf.models.precision import output_dtype, resolve_dtype_policy
from spatial_tf.models.sizes import output_size, valid_sizes

__all__ = ["unet3d", "unet", "output_size"]

_LAYERS = {
    2: (keras.layers.Conv2D, keras.layers.Conv2DTranspose, keras.layers.MaxPooling2D,
        keras.layers.Cropping2D),
    3: (keras.layers.Conv3D, keras.layers.Conv3DTranspose, keras.layers.MaxPooling3D,
        keras.layers.Cropping3D),
}
_HALO_CONV = {2: HaloConv2D, 3: HaloConv3D}


def unet3d(input_shape: Sequence[int] = (64, 64, 64, 1), num_classes: int = 2,
           depth: Optional[int] = None, base_filters: Optional[int] = None, *,
           preset: Optional[str] = None, **options: Any) -> keras.Model:
    """A 3D U-Net for ``(depth, height, width, channels)`` volumes; see ``unet``.

    ``depth`` and ``base_filters`` default to 3 and 8. ``preset="model_garden"`` builds
    Model Garden's volumetric U-Net instead (4 levels, 32 base filters unless given;
    ``spatial_tf.models.unet3d_presets`` lists what it sets and takes).
    """
    if len(input_shape) != 4:
        raise ValueError(
            f"unet3d: input_shape is {tuple(input_shape)}; expected 4 sizes (depth, "
            f"height, width, channels), e.g. (64, 64, 64, 1). Use unet() for 2D images."
        )
    if preset is not None:
        from spatial_tf.models.unet3d_presets import build_preset

        return build_preset(preset, input_shape, num_classes, depth, base_filters, options)
    return unet(input_shape, num_classes, 3 if depth is None else depth,
                8 if base_filters is None else base_filters, **options)


def unet(input_shape: Sequence[int], num_classes: int = 2, depth: int = 3,
         base_filters: int = 8, *, batch_norm: bool = True, padding: str = "same",
         downsample: str = "pool", norm_momentum: float = 0.99, conv: str = "halo",
         dtype_policy: Optional[Union[str, keras.DTypePolicy]] = None,
         name: Optional[str] = None) -> keras.Model:
    """A U-Net for 2D ``(h, w, c)`` or 3D ``(d, h, w, c)`` inputs.

    Args:
      input_shape: spatial sizes then channels, without the batch axis.
      num_classes: channels of the output logits.
      depth: resolution levels (``depth - 1`` downsamplings); filters double per level
        starting at ``base_filters``.
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
      dtype_policy: Keras dtype policy of every layer but the logits, e.g.
        ``"mixed_bfloat16"`` (float32 variables, bfloat16 compute); the logits layer
        computes in the variable dtype (float32), so the output is float32. None:
        ``"mixed_bfloat16"`` under a ``TPUStrategy``, else Keras' global policy (float32
        unless set).

    Raises:
      ValueError: a bad option, or spatial sizes that do not survive the downsamplings
        (the message gives the sizes that do).
    """
    input_shape = tuple(input_shape)
    ndim = len(input_shape) - 1
    if ndim not in _LAYERS:
        raise ValueError(
            f"unet: input_shape is {input_shape}; expected (height, width, channels) or "
            f"(depth, height, width, channels)."
        )
    _check_options(depth, base_filters, padding, downsample, conv)
    if isinstance(norm_momentum, bool) or not isinstance(norm_momentum, (int, float)) \
            or not 0 <= norm_momentum < 1:
        raise ValueError(f"unet: norm_momentum is {norm_momentum!r}; expected a number in "
                         f"[0, 1), e.g. 0.99 (Keras' default) or 0.9 for short runs.")
    for axis, size in enumerate(input_shape[:-1]):
        if output_size(size, depth, padding, downsample) is None:
            raise ValueError(
                f"unet: spatial size {size} (axis {axis}) does not halve cleanly "
                f"{depth - 1} time(s) with padding={padding!r}, downsample={downsample!r}. "
                f"Fix: use a size such as {valid_sizes(size, depth, padding, downsample)}."
            )
    policy = resolve_dtype_policy(dtype_policy, "unet")
    halo = conv == "halo"
    convolution, conv_transpose, pool, crop = (
        lambda *a, _layer=layer, **k: _layer(*a, dtype=policy, **k)
        for layer in (_HALO_CONV[ndim] if halo else _LAYERS[ndim][0],) + _LAYERS[ndim][1:])

    def block(x, filters, prefix):
        """Two convolutions with batch norm and ReLU; ``x`` may be [upsampled, skip]."""
        for i in (1, 2):
            if isinstance(x, list) and not halo:
                x = keras.layers.Concatenate(dtype=policy, name=f"{prefix}_concat")(x)
            x = convolution(filters, 3, padding=padding, use_bias=not batch_norm,
                            name=f"{prefix}_conv{i}")(x)
            if batch_norm:
                x = keras.layers.BatchNormalization(momentum=norm_momentum, dtype=policy,
                                                    name=f"{prefix}_bn{i}")(x)
            x = keras.layers.ReLU(dtype=policy, name=f"{prefix}_relu{i}")(x)
        return x

    inputs = keras.Input(input_shape, dtype=policy.variable_dtype, name="image")
    x, skips = inputs, []
    for level in range(depth - 1):
        x = block(x, base_filters * 2**level, f"down{level}")
        skips.append(x)
        if downsample == "pool":
            x = pool(2, name=f"down{level}_pool")(x)
        else:
            x = convolution(base_filters * 2**level, 3, strides=2, padding=padding,
                            name=f"down{level}_stride2")(x)
    x = block(x, base_filters * 2 ** (depth - 1), "bottom")
    for level in reversed(range(depth - 1)):
        x = conv_transpose(base_filters * 2**level, 2, strides=2, use_bias=not batch_norm,
                           name=f"up{level}_transpose")(x)
        skip = skips[level]
        margins = [s - u for s, u in zip(skip.shape[1:-1], x.shape[1:-1])]
        if any(margins):
            skip = crop([(m // 2, m - m // 2) for m in margins], name=f"up{level}_crop")(skip)
        x = block([x, skip], base_filters * 2**level, f"up{level}")
    logits = _LAYERS[ndim][0](num_classes, 1, dtype=output_dtype(policy), name="logits")(x)
    return keras.Model(inputs, logits, name=name or f"unet{ndim}d")


def _check_options(depth, base_filters, padding, downsample, conv):
    for arg, value in (("depth", depth), ("base_filters", base_filters)):
        check_int(value, arg, f"{arg}=4", where="unet")
    if padding not in ("same", "valid"):
        raise ValueError(f"unet: padding is {padding!r}; expected 'same' or 'valid'.")
    if downsample not in ("pool", "conv"):
        raise ValueError(f"unet: downsample is {downsample!r}; expected 'pool' or 'conv'.")
    if conv not in ("halo", "keras"):
        raise ValueError(f"unet: conv is {conv!r}; expected 'halo' (spatial_tf's "
                         f"HaloConv layers, the default) or 'keras'. Fix: conv='keras' "
                         f"rebuilds the layer structure of checkpoints written before "
                         f"'halo' existed; else leave the default.")
