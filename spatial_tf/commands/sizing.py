"""The shapes the unet3d commands run at: volumes of any size in.

Every ``--data`` file is checked before any work (an image's shape from its header, a
label volume read whole: whole numbers, classes below ``--classes``, the image's shape).
Each volume is then zero-padded **at the end of each axis** up to a shape the split and
the U-Net's poolings accept: on each axis a multiple of its split count times
``2 ** (depth - 1)`` (``multiples``); the padding is masked out of the loss and of
Dice. ``train`` runs on one training shape (``training_shape``): without ``--crop`` the
largest volume's sizes rounded up so; with ``--crop`` that size, each volume larger on
an axis cropped there to a random window (a new one each time it is drawn) and each
smaller one padded. ``evaluate`` pads every volume to the largest one's rounded-up
sizes, ``predict`` its one volume, each axis at least the training shape's (so that a
volume like the training ones is padded as in training), and the mask ``predict``
writes is cropped back to the input's shape. A model trained with ``--spacing`` sizes every NIfTI volume as it is
after resampling to that spacing (``spatial_tf.data.resampled_shape`` of its header's
spacing).

>>> multiples([1, 2, 2, 1, 1], depth=3)
[8, 8, 4]
>>> training_shape([(50, 59, 48), (40, 61, 30)], [1, 2, 2, 1, 1], depth=3)
(56, 64, 48)
"""
import os
from typing import List, Optional, Sequence, Tuple

__all__ = ["multiples", "training_shape", "eval_shape", "crop_problem", "volume_sizes",
           "describe"]

Shape = Tuple[int, int, int]


def multiples(spec: Sequence[int], depth: int) -> List[int]:
    """What each spatial axis must divide by (``spatial_tf.data.split_multiples``)."""
    from spatial_tf.data.fitting import split_multiples

    return list(split_multiples(spec, depth))


