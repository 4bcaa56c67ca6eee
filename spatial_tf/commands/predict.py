"""``python -m spatial_tf predict``: a trained model's mask for one volume, and a PNG
(unet3d); or a detector's boxes drawn on one image (retinanet).

Takes a volume of any size: its intensities are scaled for the recorded ``--modality``,
it is zero-padded at the end of each axis to what the U-Net's poolings accept (and at
least to the training shape, as training padded it), and the mask is cropped back to
the input's exact shape. A model trained with ``--spacing`` (recorded in
``model.json``) needs a NIfTI ``--input``: it is resampled from its header's voxel
spacing to the model's (linearly) before the padding, and the mask is resampled back
to the input's exact shape (nearest neighbour). Writes the predicted class mask in the
input's format (``.npy``; ``.nii`` or ``.nii.gz`` with the input's affine and header,
int16) and a PNG of a slice: input, label (when ``--labels`` is given or the
volume is synthetic) and prediction side by side (``pip install "spatial-tf[plot]"``).
Without ``--input``, held-out synthetic volume ``--index`` is used. For a retinanet
model dir, ``--input`` is a PNG or JPEG (fit to the model's image size) and the PNG shows the detections scoring at least
``--score-threshold`` (and the true boxes, dashed, of a synthetic image). ``--output``
and ``--png`` are checked before any work (their folder exists or can be created and is
writable; neither is an input or a file of the model dir) and written whole or not at all.
"""
import os
import sys

from spatial_tf.commands.options import (add_command, add_cores_option, add_device_option,
                                         add_modality_option, add_nonfinite_option, budget,
                                         positive_int, trained_model_dir)
from spatial_tf.table import plural

__all__ = ["add_parser", "run", "slice_png", "check_args"]

PROG = "python -m spatial_tf predict"


def add_parser(subparsers):
    p = add_command(
        subparsers, "predict", help="write a predicted mask and a slice PNG",
        description="Write a trained 3D U-Net's mask of one volume of any size, in the input's\n"
                    "format, and a PNG of a slice (unet3d); or draw a detector's boxes on one\n"
                    "image (retinanet). Outputs are checked before any work.")
    p.add_argument("--model-dir", required=True, metavar="DIR", help="a train --model-dir")
    p.add_argument("--input", metavar="PATH",
                   help="a volume (.npy, .nii[.gz], DICOM folder) or image")
    p.add_argument("--labels", metavar="PATH", help="its label volume, shown in the PNG")
    p.add_argument("--index", type=positive_int(0, 10**6), default=0, metavar="I",
                   help="synthetic volume, without --input (default 0)")
    p.add_argument("--output", metavar="PATH",
                   help="the mask (default MODEL_DIR/prediction.EXT)")
    p.add_argument("--png", metavar="PATH", help="the slice PNG (default: --output's .png)")
    p.add_argument("--score-threshold", type=_fraction, default=0.3, metavar="S",
                   help="retinanet: lowest score drawn (default 0.3)")
    p.add_argument("--tile", type=_tile, default=None, metavar="D,H,W|trained|auto",
                   help="unet3d: predict in overlapping tiles (default: none)")
    add_cores_option(p, trained=1)
    add_device_option(p)
    p.add_argument("--budget", type=budget, metavar="BUDGET",
                   help="with --tile auto: per-core memory, e.g. v5e, 16GiB")
    add_modality_option(p)
    add_nonfinite_option(p)
    p.set_defaults(func=run, check=lambda args: check_args(p, args))
    return p


def _inputs(args):
    """``(option, path)`` of every file predict reads: no output may replace one."""
    from spatial_tf.commands.outputs import model_dir_inputs

    return [("--input", args.input), ("--labels", args.labels)] + \
        model_dir_inputs(args.model_dir)


def check_args(parser, args):
    """``--output`` and ``--png`` can be written and replace no input (exit 2); then the
    ``--model-dir`` (``trained_model_dir``: 2, or None)."""
    from spatial_tf.commands.outputs import check_file

    if args.tile == "auto" and args.budget is None:
        parser.error("argument --tile: auto needs --budget; expected e.g. --tile auto "
                     "--budget v4")
    if args.budget is not None and args.tile != "auto":
        parser.error("argument --budget: only used with --tile auto; expected --tile auto "
                     f"--budget {args.budget}, or no --budget")
    try:
        if args.output is not None:
            check_file("--output", args.output, _inputs(args), example="prediction.npy")
        if args.png is not None:
            check_file("--png", args.png, _inputs(args) + [("--output", args.output)],
                       example="slice.png")
    except ValueError as e:
        parser.error(str(e))
    return trained_model_dir(PROG, args)


