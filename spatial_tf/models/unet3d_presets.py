"""Published 3D U-Net configurations, rebuilt in Keras 3 by name.

``unet3d(input_shape, num_classes, preset="model_garden")`` builds TensorFlow Model
Garden's volumetric segmentation model (``official/projects/volumetric_models``) with the
defaults of its configuration, as ``model_garden_unet3d`` does. What the defaults are, and
where they are set in Model Garden:

=========================  ===============================  ==========================================
setting                    Model Garden default             where
=========================  ===============================  ==========================================
levels (``model_id``)      4 (3 max poolings)               ``configs/backbones.py`` ``UNet3D``
``base_filters``           32                               ``configs/backbones.py`` ``UNet3D``
encoder block at level l   conv 32·2^l, conv 2·32·2^l       ``modeling/backbones/unet_3d.py``
                           (3x3x3, ``same``, with bias)     (``BasicBlock3DVolume`` in ``nn_blocks_3d.py``)
batch norm                 after every conv, before ReLU;   ``use_batch_normalization=True`` in
                           momentum 0.99, epsilon 1e-3,     ``configs/backbones.py``, ``decoders.py``;
                           synchronized across replicas     ``NormActivation`` in ``vision/configs/common.py``
activation                 ReLU                             ``NormActivation``
downsampling               2x2x2 max pooling, stride 2      ``modeling/backbones/unet_3d.py``
upsampling                 2x2x2 transposed conv, stride 2, ``use_deconvolution=True`` in ``decoders.py``;
                           as many filters as its input     ``decoders/unet_3d_decoder.py``
decoder block at level l   concat [upsampled, skip], two    ``decoders/unet_3d_decoder.py``
                           3x3x3 convs with the skip's
                           filters (2·32·2^l)
head                       no hidden convs; 1x1x1 conv to   ``SegmentationHead3D`` in ``configs/
                           ``num_classes`` logits,          semantic_segmentation_3d.py`` and
                           kernel ~ N(0, 0.01), bias 0      ``heads/segmentation_heads_3d.py``
other kernels              Glorot uniform, zero bias        (Keras' Conv3D defaults)
=========================  ===============================  ==========================================

The settings besides the sizes are the fields of ``ModelGardenUNetOptions``.

What differs: the layers are Keras 3's (Model Garden uses tf_keras), so its checkpoints
do not load by name here; batch norm is Keras 3's, never the fused kernel, with
``synchronized=True`` for Model Garden's ``SyncBatchNormalization``; the dtype is
``dtype_policy`` (Model Garden sets a global policy from its runtime config). Model
Garden's L2 weight decay (``losses.l2_weight_decay``, 0 by default) and its adaptive Dice
loss belong to its task, not the model: use ``spatial_tf.losses``. Only the defaults above
are reproduced (``pool_size`` and ``kernel_size`` 2 and 3, ``head.num_convs`` 0).

>>> from spatial_tf.models import unet3d
>>> model = unet3d((16, 16, 16, 1), num_classes=3, preset="model_garden")
>>> model.output_shape, model.count_params()
((None, 16, 16, 16, 3), 19078467)
>>> model_garden_unet3d((8, 8, 8, 1), 2, depth=2, base_filters=4).output_shape
(None, 8, 8, 8, 2)
"""
import dataclasses
from typing import Any, Optional, Sequence, Union

import keras

from spatial_tf.checks import check_int, fold_keywords
from spatial_tf.models._option_checks import (check_flag, check_fraction, check_options_type,
                                              check_positive_number)
from spatial_tf.models.precision import output_dtype, resolve_dtype_policy
from spatial_tf.models.sizes import output_size, valid_sizes
from spatial_tf.table import plural

__all__ = ["PRESETS", "ModelGardenUNetOptions", "model_garden_unet3d", "build_preset",
           "check_preset"]

# the preset's defaults that ``unet3d``'s ``depth`` and ``base_filters`` override
PRESETS = {"model_garden": {"depth": 4, "base_filters": 32}}

DTypePolicy = Optional[Union[str, keras.DTypePolicy]]

# unet's options (UNetOptions' fields) that the presets fix
_UNET_ONLY = ("padding", "downsample", "conv", "masked_batch_norm")


