"""Read volumes from NIfTI (``.nii``, ``.nii.gz``) and NumPy (``.npy``) files.

NIfTI is the format public CT sets use; reading it needs ``nibabel``
(``pip install "spatial-tf[data]"``). A NIfTI volume is read in RAS+ voxel order
whatever its affine (``to_ras``: array axis 0 runs to the patient's right, 1 to anterior,
2 to superior, so axis 2 indexes axial slices), and its shape and voxel spacing are given
in that order; ``from_ras`` puts an array back in the file's own voxel order, to write it
with the file's affine. ``volume_dataset`` turns (image, label) file
pairs into unbatched ``(image, labels)`` examples with static shapes, checking every
file before any device time (resampled to a voxel spacing with ``spacing=``, from each
image's header: ``voxel_spacing``).

>>> import numpy as np, os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "labels.npy")
>>> np.save(path, np.zeros((4, 4, 4), np.int32))
>>> read_volume(path).shape
(4, 4, 4)
"""
from typing import Any, Optional, Sequence, Tuple, Union
import logging
import math
import os

import numpy as np
import tensorflow as tf

__all__ = ["read_volume", "read_labels", "write_volume", "load_example", "volume_dataset", "finite",
           "volume_shape", "voxel_spacing", "to_ras", "from_ras", "nifti_space", "EXTENSIONS"]

EXTENSIONS = (".nii.gz", ".nii", ".npy")

# a NIfTI header's spatial unit -> millimetres per unit ("unknown": taken as mm, as
# nibabel and most tools do)
_MM_PER_UNIT = {"mm": 1.0, "unknown": 1.0, "meter": 1000.0, "micron": 0.001}


DICOM = "dicom"  # the kind of a folder of DICOM slices


def _kind(path):
    if os.path.isdir(path):
        return DICOM
    name = os.fspath(path).lower()
    for ext in EXTENSIONS:
        if name.endswith(ext):
            return ext
    raise ValueError(
        f"{os.fspath(path)}: unknown volume format. Expected a file ending in "
        f"{', '.join(EXTENSIONS)}, or a folder of DICOM slices. Fix: convert it, e.g. with "
        f"nibabel or np.save."
    )


def _dicom(path):
    from spatial_tf.data.dicom import read_dicom_series

    return read_dicom_series(path)


def _reading(path, kind, from_npy, from_nifti):
    """``from_npy()`` or ``from_nifti(nibabel image)``; a file that cannot be read as its
    kind is a ``ValueError`` naming it."""
    _check_exists(path, kind)
    try:
        return from_npy() if kind == ".npy" else from_nifti(_nibabel().load(path))
    except ImportError:
        raise
    except Exception as e:
        raise ValueError(
            f"{path}: cannot read it as a {kind} volume ({type(e).__name__}: {e}). Expected an "
            f"intact {kind} file. Fix: re-download or re-export the file."
        ) from e


def _nibabel():
    try:
        import nibabel
    except ImportError as e:
        raise ImportError(
            "Reading NIfTI volumes needs nibabel, which is not installed. Fix: "
            "pip install 'spatial-tf[data]' (or pip install nibabel)."
        ) from e
    return nibabel


def nifti_space(path: Union[str, os.PathLike]) -> Tuple[np.ndarray, Any]:
    """The affine and header of a NIfTI file: what ``write_volume`` takes to write a
    result in the file's space."""
    scan = _nibabel().load(os.fspath(path))
    return scan.affine, scan.header


def _check_exists(path, kind):
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{path}: no such file. Expected a {kind} volume there. Fix: check the path "
            f"(relative paths start at {os.getcwd()})."
        )


def _ras_order(affine):
    """nibabel's orientation (per array axis: the RAS+ axis it runs along, and +1 or -1)
    of a voxel-to-world ``affine``."""
    from nibabel import orientations

    return orientations.io_orientation(np.asarray(affine, np.float64))


