"""Volume file pairs checked before any work, every file read once in one pass, and the
dataset of them (``volume_dataset``).

``check_volumes`` reads each ``(image, labels)`` pair whole, once, and refuses the first
bad one with a message naming the file, the value, what was expected and the fix: a
missing, unknown or unreadable file; an image that is not 3D or holds NaN or infinite
voxels (unless ``nonfinite`` gives the value to put in their place, which is said once
per file on the ``spatial_tf`` logger); labels that are not whole numbers, on another
voxel grid than the image's or outside ``[0, num_classes)``; with ``same_shape``, a
volume of another size than the first. It returns each pair's shape as
``volume_dataset`` yields it (the order ``read_volume`` gives: RAS+ for NIfTI;
resampled with ``spacing``), which ``volume_dataset(..., shapes=...)`` takes so that the
files are not checked twice. Shapes in its messages are in each file's own axis order.

A pass that takes more than a second shows a progress bar on stderr (tqdm, when it is
installed and stderr is a terminal; ``progress=True`` or ``False`` forces it).

>>> import numpy as np, os, tempfile
>>> folder = tempfile.mkdtemp()
>>> pair = os.path.join(folder, "ct.npy"), os.path.join(folder, "ct_labels.npy")
>>> np.save(pair[0], np.zeros((4, 5, 6), np.float32))
>>> np.save(pair[1], np.full((4, 5, 6), 2, np.int32))
>>> check_volumes([pair], num_classes=3)
[(4, 5, 6)]
>>> check_volumes([pair], num_classes=2)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: .../ct_labels.npy: holds class 2; expected classes in [0, 2). Fix: pass num_classes=3 or remap the labels.
"""
import os
import sys
from typing import Any, Iterator, List, Optional, Sequence, Tuple

import tensorflow as tf

__all__ = ["check_volumes", "volume_dataset", "with_progress"]

Shape = Tuple[int, ...]


def check_volumes(pairs: Sequence[Tuple[Any, Any]], num_classes: int, *,
                  spacing: Optional[Sequence[float]] = None,
                  nonfinite: Optional[float] = None, same_shape: bool = False,
                  progress: Optional[bool] = None) -> List[Shape]:
    """Each pair's shape, every file read once and checked (see the module's text).

    Raises:
      FileNotFoundError: a file is missing. ValueError: anything else wrong, naming the
        first file found so; the files are only read.
    """
    from spatial_tf.data.readers import voxel_spacing

    pairs = [(os.fspath(a), os.fspath(b)) for a, b in pairs]
    if not pairs:
        raise ValueError("check_volumes: pairs is empty; expected (image_path, label_path) "
                         "pairs.")
    for path in (p for pair in pairs for p in pair):
        _check_file(path)
    if spacing is not None:
        for image_path, _ in pairs:
            voxel_spacing(image_path)  # .npy or a header without voxel sizes: refused first
    shapes: List[Shape] = []
    for image_path, label_path in with_progress(pairs, progress, "checking volumes"):
        shapes.append(_pair_shape(image_path, label_path, num_classes, spacing, nonfinite))
        if same_shape and shapes[-1] != shapes[0]:
            _refuse_size(pairs[0][0], shapes[0], image_path, shapes[-1])
    return shapes


