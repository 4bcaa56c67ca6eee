"""Read a DICOM series (a directory of 2D slices) as one 3D volume with its affine.

CT and MR scanners export a scan as a folder of DICOM files, one slice each.
``read_dicom_series`` stacks them into the layout nibabel gives a NIfTI file as stored
(``read_volume`` reorders NIfTI volumes to RAS+; ``spatial_tf.data.to_ras(array, affine)``
does the same to this array), so both can be mixed:

- ``array``: float32 of shape ``(columns, rows, slices)``, axis 0 along a row of the
  image (DICOM's column index), axis 1 down its columns (the row index), axis 2 along the
  slice normal, stored values mapped through the modality LUT (``RescaleSlope`` and
  ``RescaleIntercept``, so CT comes out in Hounsfield units). ``array[i, j, k]`` is
  pixel ``(row j, column i)`` of slice ``k``: the voxel order of nibabel's DICOM wrappers
  and of ITK's index ``(i, j, k)``. (dcm2niix writes the rows flipped, with an affine to
  match: compare such volumes through their affines, not voxel by voxel.)
- ``affine``: the 4x4 voxel-to-world matrix in **RAS+** millimetres, the convention of a
  NIfTI affine as nibabel reads it. DICOM patient coordinates are LPS+ (x to the
  patient's left, y to the back), so the first two rows of the DICOM geometry change sign:
  ``affine = diag(-1, -1, 1, 1) @ lps``, ``lps`` having columns ``row cosine * column
  spacing``, ``column cosine * row spacing``, the step from one slice to the next, and
  the first slice's ``ImagePositionPatient``. ``nibabel.Nifti1Image(array, affine)``
  therefore places the volume where the scanner did.
- ``spacing``: the voxel sizes in mm per array axis, the lengths of the affine's first
  three columns (as nibabel's header zooms of that image).

Slices are ordered by their position along the slice normal (``ImagePositionPatient``
projected on the cross product of ``ImageOrientationPatient``'s row and column cosines),
never by file name or ``InstanceNumber``. The folder is not searched recursively.

**Skipped files**: files without the DICOM file marker (``DICM`` after a 128-byte
preamble: text, JSON, thumbnails, ``.DS_Store``; DICOM written without the preamble must
be re-saved with it, ``pydicom.dcmread(path, force=True).save_as(path,
enforce_file_format=True)``), and DICOM files that hold no image (no ``Rows``/``Columns``:
``DICOMDIR``, structured reports, RT structure sets). Everything else must belong to one
clean series, or the reader fails with one line naming the file(s) and the fix.

pydicom rather than SimpleITK: pydicom is pure Python and small (no binary wheel of tens
of MB, installs wherever NumPy does), is well maintained, and exposes every tag, so each
check names the file and the tag at fault; SimpleITK's series reader sorts and stacks in
C++ and reports far less about a bad file. pydicom reads uncompressed transfer syntaxes on
its own; compressed ones (JPEG, JPEG 2000, ...) need its optional decoders
(``pip install pylibjpeg pylibjpeg-libjpeg pylibjpeg-openjpeg``).
"""
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union
import os

import numpy as np

from spatial_tf.table import plural

__all__ = ["DicomVolume", "read_dicom_series", "SPACING_TOLERANCE"]

# slice steps may differ by this fraction of their median (1%: scanners write positions
# rounded to a few decimals); beyond it, the series has a gap or an extra slice
SPACING_TOLERANCE = 0.01
# slices closer than this along the normal (mm) are at the same position
_SAME_POSITION_MM = 1e-3
# direction cosines of two slices of one series agree to this
_ORIENTATION_TOLERANCE = 1e-4
# the affine of a volume in DICOM's LPS+ world to nibabel's RAS+ world
_LPS_TO_RAS = np.diag([-1.0, -1.0, 1.0, 1.0])


@dataclass(frozen=True, eq=False)
class DicomVolume:
    """A DICOM series as a volume: ``array`` (float32, ``(columns, rows, slices)``),
    ``affine`` (4x4, voxel index to RAS+ mm, as a NIfTI affine in nibabel), ``spacing``
    (mm per array axis), ``series_uid`` and ``files`` (one per slice, in slice order)."""
    array: np.ndarray
    affine: np.ndarray
    spacing: Tuple[float, float, float]
    series_uid: str
    files: Tuple[str, ...]


def _pydicom():
    try:
        import pydicom
    except ImportError as e:
        raise ImportError(
            "Reading DICOM series needs pydicom, which is not installed. Fix: "
            "pip install 'spatial-tf[data]' (or pip install pydicom)."
        ) from e
    return pydicom