def _round_up(sizes, steps):
    return tuple(-(-s // m) * m for s, m in zip(sizes, steps))


def eval_shape(sizes: Sequence[Shape], spec: Sequence[int], depth: int,
               trained: Optional[Sequence[int]] = None) -> Shape:
    """The shape every volume of ``sizes`` is padded to: the largest sizes per axis, at
    least ``trained`` (the training shape) when given, rounded up to
    ``multiples(spec, depth)``. (A volume padded less than in training is predicted
    worse near the end of each axis: the U-Net learned the padding it saw.)

    >>> eval_shape([(13, 10, 9)], [1, 1, 1, 1, 1], depth=2)
    (14, 10, 10)
    >>> eval_shape([(13, 10, 9)], [1, 1, 1, 1, 1], depth=2, trained=(16, 8, 12))
    (16, 10, 12)
    """
    largest = [max([s[axis] for s in sizes] + ([int(trained[axis])] if trained else []))
               for axis in range(3)]
    return _round_up(largest, multiples(spec, depth))


def training_shape(sizes: Sequence[Shape], spec: Sequence[int], depth: int,
                   crop: Optional[Sequence[int]] = None) -> Shape:
    """``crop`` (checked by ``crop_problem``) when given, else ``eval_shape``."""
    if crop is not None:
        return tuple(int(c) for c in crop)  # type: ignore[return-value]  # 3 edges, checked
    return eval_shape(sizes, spec, depth)


def crop_problem(crop: Sequence[int], spec: Sequence[int], depth: int) -> Optional[str]:
    """Why ``--crop`` does not fit the split and the poolings (one line), or None.

    >>> crop_problem([32, 30, 32], [1, 2, 2, 2, 1], 2)
    'argument --crop: 32,30,32 is not allowed with --spec 1,2,2,2,1 and --depth 2; expected edges that are multiples of 4,4,4 (split count x 2 per axis, for the poolings), e.g. --crop 32,32,32'
    """
    steps = multiples(spec, depth)
    if all(c % m == 0 for c, m in zip(crop, steps)):
        return None
    text = ",".join
    return (f"argument --crop: {text(map(str, crop))} is not allowed with --spec "
            f"{text(map(str, spec))} and --depth {depth}; expected edges that are multiples "
            f"of {text(map(str, steps))} (split count x {2 ** (depth - 1)} per axis, for the "
            f"poolings), e.g. --crop {text(map(str, _round_up(crop, steps)))}")


def volume_sizes(data: str, num_classes: int,
                 spacing: Optional[Sequence[float]] = None) -> List[Shape]:
    """The ``(depth, height, width)`` of every volume in ``--data`` (a directory of pairs
    or a TFRecord file), each checked; ValueError names the file, the value and the fix.
    With ``spacing`` (mm), the sizes after resampling each NIfTI volume to it."""
    from spatial_tf.commands.volumes import pair_files, refuse_spacing

    if os.path.isdir(data):
        return [_pair_size(image, labels, num_classes, spacing)
                for image, labels in pair_files(data)]
    if not os.path.isfile(data):
        raise FileNotFoundError(f"--data {data}: no such file or directory. Expected a directory "
                                f"of volume pairs or a TFRecord file. Fix: check the path.")
    refuse_spacing(data, spacing)
    return _record_sizes(data, num_classes)


def _mm(spacing):
    return "x".join(f"{s:g}" for s in spacing) + " mm"


def _pair_size(image_path, label_path, num_classes, spacing=None):
    import numpy as np

    from spatial_tf import data as stdata

    shape = stdata.volume_shape(image_path)
    if len(shape) != 3:
        raise ValueError(f"argument --data: {image_path} has shape {shape}; expected a 3D "
                         f"volume (depth, height, width). Fix: save one 3D volume per file "
                         f"(e.g. drop a trailing axis of size 1 with numpy.squeeze)")
    labels = stdata.read_labels(label_path, image=image_path)
    if labels.shape != shape:
        raise ValueError(f"argument --data: {label_path} has shape {labels.shape}; expected "
                         f"{shape}, the shape of {image_path}. Fix: pair each image with its "
                         f"own label volume, on the same voxel grid")
    _check_classes(label_path, np.min(labels, initial=0), np.max(labels, initial=0),
                   num_classes)
    if spacing is None:
        return shape
    if image_path.lower().endswith(".npy"):
        raise ValueError(f"argument --data: {image_path} is a .npy volume, which records no "
                         f"voxel spacing; expected NIfTI volumes (.nii, .nii.gz) to resample to "
                         f"{_mm(spacing)} (--spacing, recorded in model.json). Fix: save the "
                         f"volumes as NIfTI with their voxel sizes, or train without "
                         f"--spacing")
    try:
        own = stdata.voxel_spacing(image_path)
    except ValueError as e:
        raise ValueError(f"argument --data: {e}") from None
    return stdata.resampled_shape(shape, own, spacing)


def _check_classes(path, low, high, num_classes):
    if low < 0:
        raise ValueError(f"argument --data: {path} holds label {int(low)}; expected classes "
                         f"from 0 to {num_classes - 1}. Fix: remap the labels to 0, 1, ...")
    if high >= num_classes:
        raise ValueError(f"argument --classes: {num_classes} is not allowed with {path}, which "
                         f"holds class {int(high)}; expected more classes than the largest "
                         f"label. Fix: --classes {int(high) + 1}, or remap the labels")


def _record_sizes(path, num_classes):
    import tensorflow as tf

    from spatial_tf import data as stdata

    sizes = []
    records = tf.data.TFRecordDataset([path]).map(
        lambda r: tf.io.parse_single_example(r, stdata.FEATURES))
    try:
        for i, features in enumerate(records):
            shape = tuple(int(s) for s in features["shape"])
            labels = tf.io.decode_raw(features["labels"], tf.int32, little_endian=True)
            if int(tf.size(labels)) != shape[0] * shape[1] * shape[2]:
                raise ValueError(f"argument --data: {path} record {i} holds "
                                 f"{int(tf.size(labels))} labels for shape {shape}; expected "
                                 f"records written by spatial_tf.data.write_tfrecords. Fix: "
                                 f"rewrite the file")
            _check_classes(f"{path} (record {i})", int(tf.reduce_min(labels)),
                           int(tf.reduce_max(labels)), num_classes)
            sizes.append(shape)
    except tf.errors.OpError as e:
        raise ValueError(f"argument --data: {path} cannot be read as TFRecords of volumes "
                         f"({e.message.splitlines()[0]}); expected records written by "
                         f"spatial_tf.data.write_tfrecords. Fix: rewrite the file") from None
    if not sizes:
        raise ValueError(f"argument --data: {path} holds no records; expected at least one "
                         f"volume. Fix: pass another --data")
    return sizes


def describe(sizes: Sequence[Shape], shape: Shape) -> str:
    """How volumes of ``sizes`` were fit to ``shape``, for the commands' output.

    >>> describe([(13, 10, 9), (12, 12, 9)], (16, 12, 12))
    'up to 13x12x9, zero-padded at the end of each axis to 16x12x12 (padding masked out)'
    >>> describe([(16, 16, 16)], (16, 16, 16))
    '16x16x16'
    """
    def text(s):
        return "x".join(map(str, s))

    if all(tuple(s) == tuple(shape) for s in sizes):
        return text(shape)
    largest = [max(s[axis] for s in sizes) for axis in range(3)]
    what = f"up to {text(largest)}" if len(set(map(tuple, sizes))) > 1 else f"of {text(largest)}"
    cropped = any(s[axis] > shape[axis] for s in sizes for axis in range(3))
    how = ("randomly cropped where larger and zero-padded at the end where smaller to"
           if cropped else "zero-padded at the end of each axis to")
    return f"{what}, {how} {text(shape)} (padding masked out)"
