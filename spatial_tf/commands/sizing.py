"""The shapes the unet3d commands run at: volumes of any size in.

Every ``--data`` file is read once and checked before any work, in one pass
(``scan``, with a progress bar on a terminal when it takes more than a second): an
image read whole (3D, finite voxels unless ``--nonfinite`` gives their value, said once
per file), its label volume read whole (whole numbers, classes below ``--classes``, the
image's shape); a TFRecord file's records alike. The data pipeline then reads the files
again without checking them twice.
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
from typing import List, NamedTuple, Optional, Sequence, Tuple

__all__ = ["multiples", "not_3d", "training_shape", "eval_shape", "crop_problem",
           "volume_sizes", "scan", "Scan", "describe"]

Shape = Tuple[int, int, int]
RAS_AXES = (0, 1, 2)


class Scan(NamedTuple):
    """What ``scan`` found: each volume's size as the commands use it (RAS+ voxel order
    for NIfTI, resampled with ``--spacing``) and its file's ``file_axes`` (which file
    axis each of those axes is; ``(0, 1, 2)`` but for a NIfTI file stored in another
    order than RAS+)."""

    sizes: List[Shape]
    axes: List[Tuple[int, ...]]


def multiples(spec: Sequence[int], depth: int) -> List[int]:
    """What each spatial axis must divide by (``spatial_tf.data.split_multiples``)."""
    from spatial_tf.data import split_multiples

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
    """``scan(...).sizes``: the ``(depth, height, width)`` of every volume in ``--data``."""
    return scan(data, num_classes, spacing).sizes


def scan(data: str, num_classes: int, spacing: Optional[Sequence[float]] = None,
         nonfinite: Optional[float] = None, progress: Optional[bool] = None, *,
         trained: bool = False) -> Scan:
    """Every volume of ``--data`` (a directory of pairs or a TFRecord file) read once and
    checked, before any work; ValueError names the file, the value and the fix.
    ``nonfinite``: the value of NaN or infinite image voxels (else refused); ``spacing``
    (mm): the sizes after resampling each NIfTI volume to it; ``progress``: a bar over
    the pairs (None: on a terminal); ``trained``: ``num_classes`` is a trained model's
    (evaluate), not ``--classes``."""
    from spatial_tf.commands.volumes import pair_files, refuse_spacing
    from spatial_tf.data import with_progress

    if os.path.isdir(data):
        found = [_pair_size(image, labels, num_classes, spacing, nonfinite, trained)
                 for image, labels in with_progress(pair_files(data), progress,
                                                    "checking --data")]
        return Scan([size for size, _ in found], [axes for _, axes in found])
    if not os.path.isfile(data):
        raise FileNotFoundError(f"--data {data}: no such file or directory. Expected a directory "
                                f"of volume pairs or a TFRecord file. Fix: check the path.")
    refuse_spacing(data, spacing)
    sizes = _record_sizes(data, num_classes, nonfinite, trained)
    return Scan(sizes, [RAS_AXES] * len(sizes))


def not_3d(option, path, stored_shape):
    """The error for a file of ``option`` whose image is not one 3D volume (its shape as
    stored)."""
    return ValueError(f"argument {option}: {path} has shape {stored_shape}; expected a 3D "
                      f"volume (depth, height, width). Fix: save one 3D volume per file (e.g. "
                      f"drop a trailing axis of size 1 with numpy.squeeze)")


def _mm(spacing):
    return "x".join(f"{s:g}" for s in spacing) + " mm"


def _pair_size(image_path, label_path, num_classes, spacing=None, nonfinite=None,
               trained=False):
    """``(size, file axes)`` of a pair, its image and labels read whole once, checked."""
    import numpy as np

    from spatial_tf import data as stdata
    from spatial_tf.data import in_file_order

    own = None if spacing is None else _own_spacing(image_path, spacing)
    try:
        image = stdata.read_volume(image_path, nonfinite=nonfinite)
        axes = stdata.file_axes(image_path)
        labels = stdata.read_labels(label_path, image=image_path)
    except ValueError as e:
        raise ValueError(f"argument --data: {e}") from None
    if image.ndim != 3:
        raise not_3d("--data", image_path, in_file_order(image.shape, axes))
    if labels.shape != image.shape:
        mine, its, note = _compared(label_path, labels.shape, image_path, image.shape, axes)
        raise ValueError(f"argument --data: {label_path} has shape {mine}; expected {its}, "
                         f"the shape of {image_path}{note}. Fix: pair each image with its "
                         f"own label volume, on the same voxel grid")
    _check_classes(label_path, np.min(labels, initial=0), np.max(labels, initial=0),
                   num_classes, trained)
    size = tuple(int(s) for s in image.shape)
    return (size if own is None else stdata.resampled_shape(size, own, spacing)), axes


def _compared(label_path, labels_shape, image_path, image_shape, image_axes):
    """``spatial_tf.data.shapes_compared`` of a pair; ``.npy`` labels beside a
    NIfTI image are stored in the image file's order."""
    from spatial_tf.data import in_file_order, shapes_compared

    if label_path.lower().endswith(".npy") and not image_path.lower().endswith(".npy"):
        return (in_file_order(labels_shape, image_axes), in_file_order(image_shape, image_axes),
                "")
    return shapes_compared(label_path, labels_shape, image_path, image_shape)