def slice_png(path, image, labels, prediction, title="", *, axis=0, plane=None,
              class_names=None) -> None:
    """Save a slice (along ``axis``, in the ``plane`` it names if any; the one with the
    most labelled voxels) of image / labels / prediction side by side, the legend naming
    ``class_names`` when known (written to a temporary file, then renamed to ``path``)."""
    import matplotlib.pyplot as plt

    from spatial_tf.commands.outputs import write_atomically
    from spatial_tf.viz import slices_figure

    fig = slices_figure(image, labels, prediction, title=title, axis=axis, plane=plane,
                        class_names=class_names)
    try:
        write_atomically(path, lambda tmp: fig.savefig(tmp, dpi=100))
    finally:
        plt.close(fig)


def _tile(text):
    """``"trained"``, ``"auto"`` or three positive edges (one edge: a cube)."""
    import argparse

    if text.strip() in ("trained", "auto"):
        return text.strip()
    try:
        edges = tuple(int(e) for e in text.split(","))
    except ValueError:
        edges = ()
    if len(edges) not in (1, 3) or any(e < 1 for e in edges):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not allowed; expected D,H,W (three positive edges), one edge for a "
            f"cube, 'trained' (the model's training shape) or 'auto' (the planner's choice)")
    return edges * 3 if len(edges) == 1 else edges


def _fraction(text):
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; expected a number from 0 to 1")
    return value


_fraction.__name__ = "number"


def _extension(path):
    from spatial_tf.data import volume_format

    return volume_format(path)


def run(args):
    from spatial_tf import logs
    from spatial_tf.commands.detection import run_predict
    from spatial_tf.commands.evaluate import run_for_model

    logs.start_tensorflow()
    return run_for_model(PROG, args, _run_unet3d, run_predict)


def _run_unet3d(args, record, latest):
    from spatial_tf.commands.options import fail
    from spatial_tf.commands.outputs import check_file

    try:
        image, labels, ext, space = _read_input(args, record)
        spacing = _input_spacing(args, record)
        tile = _tile_shape(args.tile, record, args.cores)
        ext = ".nii.gz" if ext == "dicom" else ext   # a DICOM series: its mask as NIfTI
        output = args.output or os.path.join(args.model_dir, "prediction" + ext)
        if _extension(output) != ext and not (ext == ".nii.gz" and _extension(output) == ".nii"):
            raise ValueError(f"argument --output: {output} is not a {ext} file; expected the "
                             f"input's format. Fix: name it ...{ext}")
        png = args.png or output[: -len(ext)] + ".png"
        check_file("--output", output, _inputs(args), example="prediction" + ext)
        check_file("--png", png, _inputs(args) + [("--output", output)], example="slice.png")
        import matplotlib  # noqa: F401  (fail before any work when it is missing)
    except ImportError as e:
        return fail(PROG, f"{e}. Fix: pip install 'spatial-tf[plot]'")
    except (ValueError, OSError) as e:
        return fail(PROG, str(e))
    return _predict(args, record, latest, image, labels, output, png, space, spacing, tile)


def _tile_shape(tile, record, cores=1):
    """``--tile`` as edges the split over ``cores`` and the U-Net's poolings divide, or
    None (whole volume, or ``"auto"``: chosen once the volume's size is known)."""
    from spatial_tf.commands.shared import default_spec
    from spatial_tf.commands.sizing import multiples

    if tile is None or tile == "auto":
        return tile
    edges = tuple(record["shape"]) if tile == "trained" else tuple(tile)
    steps = multiples(default_spec(cores), record["depth"])
    if any(e % m for e, m in zip(edges, steps)):
        split = "" if cores == 1 else f" split over {cores} cores and"
        raise ValueError(
            f"argument --tile: {','.join(map(str, edges))} does not divide by "
            f"{','.join(map(str, steps))}; expected edges that{split} the "
            f"depth-{record['depth']} U-Net's poolings divide. Fix: e.g. --tile "
            f"{','.join(str(-(-e // m) * m) for e, m in zip(edges, steps))}")
    return edges