def volume_dataset(pairs: Sequence[Tuple[Any, Any]], num_classes: int, *,
                   same_shape: bool = True,
                   spacing: Optional[Sequence[float]] = None,
                   nonfinite: Optional[float] = None,
                   shapes: Optional[Sequence[Sequence[int]]] = None,
                   progress: Optional[bool] = None) -> tf.data.Dataset:
    """Unbatched ``(image, labels)`` examples from ``[(image_path, label_path), ...]``.

    Every file is read once when the dataset is made (``spatial_tf.data.check_volumes``,
    with a progress bar on a terminal when that takes more than a second; ``progress``
    True or False forces it): a missing or unreadable file, an image that is not 3D or
    holds NaN or infinite voxels, labels that are not whole numbers, on another grid or
    outside ``[0, num_classes)``, and (``same_shape=True``) a volume of another size than
    the first are refused then, naming the file; nothing fails later, in a training
    step. ``nonfinite`` gives the value for NaN and infinite voxels instead (said once
    per file). ``shapes``: what ``check_volumes`` returned for these pairs and options,
    to skip that reading when it was done already.

    The first volume's shape is the (static) shape of the examples. With
    ``same_shape=False`` volumes may differ in size (the spatial sizes are unknown in the
    element spec): fit them to one shape with ``spatial_tf.data.crop_or_pad`` or
    ``pad_to_shape``. Pad sizes that do not divide with
    ``spatial_tf.data.pad_to_multiple``. With ``spacing`` (mm per axis, e.g.
    ``(2, 2, 2)``), each pair is resampled from its image's NIfTI header spacing to it
    (``spatial_tf.data.resample_to_spacing``: the image linearly, the labels by nearest
    neighbour); ``.npy`` pairs, which record no spacing, are refused.

    >>> import numpy as np, os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> pair = os.path.join(folder, "ct.npy"), os.path.join(folder, "ct_labels.npy")
    >>> np.save(pair[0], np.full((4, 5, 6), np.nan, np.float32))
    >>> np.save(pair[1], np.zeros((4, 5, 6), np.int32))
    >>> volume_dataset([pair], num_classes=2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: .../ct.npy: 120 of 120 voxels are not finite (120 NaN, 0 infinite); ...
    """
    pairs = [(os.fspath(a), os.fspath(b)) for a, b in pairs]
    if not pairs:
        raise ValueError("volume_dataset: pairs is empty; expected (image_path, label_path) pairs.")
    if shapes is None:
        shapes = check_volumes(pairs, num_classes, spacing=spacing, nonfinite=nonfinite,
                               same_shape=same_shape, progress=progress)
    shape = tuple(shapes[0]) if same_shape else (None,) * len(shapes[0])

    def generate():
        for image_path, label_path in pairs:
            yield _resampled(image_path, label_path, num_classes, spacing, nonfinite)

    return tf.data.Dataset.from_generator(generate, output_signature=(
        tf.TensorSpec(shape + (1,), tf.float32), tf.TensorSpec(shape, tf.int32)))


def _resampled(image_path, label_path, num_classes, spacing, nonfinite):
    """A checked pair read again without notices, resampled to ``spacing`` if given."""
    from spatial_tf.data.readers import _load_example, voxel_spacing

    image, labels = _load_example(image_path, label_path, num_classes, nonfinite,
                                  notice=False)
    if spacing is None:
        return image, labels
    from spatial_tf.data.resampling import resample_to_spacing

    own = voxel_spacing(image_path)
    return (resample_to_spacing(image[..., 0], own, spacing, order=1)[..., None],
            resample_to_spacing(labels, own, spacing, order=0))


def _check_file(path: str) -> None:
    from spatial_tf.data.readers import volume_format

    volume_format(path)  # an unknown format is refused
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file. Fix: check the path "
                                f"(relative paths start at {os.getcwd()}).")


def _pair_shape(image_path: str, label_path: str, num_classes: int,
                spacing: Optional[Sequence[float]], nonfinite: Optional[float]) -> Shape:
    """The checked pair's shape as ``volume_dataset`` yields it."""
    from spatial_tf.data.readers import file_axes, in_file_order, labels_of, read_volume

    image = read_volume(image_path, nonfinite=nonfinite)
    if image.ndim != 3:
        stored = in_file_order(image.shape, file_axes(image_path))
        raise ValueError(f"{image_path}: has shape {stored}; expected a 3D volume (depth, "
                         f"height, width). Fix: save one 3D volume per file (e.g. drop a "
                         f"trailing axis of size 1 with numpy.squeeze).")
    labels_of(label_path, image_path, image.shape, num_classes)
    shape = tuple(int(s) for s in image.shape)
    if spacing is None:
        return shape
    from spatial_tf.data.readers import voxel_spacing
    from spatial_tf.data.resampling import resampled_shape

    return resampled_shape(shape, voxel_spacing(image_path), spacing)


def _refuse_size(first: str, first_shape: Shape, path: str, shape: Shape) -> None:
    from spatial_tf.data.readers import shapes_compared

    mine, its, note = shapes_compared(path, shape, first, first_shape)
    raise ValueError(
        f"{path}: volume shape {mine} differs from the first volume's {its} ({first}){note}. "
        f"Expected one size for the dataset. Fix: pass same_shape=False and fit the volumes "
        f"to one shape with spatial_tf.data.crop_or_pad or pad_to_shape, or resample them.")


def with_progress(items: Sequence[Any], progress: Optional[bool], description: str,
                  unit: str = "volume") -> Iterator[Any]:
    """``items`` one by one, with a tqdm bar on stderr when ``progress`` (None: when
    stderr is a terminal and tqdm is installed) that shows once they take more than a
    second and goes when they are done.

    >>> list(with_progress([1, 2], None, "checking"))
    [1, 2]
    """
    bar = _bar(len(items), progress, description, unit)
    try:
        for item in items:
            yield item
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()


def _bar(total: int, progress: Optional[bool], description: str, unit: str) -> Any:
    if not (sys.stderr.isatty() if progress is None else progress):
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=description, unit=unit, delay=1.0, leave=False,
                dynamic_ncols=True)