def _own_spacing(image_path, spacing):
    """The voxel spacing of ``image_path``'s header (read alone), which the model's
    ``spacing`` resamples it from; ValueError for a volume that records none."""
    from spatial_tf import data as stdata

    if image_path.lower().endswith(".npy"):
        raise ValueError(f"argument --data: {image_path} is a .npy volume, which records no "
                         f"voxel spacing; expected NIfTI volumes (.nii, .nii.gz) to resample to "
                         f"{_mm(spacing)} (--spacing, recorded in model.json). Fix: save the "
                         f"volumes as NIfTI with their voxel sizes, or train without "
                         f"--spacing")
    try:
        return stdata.voxel_spacing(image_path)
    except ValueError as e:
        raise ValueError(f"argument --data: {e}") from None


def _check_classes(path, low, high, num_classes, trained=False):
    """Labels ``low`` to ``high`` of ``path`` within ``--classes`` (``trained``: the
    classes of a trained model, which evaluate cannot change)."""
    if low < 0:
        raise ValueError(f"argument --data: {path} holds label {int(low)}; expected classes "
                         f"from 0 to {num_classes - 1}. Fix: remap the labels to 0, 1, ...")
    if high >= num_classes and trained:
        raise ValueError(f"argument --data: {path} holds class {int(high)}; expected classes "
                         f"from 0 to {num_classes - 1}, the model's. Fix: remap the labels, "
                         f"or train a model with --classes {int(high) + 1}")
    if high >= num_classes:
        raise ValueError(f"argument --classes: {num_classes} is not allowed with {path}, which "
                         f"holds class {int(high)}; expected more classes than the largest "
                         f"label. Fix: --classes {int(high) + 1}, or remap the labels")


def _record_sizes(path, num_classes, nonfinite=None, trained=False):
    """Each record's shape, its labels and image checked (see ``_check_record``)."""
    import tensorflow as tf

    from spatial_tf import data as stdata

    sizes = []
    records = tf.data.TFRecordDataset([path]).map(
        lambda r: tf.io.parse_single_example(r, stdata.FEATURES))
    try:
        for i, features in enumerate(records):
            sizes.append(_check_record(path, i, features, num_classes, nonfinite, trained))
    except tf.errors.OpError as e:
        raise ValueError(f"argument --data: {path} cannot be read as TFRecords of volumes "
                         f"({e.message.splitlines()[0]}); expected records written by "
                         f"spatial_tf.data.write_tfrecords. Fix: rewrite the file") from None
    if not sizes:
        raise ValueError(f"argument --data: {path} holds no records; expected at least one "
                         f"volume. Fix: pass another --data")
    return sizes


