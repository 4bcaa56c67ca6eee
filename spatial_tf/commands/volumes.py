"""What ``train``, ``evaluate`` and ``predict`` share: the model's record, data, model.

A model dir holds ``model.json`` (the model's name and options, written when training
starts, after every option was checked), ``ckpt-<step>`` checkpoints and ``train/``
TensorBoard summaries. ``--data`` is either a directory of volume pairs (``NAME.npy``
with ``NAME_labels.npy``, or ``.nii`` / ``.nii.gz`` alike) or a TFRecord file
(``spatial_tf.data.write_tfrecords``' schema), volumes of any size; without it,
synthetic CT-like volumes are used (training seeds from 0, held-out ones from 10000).
A model trained with ``--spacing`` has every ``--data`` volume resampled to the
recorded spacing first (``spatial_tf.data.resample_to_spacing``). Every volume's
intensities are scaled for the recorded ``--modality``
(``spatial_tf.data.scale_intensities``), then fit to the command's shape with a mask
of its real voxels (see ``spatial_tf.commands.sizing``).

>>> pair_files.__name__
'pair_files'
"""
import json
import os
from typing import Optional, Sequence

__all__ = ["MODEL_FILE", "HELD_OUT_SEED", "RECORD_KEYS", "RECORD_DEFAULTS", "read_record",
           "write_record", "pair_files", "source", "refuse_spacing", "training_examples",
           "padded_examples", "build_model"]

MODEL_FILE = "model.json"
HELD_OUT_SEED = 10000
LABEL_SUFFIX = "_labels"


# what a model.json must hold to rebuild its model (a record without "model" is unet3d's)
RECORD_KEYS = {"unet3d": ("shape", "classes", "depth", "filters"),
               "retinanet": ("image_size", "classes", "max_boxes")}

# what a unet3d model.json written before an option existed means by its absence
# ("conv": spatial_tf's U-Net used keras.layers.Conv3D before HaloConv3D; volumes were
# windowed as abdominal CT; batch norm kept Keras' momentum and counted the padding;
# volumes were not resampled)
RECORD_DEFAULTS = {"dtype_policy": "float32", "preset": None, "conv": "keras",
                   "masked_bn": False, "modality": "ct", "bn_momentum": 0.99, "spacing": None}