def to_ras(volume: Any, affine: Any) -> np.ndarray:
    """``volume`` (in the voxel order of a NIfTI ``affine``) reordered to RAS+: axes
    permuted and flipped so that array axis 0 runs to the right, 1 to anterior, 2 to
    superior (nibabel's ``as_closest_canonical``). Axes after the third are kept.

    >>> import numpy as np
    >>> volume = np.arange(6).reshape(1, 2, 3)
    >>> lps = np.diag([-1.0, -1.0, 1.0, 1.0])        # x to the left, y to posterior
    >>> to_ras(volume, lps).tolist()
    [[[3, 4, 5], [0, 1, 2]]]
    >>> bool((from_ras(to_ras(volume, lps), lps) == volume).all())
    True
    """
    from nibabel import orientations

    volume = np.asarray(volume)
    return np.ascontiguousarray(orientations.apply_orientation(volume, _ras_order(affine)))


def from_ras(volume: Any, affine: Any) -> np.ndarray:
    """The inverse of ``to_ras``: a RAS+ ordered ``volume`` back in the voxel order of
    ``affine``, e.g. a mask predicted on a volume ``read_volume`` gave, to write with
    the file's own affine."""
    from nibabel import orientations

    back = orientations.ornt_transform(orientations.axcodes2ornt("RAS"), _ras_order(affine))
    return np.ascontiguousarray(orientations.apply_orientation(np.asarray(volume), back))


def _ras_axes(affine):
    """``[file axis of RAS axis 0, 1, 2]`` for a NIfTI ``affine``."""
    order = _ras_order(affine)
    return [int(np.flatnonzero(order[:, 0] == k)[0]) for k in range(3)]


def volume_shape(path: Union[str, os.PathLike]) -> Tuple[int, ...]:
    """The shape of the array in ``path``, read from its header without loading the data
    (NIfTI through nibabel, in RAS+ order as ``read_volume`` gives it; ``.npy``
    memory-mapped).

    >>> import numpy as np, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "ct.npy")
    >>> np.save(path, np.zeros((13, 10, 9), np.float32))
    >>> volume_shape(path)
    (13, 10, 9)
    """
    path = os.fspath(path)
    kind = _kind(path)
    if kind == DICOM:
        return tuple(_dicom(path).array.shape)
    return _reading(path, kind,
                    lambda: tuple(np.load(path, mmap_mode="r", allow_pickle=False).shape),
                    lambda scan: _ras_shape(scan))


def _ras_shape(scan):
    shape = tuple(int(s) for s in scan.shape)
    if len(shape) < 3:
        return shape
    return tuple(shape[a] for a in _ras_axes(scan.affine)) + shape[3:]


def voxel_spacing(path: Union[str, os.PathLike]) -> Tuple[float, float, float]:
    """The voxel spacing in mm of the NIfTI volume in ``path``, per array axis of the
    RAS+ ordered volume ``read_volume`` gives, from its header (``pixdim``; metres and
    microns converted, an unknown unit taken as mm).

    Raises:
      ValueError: a ``.npy`` file (it records no spacing), a volume that is not 3D, or a
        header whose voxel sizes are not positive.

    >>> import nibabel, numpy as np, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "scan.nii")
    >>> nibabel.save(nibabel.Nifti1Image(np.zeros((4, 5, 6), np.float32),
    ...                                  np.diag([-0.8, 0.8, 2.5, 1])), path)
    >>> voxel_spacing(path)
    (0.8, 0.8, 2.5)
    """
    path = os.fspath(path)
    kind = _kind(path)
    if kind == ".npy":
        raise ValueError(f"{path}: a .npy file records no voxel spacing; expected a NIfTI file "
                         f"(.nii, .nii.gz) whose header gives it. Fix: save the volume as NIfTI "
                         f"with its voxel sizes (nibabel.Nifti1Image(volume, affine)), or do not "
                         f"resample it.")
    if kind == DICOM:
        return _dicom(path).spacing
    _check_exists(path, kind)
    scan = _nibabel().load(path)
    header = scan.header
    zooms = tuple(float(z) for z in header.get_zooms())
    if len(zooms) != 3:
        raise ValueError(f"{path}: has {len(zooms)} axes (voxel sizes {zooms}); expected a 3D "
                         f"volume. Fix: save one 3D volume per file.")
    unit = header.get_xyzt_units()[0] if hasattr(header, "get_xyzt_units") else "unknown"
    scale = _MM_PER_UNIT.get(unit or "unknown", 1.0)
    spacing = tuple(round(zooms[a] * scale, 6) for a in _ras_axes(scan.affine))
    if not all(math.isfinite(s) and s > 0 for s in spacing):
        raise ValueError(f"{path}: its header gives voxel sizes {zooms}; expected three positive "
                         f"sizes in mm. Fix: set them (nibabel: image.header.set_zooms), or do "
                         f"not resample this volume.")
    return spacing  # type: ignore[return-value]  # three sizes, checked