def _has_dicom_marker(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(132)
    except OSError as e:
        raise ValueError(
            f"{path}: cannot be opened ({_one_line(e)}); expected a readable file in the "
            f"folder of a DICOM series. Fix: check its permissions, or move it out of the folder."
        ) from e
    return len(head) == 132 and head[128:] == b"DICM"


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:200]}"


def _read_header(pydicom: Any, path: str) -> Any:
    try:
        return pydicom.dcmread(path, stop_before_pixels=True)
    except Exception as e:
        raise ValueError(
            f"{path}: has the DICOM marker but cannot be read ({_one_line(e)}). Expected an "
            f"intact DICOM file. Fix: re-export the series, or move the damaged file out of "
            f"the folder."
        ) from e


def _headers(directory: str) -> Tuple[Dict[str, List[Tuple[str, Any]]], int]:
    """``{series uid: [(path, header), ...]}`` of the image files in ``directory`` and the
    number of files skipped."""
    pydicom = _pydicom()
    series: Dict[str, List[Tuple[str, Any]]] = {}
    skipped = 0
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not os.path.isfile(path) or not _has_dicom_marker(path):
            skipped += 1
            continue
        header = _read_header(pydicom, path)
        sop_class = header.get("SOPClassUID") or header.file_meta.get("MediaStorageSOPClassUID")
        if not sop_class:
            raise ValueError(
                f"{path}: has the DICOM marker but no SOP Class UID; expected an intact DICOM "
                f"file. Fix: re-export the series, or move the damaged file out of the folder."
            )
        if "Rows" not in header or "Columns" not in header:
            skipped += 1  # DICOMDIR, a report, an RT structure set: no image
            continue
        uid = str(header.get("SeriesInstanceUID", "") or "")
        if not uid:
            raise ValueError(
                f"{path}: has no SeriesInstanceUID; expected every slice to name its series. "
                f"Fix: re-export the series from the scanner or PACS."
            )
        series.setdefault(uid, []).append((path, header))
    return series, skipped


def _choose(directory: str, series: Dict[str, List[Tuple[str, Any]]], skipped: int,
            series_uid: Optional[str]) -> Tuple[str, List[Tuple[str, Any]]]:
    if not series:
        raise ValueError(
            f"{directory}: holds no DICOM image files ({plural(skipped, 'other file')} "
            f"skipped; subfolders are not searched). Expected the slices of one series, files "
            f"with the DICOM marker. Fix: pass the folder that holds the .dcm slices."
        )
    listing = ", ".join(f"{uid} ({len(files)} slices)" for uid, files in
                        sorted(series.items(), key=lambda item: -len(item[1])))
    if series_uid is None:
        if len(series) > 1:
            raise ValueError(
                f"{directory}: holds {len(series)} DICOM series: {listing}; expected one. Fix: "
                f"pass series_uid= one of them, or move each series to a folder of its own."
            )
        return next(iter(series.items()))
    if series_uid not in series:
        raise ValueError(
            f"{directory}: holds no series {series_uid}; it holds {listing}. Fix: pass "
            f"series_uid= one of those."
        )
    return series_uid, series[series_uid]


def _numbers(path: str, header: Any, keyword: str, count: int) -> np.ndarray:
    value = header.get(keyword)
    try:
        numbers = np.array([float(v) for v in value], np.float64)
    except (TypeError, ValueError):
        numbers = np.array([])
    if numbers.shape != (count,) or not np.all(np.isfinite(numbers)):
        raise ValueError(
            f"{path}: {keyword} is {value!r}; expected {count} numbers, the geometry every "
            f"slice of a 3D series carries. Fix: move this file (a scout, screenshot or "
            f"secondary capture) out of the folder, or re-export the series."
        )
    return numbers


def _geometry(path: str, header: Any) -> Dict[str, Any]:
    """One slice's shape, orientation, pixel spacing and position, checked."""
    frames = int(header.get("NumberOfFrames", 1) or 1)
    if frames > 1:
        raise ValueError(
            f"{path}: is a multi-frame DICOM image ({frames} frames); expected one slice per "
            f"file. Fix: convert it to NIfTI (e.g. with dcm2niix) and read that."
        )
    samples = int(header.get("SamplesPerPixel", 1) or 1)
    if samples != 1:
        raise ValueError(
            f"{path}: has {samples} samples per pixel (a colour image); expected a greyscale "
            f"CT or MR slice. Fix: move this file out of the folder, or pass series_uid= the "
            f"scan's series."
        )
    orientation = _numbers(path, header, "ImageOrientationPatient", 6)
    row, column = orientation[:3], orientation[3:]
    if (abs(np.linalg.norm(row) - 1) > 1e-3 or abs(np.linalg.norm(column) - 1) > 1e-3
            or abs(row @ column) > 1e-3):
        raise ValueError(
            f"{path}: ImageOrientationPatient {orientation.tolist()} is not two orthogonal unit "
            f"vectors; expected the row and column direction cosines. Fix: re-export the "
            f"series, or move this file out of the folder."
        )
    return {"shape": (int(header.Rows), int(header.Columns)), "orientation": orientation,
            "pixel_spacing": _numbers(path, header, "PixelSpacing", 2),
            "position": _numbers(path, header, "ImagePositionPatient", 3)}