def _check_record(path, i, features, num_classes, nonfinite, trained):
    """Record ``i``'s shape: its labels and image of that shape, classes below
    ``num_classes``, finite voxels (or, with ``nonfinite``, their count said once)."""
    import numpy as np

    from spatial_tf.data import finite

    shape = tuple(int(s) for s in features["shape"])
    where = f"{path} (record {i})"
    labels = np.frombuffer(features["labels"].numpy(), "<i4")
    image = np.frombuffer(features["image"].numpy(), "<f4")
    for name, values in (("labels", labels), ("voxels", image)):
        if values.size != int(np.prod(shape)):
            raise ValueError(f"argument --data: {path} record {i} holds {values.size} {name} "
                             f"for shape {shape}; expected records written by "
                             f"spatial_tf.data.write_tfrecords. Fix: rewrite the file")
    try:
        finite(image, where, nonfinite)
    except ValueError:
        bad = int(np.sum(~np.isfinite(image)))
        raise ValueError(f"argument --data: {where}: {bad} of {image.size} voxels are not "
                         f"finite; expected finite intensities. Fix: rewrite the record with "
                         f"finite values, or replace them by a value you choose with "
                         f"--nonfinite, e.g. --nonfinite 0") from None
    _check_classes(where, labels.min(initial=0), labels.max(initial=0), num_classes, trained)
    return shape


def describe(sizes: Sequence[Shape], shape: Shape,
             axes: Optional[Sequence[Sequence[int]]] = None) -> str:
    """How volumes of ``sizes`` were fit to ``shape``, for the commands' output.
    ``axes``: each volume's ``file_axes``; when a file stores its axes in another order
    than RAS+, the order of the shapes is said, with the sizes in the file's order when
    all volumes have one size.

    >>> describe([(13, 10, 9), (12, 12, 9)], (16, 12, 12))
    'up to 13x12x9, zero-padded at the end of each axis to 16x12x12 (padding masked out)'
    >>> describe([(16, 16, 16)], (16, 16, 16))
    '16x16x16'
    >>> describe([(48, 36, 40)], (48, 40, 40), axes=[(1, 2, 0)])
    'of 48x36x40 (RAS+ voxel order; 40x48x36 in the file), zero-padded at the end of each axis to 48x40x40 (padding masked out)'
    """
    order = _order(sizes, axes)
    if all(tuple(s) == tuple(shape) for s in sizes):
        return _text(shape) + order
    largest = [max(s[axis] for s in sizes) for axis in range(3)]
    what = f"up to {_text(largest)}" if len(set(map(tuple, sizes))) > 1 else \
        f"of {_text(largest)}"
    cropped = any(s[axis] > shape[axis] for s in sizes for axis in range(3))
    how = ("randomly cropped where larger and zero-padded at the end where smaller to"
           if cropped else "zero-padded at the end of each axis to")
    return f"{what}{order}, {how} {_text(shape)} (padding masked out)"


def _text(shape):
    return "x".join(map(str, shape))


def _order(sizes, axes):
    """``""``, or which order the shapes are in when a file stores another: `` (RAS+
    voxel order; 40x48x36 in the file)`` (one size, all files stored alike) or `` (RAS+
    voxel order)``."""
    if axes is None or all(tuple(a) == RAS_AXES for a in axes):
        return ""
    from spatial_tf.data import in_file_order

    stored = {in_file_order(s, a) for s, a in zip(sizes, axes)}
    if len(stored) > 1 or len(set(map(tuple, sizes))) > 1:
        return " (RAS+ voxel order)"
    files = "the file" if len(sizes) == 1 else "each file"
    return f" (RAS+ voxel order; {_text(stored.pop())} in {files})"