def read_volume(path: Union[str, os.PathLike], *,
                nonfinite: Optional[float] = None) -> np.ndarray:
    """The array stored in ``path`` (``.nii``, ``.nii.gz`` or ``.npy``); or the volume of a
    folder of DICOM slices (``spatial_tf.data.dicom.read_dicom_series``).

    ``.npy`` arrays come as stored. NIfTI arrays come in RAS+ voxel order whatever the
    file's affine (``to_ras``: axis 0 to the right, 1 to anterior, 2 to superior;
    ``from_ras(array, affine)`` gives the file's own order back), scaled by the header's
    slope and intercept (nibabel's ``get_fdata``), as float32. A volume with NaN or infinite voxels is
    refused, naming the file and how many, unless ``nonfinite`` gives the value to put in
    their place (each replacement is logged on the ``spatial_tf`` logger).

    >>> import numpy as np, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "scan.npy")
    >>> np.save(path, np.array([1.0, np.nan, np.inf], np.float32))
    >>> read_volume(path, nonfinite=0.0).tolist()
    [1.0, 0.0, 0.0]

    Raises:
      FileNotFoundError: no such file. ValueError: unknown format, a corrupt file, or
      NaN / infinite voxels without ``nonfinite``.
    """
    path = os.fspath(path)
    kind = _kind(path)
    if kind == DICOM:
        volume = _dicom(path).array
    else:
        volume = _reading(path, kind, lambda: np.load(path, allow_pickle=False),
                          lambda scan: to_ras(scan.get_fdata(dtype=np.float32), scan.affine))
    return finite(volume, path, nonfinite)


def finite(volume: np.ndarray, path: str, nonfinite: Optional[float] = None) -> np.ndarray:
    """``volume`` if every voxel is finite; else a ``ValueError`` naming ``path``, the
    count and the fix, or, with ``nonfinite``, a copy with those voxels set to it."""
    if not np.issubdtype(volume.dtype, np.inexact):
        return volume
    bad = ~np.isfinite(volume)
    count = int(bad.sum())
    if not count:
        return volume
    nan = int(np.isnan(volume).sum())
    if nonfinite is None:
        raise ValueError(
            f"{path}: {count} of {volume.size} voxels are not finite ({nan} NaN, "
            f"{count - nan} infinite); expected finite intensities. Fix: repair the file, or "
            f"replace them by a value you choose: read_volume(path, nonfinite=0.0), or "
            f"--nonfinite 0 on the command line.")
    logging.getLogger("spatial_tf").warning(
        "spatial_tf: %s: %d NaN or infinite voxels replaced by %s (--nonfinite).",
        path, count, nonfinite)
    return np.where(bad, np.asarray(nonfinite, volume.dtype), volume)