def _auto_tile(record, shape, cores, budget, order=""):
    """The largest tile, up to ``shape``, whose train step fits ``budget`` per core on
    ``cores`` (prediction holds no gradients or optimizer state, so it needs less): by
    the TPU compiler where it is installed and ``budget`` names a TPU generation, else by
    the tile-padding estimate; None when the whole volume fits. ``order``: what to say after a
    tile's shape (``_order``)."""
    from spatial_tf.commands import volumes
    from spatial_tf.commands.options import tpu_compiler_decides
    from spatial_tf.commands.shared import default_spec
    from spatial_tf.commands.sizing import multiples

    spec = default_spec(cores)
    step = max(multiples(spec, record["depth"]))

    def model_fn(input_shape):
        return volumes.build_model(record, tuple(input_shape[:3]))

    largest = _compiled_cube if tpu_compiler_decides(budget) else _estimated_cube
    edge, best, basis = largest(model_fn, shape, cores, budget, spec, step)
    if best is None or edge < step:
        found = "none" if best is None else f"edge {edge}"
        raise ValueError(f"argument --tile: auto found no tile of this model that fits "
                         f"{budget} on {plural(cores, 'core')} (largest cube: {found}; the "
                         f"split and the poolings need multiples of {step}); expected a "
                         f"budget larger than its weights and their optimizer state. Fix: "
                         f"more --cores, a larger --budget, or --tile D,H,W")
    tile = tuple(min(edge, s) for s in shape)
    chosen = ("none: the whole volume fits" if tile == tuple(shape)
              else f"{_text(tile)} tiles{'' if len(set(tile)) == 1 else order}")
    print(f"{PROG}: --tile auto: {chosen} (the largest cube within {budget} on "
          f"{plural(cores, 'core')} is {edge}^3 with {list(best.spec)}, by {basis})",
          file=sys.stderr, flush=True)
    return None if tile == tuple(shape) else tile