def _check_alike(uid: str, slices: Sequence[Tuple[str, Dict[str, Any]]]) -> None:
    first_path, first = slices[0]
    checks = (("shape (rows, columns)", "shape", 0.0, 0.0),
              ("ImageOrientationPatient", "orientation", 0.0, _ORIENTATION_TOLERANCE),
              ("PixelSpacing", "pixel_spacing", 1e-4, 0.0))
    for path, geometry in slices[1:]:
        for what, key, rtol, atol in checks:
            mine, theirs = np.asarray(geometry[key], float), np.asarray(first[key], float)
            if not np.allclose(mine, theirs, rtol=rtol, atol=atol):
                raise ValueError(
                    f"{path}: {what} {mine.tolist()} differs from {theirs.tolist()} of "
                    f"{first_path} in series {uid}; expected one {what} for every slice of a "
                    f"series. Fix: move the slices that do not belong (a scout, a reformat) out "
                    f"of the folder, or re-export the series."
                )


def _spacings_text(steps: np.ndarray) -> str:
    found = sorted({round(float(s), 3) for s in steps})
    shown = ", ".join(f"{s:g}" for s in found[:8])
    return shown + (f", ... ({len(found)} in all)" if len(found) > 8 else "")


def _order(uid: str, slices: List[Tuple[str, Dict[str, Any]]],
           single_step: float) -> Tuple[List[str], np.ndarray]:
    """The paths in slice order and the step from one slice to the next (LPS mm; a single
    slice steps ``single_step`` along its normal)."""
    orientation = slices[0][1]["orientation"]
    normal = np.cross(orientation[:3], orientation[3:])
    along = np.array([g["position"] @ normal for _, g in slices])
    order = np.argsort(along, kind="stable")
    paths = [slices[i][0] for i in order]
    positions = np.array([slices[i][1]["position"] for i in order])
    along = along[order]
    if len(paths) == 1:
        return paths, normal * single_step
    steps = np.diff(along)
    same = np.flatnonzero(steps < _SAME_POSITION_MM)
    if same.size:
        i = int(same[0])
        raise ValueError(
            f"{paths[i]} and {paths[i + 1]}: both at {along[i]:g} mm along the slice normal in "
            f"series {uid} ({plural(same.size, 'such pair')}); expected one slice per "
            f"position. Fix: remove the duplicate copies, or split a series of several echoes "
            f"or time points into one folder per echo or time point."
        )
    median = float(np.median(steps))
    off = np.abs(steps - median)
    if off.max() > SPACING_TOLERANCE * median:
        i = int(np.argmax(off))
        raise ValueError(
            f"{os.path.dirname(paths[0])}: uneven slice spacing in series {uid}: steps of "
            f"{_spacings_text(steps)} mm along the slice normal (from {paths[i]} to "
            f"{paths[i + 1]}: {steps[i]:g} mm, median {median:g} mm); expected one spacing "
            f"(within {SPACING_TOLERANCE:.0%}). Fix: add the missing slices or remove the extra "
            f"ones (re-export the whole series), or resample the slices yourself."
        )
    # the line through most slices (medians: one slice off the line does not move it)
    index = np.arange(len(paths))[:, None]
    typical = np.median(np.diff(positions, axis=0), axis=0)
    offset = positions - index * typical
    offset -= np.median(offset, axis=0)
    in_plane = offset - np.outer(offset @ normal, normal)
    drift = np.linalg.norm(in_plane, axis=1)
    if drift.max() > SPACING_TOLERANCE * median:
        i = int(np.argmax(drift))
        raise ValueError(
            f"{paths[i]}: lies {drift[i]:g} mm beside the line through the other slices of "
            f"series {uid} (in the slice plane); expected a regular stack. Fix: move the slice "
            f"that does not belong out of the folder, or re-export the series."
        )
    return paths, (positions[-1] - positions[0]) / (len(paths) - 1)


def _single_step(header: Any) -> float:
    """The slice step of a one-slice series: SpacingBetweenSlices, else SliceThickness,
    else 1 mm."""
    for keyword in ("SpacingBetweenSlices", "SliceThickness"):
        try:
            value = abs(float(header.get(keyword)))
        except (TypeError, ValueError):
            continue
        if np.isfinite(value) and value > 0:
            return value
    return 1.0


