"""Read volumes from NIfTI (``.nii``, ``.nii.gz``) and NumPy (``.npy``) files.

NIfTI is the format public CT sets use; reading it needs ``nibabel``
(``pip install "spatial-tf[data]"``). A NIfTI volume is read in RAS+ voxel order
whatever its affine (``to_ras``: array axis 0 runs to the patient's right, 1 to anterior,
2 to superior, so axis 2 indexes axial slices), and its shape and voxel spacing are given
in that order; ``from_ras`` puts an array back in the file's own voxel order, to write it
with the file's affine (``stored_shape`` and ``file_axes`` give a file's own order).
``spatial_tf.data.volume_dataset`` (``checking``) turns (image, label) file pairs into
a dataset, reading every file once when it is made.

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

__all__ = ["read_volume", "read_labels", "write_volume", "load_example", "finite",
           "volume_shape", "voxel_spacing", "to_ras", "from_ras", "nifti_space", "EXTENSIONS",
           "stored_shape", "file_axes", "in_file_order", "labels_of", "shapes_compared",
           "volume_format", "DICOM"]

EXTENSIONS = (".nii.gz", ".nii", ".npy")

# a NIfTI header's spatial unit -> millimetres per unit ("unknown": taken as mm, as
# nibabel and most tools do)
_MM_PER_UNIT = {"mm": 1.0, "unknown": 1.0, "meter": 1000.0, "micron": 0.001}


DICOM = "dicom"  # the kind of a folder of DICOM slices


def volume_format(path: Union[str, os.PathLike]) -> str:
    """The format of the volume at ``path``: its extension, one of ``EXTENSIONS``, or
    ``DICOM`` for a folder (of DICOM slices); a ``ValueError`` for anything else."""
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
    kind = volume_format(path)
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


def file_axes(path: Union[str, os.PathLike]) -> Tuple[int, int, int]:
    """The file's own axis behind each axis of the array ``read_volume`` gives:
    ``(0, 1, 2)``, except for a NIfTI file whose affine stores its axes in another order
    than RAS+ (read from the header only).

    >>> import nibabel, numpy as np, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "lsp.nii")
    >>> lsp = [[-1, 0, 0, 0], [0, 0, -1, 0], [0, 1, 0, 0], [0, 0, 0, 1]]
    >>> nibabel.save(nibabel.Nifti1Image(np.zeros((40, 48, 36), np.float32), np.array(lsp)), path)
    >>> file_axes(path), volume_shape(path), stored_shape(path)
    ((0, 2, 1), (40, 36, 48), (40, 48, 36))
    """
    path = os.fspath(path)
    kind = volume_format(path)
    if kind not in (".nii", ".nii.gz"):
        return (0, 1, 2)
    return _reading(path, kind, None, lambda scan: tuple(_ras_axes(scan.affine)))


def in_file_order(shape: Sequence[int], axes: Sequence[int]) -> Tuple[int, ...]:
    """``shape``, in the order ``read_volume`` gives a volume, in the file's own axis
    order, given the file's ``file_axes``; axes after the third are kept.

    >>> in_file_order((40, 36, 48), (0, 2, 1)), in_file_order((4, 5, 6, 2), (1, 2, 0))
    ((40, 48, 36), (6, 4, 5, 2))
    """
    shape = tuple(int(s) for s in shape)
    if len(shape) < 3:
        return shape
    stored = list(shape)
    for axis, file_axis in enumerate(axes):
        stored[file_axis] = shape[axis]
    return tuple(stored)


def stored_shape(path: Union[str, os.PathLike]) -> Tuple[int, ...]:
    """The shape of the array in ``path`` in the file's own axis order (a NIfTI
    header's, before the RAS+ reordering ``volume_shape`` and ``read_volume`` do), the
    shape the messages about one file print."""
    return in_file_order(volume_shape(path), file_axes(path))


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
    kind = volume_format(path)
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
    return _read(path, nonfinite)


def _read(path, nonfinite, notice=True):
    """``read_volume``; ``notice=False``: replace non-finite voxels without a word (a
    file ``check_volumes`` read before, which said so once)."""
    path = os.fspath(path)
    kind = volume_format(path)
    if kind == DICOM:
        volume = _dicom(path).array
    else:
        volume = _reading(path, kind, lambda: np.load(path, allow_pickle=False),
                          lambda scan: to_ras(scan.get_fdata(dtype=np.float32), scan.affine))
    return finite(volume, path, nonfinite, notice=notice)


def finite(volume: np.ndarray, path: str, nonfinite: Optional[float] = None, *,
           notice: bool = True) -> np.ndarray:
    """``volume`` if every voxel is finite; else a ``ValueError`` naming ``path``, the
    count and the fix, or, with ``nonfinite``, a copy with those voxels set to it (said
    on the ``spatial_tf`` logger unless ``notice=False``)."""
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
    if notice:
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
    kind = volume_format(path)
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
    return _load_example(image_path, label_path, num_classes, nonfinite)


def _load_example(image_path, label_path, num_classes, nonfinite, notice=True):
    """``load_example``; ``notice=False``: see ``_read``."""
    image = np.asarray(_read(image_path, nonfinite, notice), np.float32)
    return image[..., None], labels_of(label_path, image_path, image.shape, num_classes)


def labels_of(label_path: Union[str, os.PathLike], image_path: Union[str, os.PathLike],
              image_shape: Sequence[int], num_classes: int) -> np.ndarray:
    """The labels in ``label_path`` of the image in ``image_path``, whose volume (as
    ``read_volume`` gives it) has ``image_shape``: int32, in the image's voxel order,
    checked as ``load_example`` checks them, without reading the image again. Shapes in
    its messages are each file's own."""
    labels = read_labels(label_path)
    affine = _npy_beside_nifti(image_path, label_path)
    shape = tuple(image_shape) if affine is None else \
        in_file_order(image_shape, _ras_axes(affine))
    if shape != labels.shape:
        mine, its, note = _shapes_compared(label_path, labels.shape, image_path, shape, affine)
        raise ValueError(
            f"{os.fspath(label_path)}: label shape {mine} differs from the image's {its} "
            f"({os.fspath(image_path)}){note}. Expected the same voxel grid. Fix: pair each "
            f"image with its own label file."
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
    return labels


def _shapes_compared(label_path, labels_shape, image_path, image_shape, affine):
    """``(labels' shape, image's shape, note)`` for a message (see ``shapes_compared``);
    ``affine`` not None: both shapes are in the image file's order already."""
    if affine is not None:
        return labels_shape, image_shape, ""
    return shapes_compared(label_path, labels_shape, image_path, image_shape)


def shapes_compared(path: str, shape: Sequence[int], other: str,
                    other_shape: Sequence[int]) -> Tuple[Tuple[int, ...], Tuple[int, ...], str]:
    """``(shape, other_shape, note)`` for a message comparing two files' volumes whose
    shapes are in the order ``read_volume`` gives them: each in its own file's axis order
    (``file_axes``), and a note giving the shapes compared, in RAS+ voxel order, when the
    two files store their axes in different orders (else ``""``)."""
    axes, other_axes = file_axes(path), file_axes(other)
    note = "" if axes == other_axes else \
        f"; in RAS+ voxel order, as compared: {tuple(shape)} and {tuple(other_shape)}"
    return in_file_order(shape, axes), in_file_order(other_shape, other_axes), note


def _npy_beside_nifti(image_path, label_path):
    """The image's affine when ``label_path`` is ``.npy`` and ``image_path`` NIfTI (the
    labels are then in the image's stored voxel order), else None."""
    if (volume_format(label_path) != ".npy"
            or volume_format(image_path) not in (".nii", ".nii.gz")):
        return None
    return _nibabel().load(os.fspath(image_path)).affine