def _compiled_cube(model_fn, shape, cores, budget, spec, step):
    """``(edge, candidate, basis)``: the largest cube the TPU compiler fits, searched by
    compiles at the real size (``planning.search_largest_edge``)."""
    from spatial_tf import planning

    print(f"{PROG}: --tile auto: asking the TPU compiler for {budget} for the largest cube "
          f"a train step of this model fits on {plural(cores, 'core')}", file=sys.stderr,
          flush=True)
    top = -(-max(shape) // step) * step
    found = planning.search_largest_edge(
        model_fn((step,) * 3 + (1,)), (1, step, step, step, 1), cores, budget, spec=spec,
        edges=range(step, top + 1, step), training=planning.Training(model_fn=model_fn))
    best = found.plan.recommended if found.plan is not None else None
    return found.answer or 0, best, found.source


def _estimated_cube(model_fn, shape, cores, budget, spec, step):
    """``(edge, candidate, basis)``: the largest cube a fit of small compiles predicts
    within ``budget`` (XLA:CPU's figures with TPU tile padding: an estimate)."""
    from spatial_tf import planning
    from spatial_tf.commands.plan import DEFAULT_FIT_SIZES

    sizes = sorted({-(-e // step) * step for e in DEFAULT_FIT_SIZES})
    print(f"{PROG}: --tile auto: planning a train step of this model at {sizes} on "
          f"{plural(cores, 'core')}, budget {planning.parse_budget(budget)}", file=sys.stderr,
          flush=True)
    result = planning.plan(
        model_fn((sizes[0],) * 3 + (1,)), (1,) + tuple(shape) + (1,), cores,
        planning.parse_budget(budget), specs=[spec],
        options=planning.PlanOptions(fit_sizes=sizes, progress=False),
        training=planning.Training(model_fn=model_fn))
    edge, best = result.largest_edge(multiple=step)
    basis = ("the tile-padding estimate (XLA:CPU's figures with TPU tiles), not the TPU "
             "compiler" if result.memory == "tpu" else "XLA:CPU")
    return edge, best, basis


def _forward(args, record, shape):
    """``(model, fn)``: the model for volumes of ``shape`` (restore its weights) and
    ``fn(batch) -> logits`` (NumPy), split over ``args.cores`` on ``args.device`` (auto:
    TPU if present, else the emulator) when more than 1 or on a TPU; ValueError for
    ``--device tpu`` without one."""
    import tensorflow as tf

    import spatial_tf
    from spatial_tf.commands import volumes
    from spatial_tf.commands.shared import default_spec, strategy_for
    from spatial_tf.steps import run_model

    cores = args.cores
    if cores == 1 and args.device != "tpu":
        model = volumes.build_model(record, shape)
        return model, lambda x: run_model(model, tf.constant(x, tf.float32), None,
                                          training=False).numpy()

    strategy = strategy_for(PROG, args, cores, replicas=1)
    spec = default_spec(cores)
    with strategy.scope():
        model = volumes.build_model(record, shape)

    @tf.function
    def run(x):
        return strategy.run(lambda t: run_model(model, spatial_tf.split(t, spec), None,
                                                training=False), args=(x,))

    return model, lambda x: strategy.experimental_local_results(
        run(tf.constant(x, tf.float32)))[0].numpy()


def _read_input(args, record):
    """``(image, labels, ext, (affine, header, ras))`` of ``--input`` (labels None without
    ``--labels``; affine and header None for ``.npy``; ``ras``: the image was reordered
    to RAS+, a NIfTI file), or of held-out synthetic volume ``--index``."""
    import numpy as np

    from spatial_tf import data
    from spatial_tf.commands.volumes import HELD_OUT_SEED

    if args.input is None:
        image, labels = data.synthetic_ct(tuple(record["shape"]), seed=HELD_OUT_SEED + args.index,
                                          num_classes=record["classes"])
        return image[..., 0], labels, ".npy", (None, None, False)
    ext = _extension(args.input)
    space = (None, None, False)
    try:  # each file read once: the image's notice (--nonfinite) is said once
        if ext == "dicom":   # a folder of DICOM slices, read once for its volume and affine
            series = data.read_dicom_series(args.input)
            image = data.finite(series.array, args.input, args.nonfinite)
            space = (series.affine, None, False)
        else:
            image = np.asarray(data.read_volume(args.input, nonfinite=args.nonfinite),
                               np.float32)
    except ValueError as e:
        raise ValueError(f"argument --input: {e}") from None
    if image.ndim != 3:
        from spatial_tf.commands.sizing import not_3d

        raise not_3d("--input", args.input, data.stored_shape(args.input))
    if ext not in ("dicom", ".npy"):
        space = (*data.nifti_space(args.input), True)
    try:
        labels = None if args.labels is None else \
            data.labels_of(args.labels, args.input, image.shape, record["classes"])
    except ValueError as e:
        raise ValueError(f"argument --labels: {e}") from None
    return image, labels, ext, space


def _slice_view(args, record):
    """How the PNG cuts and names its slices: a NIfTI volume (read RAS+) in axial slices,
    along axis 2; a DICOM series in its own slices (axis 2: columns, rows, slices); others
    along axis 0 (D); the synthetic volumes' classes by name."""
    from spatial_tf.data import class_names

    if args.input is None:
        return {"class_names": class_names(record["classes"])}
    kind = _extension(args.input)
    if kind == ".npy":
        return {}
    return {"axis": 2, "plane": "DICOM" if kind == "dicom" else "axial"}


def _input_spacing(args, record):
    """``--input``'s voxel spacing (mm) when the model resamples, else None; ValueError
    for an input without one."""
    from spatial_tf import data
    from spatial_tf.commands.volumes import MODEL_FILE

    if record["spacing"] is None or args.input is None:  # synthetic: on the model's grid
        return None
    if _extension(args.input) == ".npy":
        raise ValueError(f"argument --input: {args.input} is a .npy volume, which records no "
                         f"voxel spacing; expected a NIfTI file (.nii, .nii.gz), because "
                         f"{args.model_dir} resamples to "
                         f"{'x'.join(f'{s:g}' for s in record['spacing'])} mm (--spacing, in "
                         f"{os.path.join(args.model_dir, MODEL_FILE)}). Fix: save the volume as "
                         f"NIfTI with its voxel sizes")
    try:
        return data.voxel_spacing(args.input)
    except ValueError as e:
        raise ValueError(f"argument --input: {e}") from None


def _predict(args, record, latest, image, labels, output, png, space, spacing=None,
             tile=None):
    """Run the model on ``image`` (resampled from ``spacing`` to the model's when given)
    padded, crop the mask to that shape, resample it back, write it."""
    import numpy as np

    from spatial_tf import data
    from spatial_tf.commands import sizing
    from spatial_tf.commands.options import fail
    from spatial_tf.commands.outputs import write_atomically
    from spatial_tf.commands.shared import default_spec, restore

    seen = image if spacing is None else \
        data.resample_to_spacing(image, spacing, record["spacing"], order=1)
    shape = sizing.eval_shape([seen.shape], default_spec(args.cores), record["depth"],
                              trained=record["shape"])
    padded, _ = data.pad_to_shape(data.scale_intensities(seen, record["modality"])[..., None],
                                  shape)
    axes = data.file_axes(args.input) if space[2] else sizing.RAS_AXES
    try:
        if tile == "auto":
            tile = _auto_tile(record, shape, args.cores, args.budget, _order(axes))
        elif tile is not None:
            _warn_large_tile(tile, seen.shape, shape, axes)
        model, forward = _forward(args, record, tile or shape)
    except ValueError as e:
        return fail(PROG, str(e))
    step = restore(model, latest)
    if tile is None:
        logits = forward(padded.numpy()[None])[0]
    else:   # overlapping tiles of the model's shape, blended (models.sliding_window)
        from spatial_tf.models import sliding_window_predict

        logits = sliding_window_predict(forward, padded.numpy(), tile)
    prediction = np.argmax(logits, axis=-1).astype(np.int32)[tuple(map(slice, seen.shape))]
    prediction = data.resample_to_shape(prediction, image.shape, order=0)
    scaled = data.scale_intensities(image, record["modality"])
    affine, header, ras = space
    mask = prediction if affine is None else prediction.astype(np.int16)
    if ras:   # back to the file's own voxel order, to go with its affine
        mask = data.from_ras(mask, affine)
    write_atomically(output, lambda tmp: data.write_volume(tmp, mask, affine, header))
    slice_png(png, scaled.numpy(), labels, prediction,
              title=f"{os.path.basename(latest)} (step {step})", **_slice_view(args, record))
    print(f"wrote {output} ({_written(args, record, mask, seen, spacing, tile, axes)}) and "
          f"{png}")
    return 0


def _text(values, number="{}"):
    return "x".join(number.format(v) for v in values)


def _order(axes):
    """What to say after a shape in the model's voxel order (RAS+ for NIfTI) when the
    input file stores its axes in another order."""
    from spatial_tf.commands.sizing import RAS_AXES

    return "" if tuple(axes) == RAS_AXES else " (RAS+ voxel order)"


def _written(args, record, mask, seen, spacing, tile, axes):
    """What ``predict`` says of the mask it wrote: its shape as written (the input
    file's own voxel order), its classes, and how it was predicted (shapes the model
    saw in RAS+ voxel order, said so when the file's order differs)."""
    import numpy as np

    said = f"mask, {_text(mask.shape)}, classes {sorted(set(np.unique(mask).tolist()))}"
    if spacing is not None:
        said += (f", predicted at {_text(record['spacing'], '{:g}')} mm ({_text(seen.shape)}) "
                 f"from {_text(spacing, '{:g}')} mm{_order(axes)}")
    if tile is not None:
        cube = len(set(tile)) == 1
        said += f", in {_text(tile)} tiles{'' if cube else _order(axes)}"
    if args.cores > 1:
        said += f", split over {args.cores} cores"
    return said


def _warn_large_tile(tile, size, shape, axes):
    """One line on stderr when ``--tile`` is larger on some axis than the volume
    (``size``, as the model sees it) padded to ``shape``: what happens and the fix."""
    larger = [name for name, t, s in zip("DHW", tile, shape) if t > s]
    if not larger:
        return
    from spatial_tf.data import in_file_order

    volume = _text(size)
    if _order(axes):
        volume += f" in RAS+ voxel order, {_text(in_file_order(size, axes))} in the file"
    print(f"{PROG}: warning: --tile {','.join(map(str, tile))} is larger than the volume on "
          f"ax{'es' if len(larger) > 1 else 'is'} {', '.join(larger)} ({volume}; "
          f"{_text(shape)} once padded for the model), so the volume is zero-padded up to "
          f"the tile there: more memory and time, and padding the model was not trained "
          f"with. Fix: leave --tile out to predict the whole volume at once, or pass --tile "
          f"{','.join(str(min(t, s)) for t, s in zip(tile, shape))} or smaller",
          file=sys.stderr, flush=True)


if __name__ == "__main__":  # pragma: no cover
    from spatial_tf.__main__ import main

    sys.exit(main(["predict"] + sys.argv[1:]))