@dataclasses.dataclass(frozen=True)
class ModelGardenUNetOptions:
    """How ``model_garden_unet3d`` (and ``unet3d(preset="model_garden")``) builds its
    blocks; the defaults are Model Garden's.

    Attributes:
      batch_norm: Model Garden's ``use_batch_normalization``: batch norm after every
        convolution, before the ReLU.
      norm_momentum, norm_epsilon: batch norm's (``NormActivation``'s) momentum and epsilon.
      sync_batch_norm: batch norm statistics synchronized across replicas (``use_sync_bn``).
      upsample: ``"transpose"`` (a 2x2x2 transposed convolution, ``use_deconvolution=True``)
        or ``"nearest"`` (``UpSampling3D``, no weights).

    >>> ModelGardenUNetOptions(upsample="nearest").norm_epsilon
    0.001
    >>> ModelGardenUNetOptions(norm_epsilon=0)
    Traceback (most recent call last):
    ...
    ValueError: ModelGardenUNetOptions: norm_epsilon is 0; expected a number > 0. Fix: e.g. ModelGardenUNetOptions(norm_epsilon=1e-3), Model Garden's default.
    """

    batch_norm: bool = True
    norm_momentum: float = 0.99
    norm_epsilon: float = 1e-3
    sync_batch_norm: bool = True
    upsample: str = "transpose"

    def __post_init__(self):
        where = "ModelGardenUNetOptions"
        for flag in ("batch_norm", "sync_batch_norm"):
            check_flag(getattr(self, flag), where, flag,
                       f"{where}({flag}=True), Model Garden's default, or False")
        check_fraction(self.norm_momentum, where, "norm_momentum",
                       f"e.g. {where}(norm_momentum=0.99), Model Garden's default")
        check_positive_number(self.norm_epsilon, where, "norm_epsilon",
                              f"e.g. {where}(norm_epsilon=1e-3), Model Garden's default")
        if self.upsample not in ("transpose", "nearest"):
            raise ValueError(
                f"ModelGardenUNetOptions: upsample is {self.upsample!r}; expected "
                f"'transpose' (a transposed convolution, Model Garden's default) or "
                f"'nearest' (UpSampling3D). Fix: e.g. "
                f"ModelGardenUNetOptions(upsample='transpose').")


def model_garden_unet3d(input_shape: Sequence[int], num_classes: int, *, depth: int = 4,
                        base_filters: int = 32,
                        options: Optional[ModelGardenUNetOptions] = None,
                        dtype_policy: DTypePolicy = None, name: str = "unet3d_model_garden",
                        **deprecated: Any) -> keras.Model:
    """Model Garden's volumetric 3D U-Net (``UNet3D`` + ``UNet3DDecoder`` + head).

    Its defaults are those of ``official/projects/volumetric_models``' configuration;
    docs/models.md tabulates each setting, the Model Garden file it comes from, and what
    differs here (Keras 3 layers, so Model Garden's checkpoints do not load by name).

    Args:
      input_shape: ``(depth, height, width, channels)``; spatial sizes multiples of
        ``2 ** (depth - 1)``.
      num_classes: channels of the logits.
      depth: Model Garden's ``model_id``, the resolution levels.
      base_filters: filters of the first convolution.
      options: batch norm and upsampling (``ModelGardenUNetOptions()``, Model Garden's).
      dtype_policy: as ``unet``'s; the logits stay in the variable dtype (float32).
      deprecated: ``upsample=`` and the other fields of ``ModelGardenUNetOptions`` as
        keywords, as earlier releases took them (each warns with a ``DeprecationWarning``).

    >>> model_garden_unet3d((8, 8, 8, 1), 2, depth=2, base_filters=4,
    ...                     options=ModelGardenUNetOptions(batch_norm=False)).count_params()
    15202
    """
    check_options_type(options, ModelGardenUNetOptions, "model_garden_unet3d",
                       "model_garden_unet3d(..., options=ModelGardenUNetOptions(...))")
    options = fold_keywords("model_garden_unet3d", deprecated,
                            {"options": (ModelGardenUNetOptions, options)})["options"]
    input_shape = _check_sizes(tuple(input_shape), num_classes, depth, base_filters)
    policy = resolve_dtype_policy(dtype_policy, "model_garden_unet3d")
    inputs = keras.Input(input_shape, dtype=policy.variable_dtype, name="image")
    x, skips = inputs, []
    for level in range(depth):
        filters = base_filters * 2**level
        prefix = f"down{level}" if level < depth - 1 else "bottom"
        x = _block(x, (filters, 2 * filters), prefix, options, policy)
        if level < depth - 1:
            skips.append(x)
            x = keras.layers.MaxPooling3D(2, dtype=policy, name=f"{prefix}_pool")(x)
    for level in reversed(range(depth - 1)):
        x = _upsample(x, f"up{level}", options, policy)
        skip = skips[level]
        x = keras.layers.Concatenate(dtype=policy, name=f"up{level}_concat")([x, skip])
        x = _block(x, (skip.shape[-1],) * 2, f"up{level}", options, policy)
    logits = keras.layers.Conv3D(
        num_classes, 1, kernel_initializer=keras.initializers.RandomNormal(stddev=0.01),
        dtype=output_dtype(policy), name="logits")(x)
    return keras.Model(inputs, logits, name=name)