def read_record(model_dir):
    """The model dir's ``model.json`` as a dict, or None when there is none.

    Raises ValueError (one line: the file, what is wrong, the fix) when it is not JSON or
    lacks what rebuilding the model needs.
    """
    path = os.path.join(model_dir, MODEL_FILE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            record = json.loads(f.read().decode("utf-8"))
    except ValueError as e:  # json.JSONDecodeError, UnicodeDecodeError
        where = (f"{e.msg} at line {e.lineno} column {e.colno}"
                 if isinstance(e, json.JSONDecodeError) else "it is not UTF-8 text")
        raise ValueError(f"argument --model-dir: {path} is not valid JSON ({where}); expected "
                         f"the model record python -m spatial_tf train writes. Fix: restore it "
                         f"from a copy, or remove it and run python -m spatial_tf train with the "
                         f"model's options and --model-dir {model_dir}, which writes it again "
                         f"and keeps the checkpoints") from None
    keys = RECORD_KEYS.get(record.get("model", "unet3d") if isinstance(record, dict) else None,
                           RECORD_KEYS["unet3d"])
    missing = [k for k in keys if not isinstance(record, dict) or k not in record]
    if missing:
        raise ValueError(f"argument --model-dir: {path} lacks {', '.join(missing)}; expected "
                         f"the model record python -m spatial_tf train writes. Fix: restore it "
                         f"from a copy, or remove it and run python -m spatial_tf train with the "
                         f"model's options and --model-dir {model_dir}, which writes it again "
                         f"and keeps the checkpoints")
    return record


def write_record(model_dir, record) -> None:
    """Write ``model.json`` (whole or not at all: a temporary file renamed over it)."""
    from spatial_tf.commands.outputs import write_atomically

    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(record, f, indent=1, sort_keys=True)

    write_atomically(os.path.join(model_dir, MODEL_FILE), write)


def pair_files(folder):
    """``[(image, labels), ...]`` in ``folder``: ``X.ext`` with ``X_labels.ext``; a NIfTI
    image's labels may also be ``X_labels.npy`` (in the image file's voxel order) or the
    other NIfTI extension (``spatial_tf.data.load_example`` checks the shapes)."""
    from spatial_tf.data import EXTENSIONS

    pairs = []
    for name in sorted(os.listdir(folder)):
        ext = next((e for e in EXTENSIONS if name.lower().endswith(e)), None)
        stem = name[: -len(ext)] if ext else None
        if ext is None or stem.endswith(LABEL_SUFFIX):
            continue
        pairs.append((os.path.join(folder, name), _label_file(folder, name, stem, ext)))
    if not pairs:
        raise ValueError(f"{folder}: no volume pairs. Expected NAME.npy (or .nii, .nii.gz) with "
                         f"NAME{LABEL_SUFFIX}.npy beside it. Fix: pass another --data.")
    return pairs


def _label_file(folder, name, stem, ext):
    """The label file of image ``name``: ``stem_labels`` with its extension, else (a NIfTI
    image) with another NIfTI one or ``.npy``; ValueError naming what is there."""
    from spatial_tf.data import EXTENSIONS

    accepted = [ext] + ([e for e in EXTENSIONS if e != ext] if ext != ".npy" else [])
    for candidate in accepted:
        path = os.path.join(folder, stem + LABEL_SUFFIX + candidate)
        if os.path.isfile(path):
            return path
    expected = os.path.join(folder, stem + LABEL_SUFFIX + ext)
    found = [stem + LABEL_SUFFIX + e for e in EXTENSIONS
             if os.path.isfile(os.path.join(folder, stem + LABEL_SUFFIX + e))]
    if found:
        raise ValueError(f"{os.path.join(folder, name)}: found {found[0]} beside it, but the "
                         f"labels of a .npy image must be .npy (a NIfTI label is read in RAS "
                         f"order, a .npy image as stored). Expected {expected}. Fix: save the "
                         f"labels in the image's voxel order with numpy.save as {expected}.")
    also = "" if ext == ".npy" else \
        f" (or {stem + LABEL_SUFFIX}{' or '.join(e for e in accepted[1:])})"
    raise ValueError(f"{os.path.join(folder, name)}: no label file beside it. Expected "
                     f"{expected}{also}. Fix: add it or move the image out of {folder}.")


def source(data, shape, num_classes, seed=0, num_volumes=8, spacing=None, nonfinite=None,
           shapes=None):
    """Unbatched ``(image, labels)`` as stored (raw intensities, each volume its own
    size) from ``--data``, or ``num_volumes`` synthetic CT volumes of ``shape``. With
    ``spacing`` (mm), each NIfTI pair of a ``--data`` directory is resampled to it from
    its image's header spacing; ``nonfinite`` replaces NaN or infinite image voxels
    (otherwise such a volume is refused when read). ``shapes``: the sizes
    ``sizing.scan`` found, whose pass read and checked every file already (the files
    are then read without a second check, and without repeating its notices)."""
    import numpy as np
    import tensorflow as tf

    from spatial_tf import data as stdata

    if data is None:
        pairs = [stdata.synthetic_ct(tuple(shape), seed + i, num_classes)
                 for i in range(num_volumes)]
        return tf.data.Dataset.from_tensor_slices((np.stack([p[0] for p in pairs]),
                                                   np.stack([p[1] for p in pairs])))
    if os.path.isdir(data):
        return stdata.volume_dataset(pair_files(data), num_classes, same_shape=False,
                                     spacing=spacing, nonfinite=nonfinite, shapes=shapes)
    if not os.path.isfile(data):
        raise FileNotFoundError(f"--data {data}: no such file or directory. Expected a directory "
                                f"of volume pairs or a TFRecord file. Fix: check the path.")
    refuse_spacing(data, spacing)
    records = stdata.tfrecord_dataset([data], num_classes, same_shape=False)
    if nonfinite is None:
        return records
    return records.map(lambda image, labels: (
        tf.where(tf.math.is_finite(image), image, tf.cast(nonfinite, image.dtype)), labels))


def refuse_spacing(data: str, spacing: Optional[Sequence[float]]) -> None:
    """ValueError when a model resamples (``spacing`` given) but ``data`` is a TFRecord
    file, whose records hold no voxel spacing."""
    if spacing is not None:
        mm = "x".join(f"{s:g}" for s in spacing)
        raise ValueError(f"argument --data: {data} is a TFRecord file, whose volumes record no "
                         f"voxel spacing; expected a directory of NIfTI volumes (.nii, .nii.gz) "
                         f"to resample to {mm} mm, the model's spacing. Fix: pass NIfTI "
                         f"volumes, or train a model without --spacing")


def training_examples(ds, shape, modality, first=0, seed=0):
    """``(image, labels, mask)`` of ``shape`` from ``source`` examples: intensities scaled
    for ``modality``, then randomly cropped or zero-padded (``spatial_tf.data.fit_examples``:
    example ``i`` of the stream, counted from ``first``, is cropped with seed ``(seed, i)``,
    so a resumed run crops as an uninterrupted one)."""
    from spatial_tf import data as stdata

    scaled = ds.map(lambda image, labels: (stdata.scale_intensities(image, modality), labels))
    return stdata.fit_examples(scaled, shape, crop=True, seed=seed, first=first)


def padded_examples(ds, shape, modality):
    """``(image, labels, mask)`` of ``shape`` from ``source`` examples: intensities scaled
    for ``modality``, every volume zero-padded at its end (no volume may be larger)."""
    from spatial_tf import data as stdata

    scaled = ds.map(lambda image, labels: (stdata.scale_intensities(image, modality), labels))
    return stdata.fit_examples(scaled, shape, crop=False)


def build_model(record, shape=None):
    """The Keras model ``record`` describes (call inside the strategy's scope), for
    volumes of ``shape`` (default: the recorded training shape; the weights do not
    depend on it)."""
    import keras

    from spatial_tf.models import ModelGardenUNetOptions, UNetOptions, unet3d

    keras.utils.set_random_seed(record.get("seed", 0))
    preset = record.get("preset")
    momentum = record.get("bn_momentum", RECORD_DEFAULTS["bn_momentum"])
    # a record written before "conv" existed: keras.layers.Conv3D (same weights, another
    # layer structure in the checkpoint); before "masked_bn": batch norm over every voxel
    options = (ModelGardenUNetOptions(norm_momentum=momentum) if preset else
               UNetOptions(conv=record.get("conv", "keras"), norm_momentum=momentum,
                           masked_batch_norm=record.get("masked_bn", False)))
    shape = tuple(record["shape"] if shape is None else shape)
    return unet3d(shape + (1,), num_classes=record["classes"],
                  depth=record["depth"], base_filters=record["filters"],
                  dtype_policy=record.get("dtype_policy", "float32"), preset=preset,
                  options=options)