def write_volume(path: Union[str, os.PathLike], volume: Any,
                 affine: Optional[np.ndarray] = None, header: Any = None) -> None:
    """Write ``volume`` as ``.npy`` or NIfTI (by extension), e.g. a predicted mask.

    ``affine`` is the NIfTI voxel-to-world matrix (identity when not given); ``header``
    a nibabel header to keep (e.g. the input scan's: voxel sizes, units, codes, description),
    its data type and scaling set to the volume's own.
    """
    path = os.fspath(path)
    kind = _kind(path)
    if kind == DICOM:
        raise ValueError(f"{path}: is a folder; expected a file to write the volume to, "
                         f"ending in {', '.join(EXTENSIONS)}. Fix: e.g. {path}.nii.gz (NIfTI "
                         f"keeps the DICOM series' affine).")
    volume = np.asarray(volume)
    if kind == ".npy":
        np.save(path, volume)
        return
    nib = _nibabel()
    affine = np.eye(4) if affine is None else np.asarray(affine)
    if header is None:
        nib.save(nib.Nifti1Image(volume, affine), path)
        return
    image_class = nib.Nifti2Image if isinstance(header, nib.Nifti2Header) else nib.Nifti1Image
    image = image_class(volume, affine, header.copy())
    image.set_data_dtype(volume.dtype)
    image.header.set_slope_inter(1.0, 0.0)
    nib.save(image, path)


def read_labels(path: Union[str, os.PathLike],
                image: Optional[Union[str, os.PathLike]] = None) -> np.ndarray:
    """The label volume in ``path`` as int32 class indices (values must be whole numbers).

    NIfTI labels come in RAS+ order, as ``read_volume`` gives them. ``image``: the image
    the labels belong to; when it is NIfTI and ``path`` is ``.npy``, the labels are taken
    to be in the image file's stored voxel order and are reordered by its affine, so they
    meet ``read_volume(image)`` voxel by voxel.

    >>> import numpy as np, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "ct_labels.npy")
    >>> np.save(path, np.array([[0.0, 2.0]]))
    >>> read_labels(path).tolist()
    [[0, 2]]
    """
    raw = read_volume(path)
    labels = np.asarray(raw).astype(np.int32)
    if not np.array_equal(labels, raw):
        raise ValueError(f"{os.fspath(path)}: labels are not whole numbers. Expected "
                         f"integer class indices. Fix: round or re-export the label mask.")
    affine = None if image is None else _npy_beside_nifti(image, path)
    return labels if affine is None or labels.ndim < 3 else to_ras(labels, affine)


def load_example(image_path: Union[str, os.PathLike], label_path: Union[str, os.PathLike],
                 num_classes: int, *,
                 nonfinite: Optional[float] = None) -> Tuple[np.ndarray, np.ndarray]:
    """``(image, labels)``: image float32 with a channel axis, labels int32, checked.
    ``nonfinite``: the value for the image's NaN or infinite voxels (else refused).

    A NIfTI image comes in RAS+ order (``read_volume``), and so does a NIfTI label file,
    each by its own affine. A ``.npy`` label file beside a NIfTI image holds the labels in
    the image file's voxel order (as ``nibabel.load(image).get_fdata()`` gives it): its
    shape must be the image's as stored, and it is reordered by the image's affine.

    Raises:
      ValueError: shapes differ, the image holds NaN or infinite voxels, labels are not
        whole numbers, or a label is outside ``[0, num_classes)``; the message names the
        file and the value.
    """
    image = np.asarray(read_volume(image_path, nonfinite=nonfinite), np.float32)
    labels = read_labels(label_path)
    affine = _npy_beside_nifti(image_path, label_path)
    shape = image.shape if affine is None else from_ras(image, affine).shape
    if shape != labels.shape:
        raise ValueError(
            f"{os.fspath(label_path)}: label shape {labels.shape} differs from the image's "
            f"{shape} ({os.fspath(image_path)}). Expected the same voxel grid. Fix: pair "
            f"each image with its own label file."
        )
    if affine is not None:  # the labels are in the image file's stored voxel order
        labels = to_ras(labels, affine)
    if labels.size:
        low, high = int(labels.min()), int(labels.max())
        if low < 0 or high >= num_classes:
            bad = low if low < 0 else high
            raise ValueError(
                f"{os.fspath(label_path)}: holds class {bad}; expected classes in "
                f"[0, {num_classes}). Fix: pass num_classes={max(high + 1, num_classes)} or remap "
                f"the labels."
            )
    return image[..., None], labels