def _check_sizes(input_shape, num_classes, depth, base_filters):
    """``input_shape`` after checking it and the sizes ``model_garden_unet3d`` takes."""
    if len(input_shape) != 4:
        raise ValueError(f"model_garden_unet3d: input_shape is {input_shape}; expected 4 "
                         f"sizes (depth, height, width, channels), e.g. (64, 64, 64, 1).")
    for arg, value in (("depth", depth), ("base_filters", base_filters),
                       ("num_classes", num_classes)):
        check_int(value, arg, f"{arg}=4", where="model_garden_unet3d")
    for axis, size in enumerate(input_shape[:-1]):
        if output_size(size, depth) is None:
            raise ValueError(
                f"model_garden_unet3d: spatial size {size} (axis {axis}) does not halve "
                f"cleanly {plural(depth - 1, 'time')}. Fix: use a size such as "
                f"{valid_sizes(size, depth, 'same', 'pool')}.")
    return input_shape


def _block(x, filters, prefix, options, policy):
    """Model Garden's ``BasicBlock3DVolume``: per filter count conv, batch norm, ReLU."""
    for i, f in enumerate(filters, 1):
        x = keras.layers.Conv3D(f, 3, padding="same", dtype=policy, name=f"{prefix}_conv{i}")(x)
        if options.batch_norm:
            x = keras.layers.BatchNormalization(
                momentum=options.norm_momentum, epsilon=options.norm_epsilon,
                synchronized=options.sync_batch_norm, dtype=policy, name=f"{prefix}_bn{i}")(x)
        x = keras.layers.ReLU(dtype=policy, name=f"{prefix}_relu{i}")(x)
    return x


def _upsample(x, prefix, options, policy):
    if options.upsample == "transpose":
        return keras.layers.Conv3DTranspose(x.shape[-1], 2, strides=2, dtype=policy,
                                            name=f"{prefix}_transpose")(x)
    return keras.layers.UpSampling3D(2, dtype=policy, name=f"{prefix}_upsample")(x)


def check_preset(preset: str, options: Any, keywords: dict) -> None:
    """Check ``unet3d(..., preset=preset, options=options, **keywords)``: the preset's
    name, that ``options`` is a ``ModelGardenUNetOptions`` (or None) and that no keyword
    is one the preset fixes."""
    if preset not in PRESETS:
        raise ValueError(f"unet3d: preset is {preset!r}; expected one of "
                         f"{', '.join(map(repr, PRESETS))} or None. Fix: e.g. "
                         f"preset='model_garden'.")
    allowed = [f.name for f in dataclasses.fields(ModelGardenUNetOptions)]
    fixed = sorted(k for k in keywords if k in _UNET_ONLY)
    if fixed:
        raise TypeError(f"unet3d: {', '.join(fixed)} is not an option of preset {preset!r}; "
                        f"expected only the fields of ModelGardenUNetOptions "
                        f"({', '.join(allowed)}). Fix: leave it out (the preset fixes it) or "
                        f"use preset=None.")
    check_options_type(options, ModelGardenUNetOptions, "unet3d",
                       f"unet3d(..., preset={preset!r}, options=ModelGardenUNetOptions(...)); "
                       f"UNetOptions go with preset=None")


def build_preset(preset: str, input_shape: Sequence[int], num_classes: int,
                 depth: Optional[int], base_filters: Optional[int],
                 options: Optional[ModelGardenUNetOptions], dtype_policy: DTypePolicy = None,
                 name: Optional[str] = None) -> keras.Model:
    """``unet3d(..., preset=...)``: the preset's model, ``depth`` / ``base_filters``
    overriding its defaults when not None."""
    check_preset(preset, options, {})
    defaults = PRESETS[preset]
    return model_garden_unet3d(
        input_shape, num_classes,
        depth=defaults["depth"] if depth is None else depth,
        base_filters=defaults["base_filters"] if base_filters is None else base_filters,
        options=options, dtype_policy=dtype_policy,
        **({} if name is None else {"name": name}))