def _pixels(pydicom: Any, path: str) -> np.ndarray:
    from pydicom.pixels import apply_modality_lut

    try:
        dataset = pydicom.dcmread(path)
        return np.asarray(apply_modality_lut(dataset.pixel_array, dataset), np.float32)
    except Exception as e:
        raise ValueError(
            f"{path}: cannot decode its pixel data ({_one_line(e)}). Expected an intact slice "
            f"in a transfer syntax pydicom reads. Fix: for compressed DICOM pip install "
            f"pylibjpeg pylibjpeg-libjpeg pylibjpeg-openjpeg; else re-export the series."
        ) from e


def _ras_affine(first, step):
    """The RAS+ affine of the stacked array from the first slice's geometry and the step
    between slices (DICOM's patient axes are LPS)."""
    orientation, (row_spacing, column_spacing) = first["orientation"], first["pixel_spacing"]
    lps = np.eye(4)
    lps[:3, 0] = orientation[:3] * column_spacing   # array axis 0: along a row
    lps[:3, 1] = orientation[3:] * row_spacing      # array axis 1: down a column
    lps[:3, 2] = step
    lps[:3, 3] = first["position"]
    return _LPS_TO_RAS @ lps


def read_dicom_series(directory: Union[str, os.PathLike], *,
                      series_uid: Optional[str] = None) -> DicomVolume:
    """The DICOM series in ``directory`` as a ``DicomVolume``: the slices stacked along the
    slice normal into ``array`` (float32, ``(columns, rows, slices)``, rescaled, e.g. to
    Hounsfield units) with its RAS+ ``affine`` and ``spacing``, laid out as nibabel lays
    out a NIfTI file as stored (see the module docstring). ``series_uid`` picks one series of a
    folder that holds several.

    Raises:
      FileNotFoundError: no such directory. ValueError (one line naming the file(s) and
        the fix): no DICOM images, several series and no ``series_uid``, slices of
        different shapes, orientations or pixel spacings, two slices at one position,
        uneven slice spacing (beyond ``SPACING_TOLERANCE``), a slice missing its geometry,
        a multi-frame or colour file, a file that cannot be read or decoded.
      ImportError: pydicom is not installed.

    >>> import os, tempfile, numpy as np
    >>> from pydicom.dataset import Dataset
    >>> from pydicom.uid import CTImageStorage, generate_uid
    >>> folder, series = tempfile.mkdtemp(), generate_uid()
    >>> for z in (5.0, 0.0, 2.5):                       # written in any order
    ...     ds = Dataset()
    ...     ds.SOPClassUID, ds.SOPInstanceUID = CTImageStorage, generate_uid()
    ...     ds.SeriesInstanceUID = series
    ...     ds.ImageOrientationPatient, ds.ImagePositionPatient = [1, 0, 0, 0, 1, 0], [0, 0, z]
    ...     ds.PixelSpacing, ds.RescaleSlope, ds.RescaleIntercept = [0.5, 0.5], 1, -1024
    ...     ds.set_pixel_data(np.full((4, 6), z * 10, np.uint16), "MONOCHROME2", 16)
    ...     ds.save_as(os.path.join(folder, f"{z}.dcm"), enforce_file_format=True)
    >>> volume = read_dicom_series(folder)
    >>> volume.array.shape, volume.spacing, volume.array[0, 0, :].tolist()
    ((6, 4, 3), (0.5, 0.5, 2.5), [-1024.0, -999.0, -974.0])
    """
    directory = os.fspath(directory)
    if not os.path.exists(directory):
        raise FileNotFoundError(
            f"{directory}: no such directory. Expected a folder of DICOM slices there. Fix: "
            f"check the path (relative paths start at {os.getcwd()})."
        )
    if not os.path.isdir(directory):
        raise ValueError(
            f"{directory}: is a file; expected the folder that holds a DICOM series' slices. "
            f"Fix: pass its folder, {os.path.dirname(os.path.abspath(directory))}."
        )
    series, skipped = _headers(directory)
    uid, files = _choose(directory, series, skipped, series_uid)
    slices = [(path, _geometry(path, header)) for path, header in files]
    _check_alike(uid, slices)
    paths, step = _order(uid, slices, _single_step(files[0][1]))
    affine = _ras_affine(dict(slices)[paths[0]], step)
    pydicom = _pydicom()
    array = np.stack([_pixels(pydicom, path).T for path in paths], axis=-1)
    spacing = tuple(float(s) for s in np.linalg.norm(affine[:3, :3], axis=0))
    return DicomVolume(array=array, affine=affine, spacing=(spacing[0], spacing[1], spacing[2]),
                       series_uid=uid, files=tuple(paths))