def _npy_beside_nifti(image_path, label_path):
    """The image's affine when ``label_path`` is ``.npy`` and ``image_path`` NIfTI (the
    labels are then in the image's stored voxel order), else None."""
    if _kind(label_path) != ".npy" or _kind(image_path) not in (".nii", ".nii.gz"):
        return None
    return _nibabel().load(os.fspath(image_path)).affine


def volume_dataset(pairs: Sequence[Tuple[Any, Any]], num_classes: int, *,
                   same_shape: bool = True,
                   spacing: Optional[Sequence[float]] = None,
                   nonfinite: Optional[float] = None) -> tf.data.Dataset:
    """Unbatched ``(image, labels)`` examples from ``[(image_path, label_path), ...]``.

    Every path is checked to exist and the first pair is read when the dataset is made,
    which fixes the (static) shapes; a later volume of another shape fails naming its
    file. With ``same_shape=False`` volumes may differ in size (the spatial sizes are
    unknown in the element spec): fit them to one shape with
    ``spatial_tf.data.crop_or_pad`` or ``pad_to_shape``. Pad sizes that do not divide
    with ``spatial_tf.data.pad_to_multiple``. With ``spacing`` (mm per axis, e.g.
    ``(2, 2, 2)``), each pair is resampled from its image's NIfTI header spacing to it
    (``spatial_tf.data.resample_to_spacing``: the image linearly, the labels by nearest
    neighbour); ``.npy`` pairs, which record no spacing, are refused. An image with NaN
    or infinite voxels fails naming its file when it is read, unless ``nonfinite`` gives
    the value to put in their place.
    """
    pairs = [(os.fspath(a), os.fspath(b)) for a, b in pairs]
    if not pairs:
        raise ValueError("volume_dataset: pairs is empty; expected (image_path, label_path) pairs.")
    for pair in pairs:
        for path in pair:
            _kind(path)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"{path}: no such file. Fix: check the path "
                                        f"(relative paths start at {os.getcwd()}).")
    def load(image_path, label_path):
        image, labels = load_example(image_path, label_path, num_classes,
                                     nonfinite=nonfinite)
        if spacing is None:
            return image, labels
        from spatial_tf.data.resampling import resample_to_spacing

        own = voxel_spacing(image_path)
        return (resample_to_spacing(image[..., 0], own, spacing, order=1)[..., None],
                resample_to_spacing(labels, own, spacing, order=0))

    if spacing is not None:
        for image_path, _ in pairs:
            voxel_spacing(image_path)  # .npy or a header without voxel sizes: refused now
    image, _ = load(*pairs[0])
    shape = image.shape[:-1]

    def generate():
        for image_path, label_path in pairs:
            image, labels = load(image_path, label_path)
            if same_shape and labels.shape != shape:
                raise ValueError(
                    f"{label_path}: volume shape {labels.shape} differs from the first volume's "
                    f"{shape} ({pairs[0][0]}). Expected one size for the dataset. Fix: pass "
                    f"same_shape=False and fit the volumes to one shape with "
                    f"spatial_tf.data.crop_or_pad or pad_to_shape, or resample them."
                )
            yield image, labels

    if not same_shape:
        shape = (None,) * len(shape)
    return tf.data.Dataset.from_generator(generate, output_signature=(
        tf.TensorSpec(shape + (1,), tf.float32), tf.TensorSpec(shape, tf.int32)))
