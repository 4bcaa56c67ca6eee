"""DICOM series written with pydicom for the tests: slices with known pixels, geometry and
rescale, stored in a shuffled order under misleading names and instance numbers."""
import os

import numpy as np
from pydicom.dataset import Dataset
from pydicom.uid import CTImageStorage, generate_uid

ROWS, COLUMNS, SLICES = 6, 7, 5
AXIAL = (1, 0, 0, 0, 1, 0)


def ds_numbers(values):
    # DICOM decimal strings hold at most 16 characters
    return [f"{float(v):.10g}" for v in values]


def write_slice(path, *, series, position, orientation=AXIAL, pixel_spacing=(0.8, 0.6),
                stored=None, slope=2, intercept=-1024, instance=1, shape=(ROWS, COLUMNS),
                sop_class=CTImageStorage, **extra):
    """One CT slice: ``stored`` int16 pixels (rows, columns), its geometry and rescale."""
    ds = Dataset()
    ds.SOPClassUID, ds.SOPInstanceUID = sop_class, generate_uid()
    ds.Modality = "CT" if sop_class == CTImageStorage else "MR"
    if series is not None:
        ds.SeriesInstanceUID = series
    ds.InstanceNumber = instance
    if position is not None:
        ds.ImagePositionPatient = ds_numbers(position)
    ds.ImageOrientationPatient = ds_numbers(orientation)
    ds.PixelSpacing = ds_numbers(pixel_spacing)
    ds.RescaleSlope, ds.RescaleIntercept = ds_numbers([slope, intercept])
    for keyword, value in extra.items():
        setattr(ds, keyword, value)
    pixels = np.zeros(shape, np.int16) if stored is None else np.asarray(stored, np.int16)
    ds.set_pixel_data(pixels, "MONOCHROME2", 16)
    ds.save_as(os.fspath(path), enforce_file_format=True)
    return ds


def stored_values(k, shape=(ROWS, COLUMNS)):
    """Slice k's stored pixels: 100 k + 10 row + column, unique over the series."""
    rows, columns = np.indices(shape)
    return 100 * k + 10 * rows + columns


def write_series(folder, *, origin, orientation=AXIAL, pixel_spacing=(0.8, 0.6), step=2.5,
                 slices=SLICES, slope=lambda k: 2, intercept=lambda k: -1024, series=None,
                 seed=0):
    """Slice k (k-th along the normal) at ``origin + k * step * normal``, written in a
    shuffled order under names and instance numbers that disagree with that order.
    Returns ``(series uid, {k: path})``."""
    os.makedirs(folder, exist_ok=True)
    series = series or generate_uid()
    row, column = np.array(orientation[:3], float), np.array(orientation[3:], float)
    normal = np.cross(row, column)
    names = np.random.default_rng(seed).permutation(slices)
    paths = {}
    for k in np.random.default_rng(seed + 1).permutation(slices):
        k = int(k)
        path = os.path.join(folder, f"IM{names[k]:04d}.dcm")
        write_slice(path, series=series, position=np.asarray(origin) + k * step * normal,
                    orientation=orientation, pixel_spacing=pixel_spacing,
                    stored=stored_values(k), slope=slope(k), intercept=intercept(k),
                    instance=slices - k + 7)
        paths[k] = path
    return series, paths
