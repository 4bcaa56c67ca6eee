"""``python -m spatial_tf train unet3d|retinanet``: train a 3D U-Net on CT or MR volumes or
a RetinaNet-style detector on large images, split over the cores.

unet3d takes ``--data`` volumes of any size: each is zero-padded at the end of each axis
to a shape the split and the U-Net's poolings accept (each axis a multiple of its split
count x 2^(depth-1)), the padding masked out of the loss and Dice. Volumes of different
sizes train on one shape: the largest one's, rounded up so; or, with ``--crop``, random
windows of that size from larger volumes and padding of smaller ones. With
``--spacing``, each NIfTI volume is first resampled from its header's voxel spacing to
that one (scipy.ndimage: images linearly, labels by nearest neighbour). Intensities are
scaled for ``--modality`` (ct, mr, other). Every option and every file is checked
before anything is written to ``--model-dir``, whose ``model.json`` then records the
shape, spacing, modality and batch-norm momentum that evaluate and predict reuse.

Runs on a TPU when one is present, else on the CPU emulator (``spatial_tf.auto``), with
a progress bar (loss, Dice, step time; with ``--no-progress``, a line every
``--log-every`` steps instead), TensorBoard summaries in ``MODEL_DIR/train`` and
checkpoints ``MODEL_DIR/ckpt-<step>``. Run again with the same ``--model-dir`` to resume:
the weights, optimizer and step come back from the last checkpoint that reads in full (a
damaged newer one is passed over, saying so; ``train: restored MODEL_DIR/ckpt-<step>
(step <step>)`` says which), and the input pipeline (deterministic) skips the examples
the finished steps used.
SIGTERM and Ctrl-C save a checkpoint of the finished step and exit with status 130.
``--device cpu`` chooses the CPU emulator without the line saying there is no TPU;
``--device tpu`` stops with an error when there is none.
"""
import os

from spatial_tf.commands.options import (DEFAULT_BN_MOMENTUM, DEFAULT_CORES, add_command,
                                         add_cores_option, add_device_option,
                                         add_modality_option, add_nonfinite_option,
                                         add_unet_options, check_batch, int_list, momentum,
                                         positive_int, recorded_cores, resolve_cores,
                                         resolve_unet_preset, spacing)

from spatial_tf.commands.shared import default_spec, train_until_signal  # noqa: F401 (kept here)
from spatial_tf.commands.volumes import RECORD_DEFAULTS  # noqa: F401 (kept importable from here)
from spatial_tf.table import plural

__all__ = ["add_parser", "run", "default_spec", "check_args", "train_until_signal"]

MODELS = ("unet3d", "retinanet")


def add_parser(subparsers):
    p = add_command(
        subparsers, "train", help="train a 3D U-Net or a detector split over the cores, "
                                  "resumable",
        usage="python -m spatial_tf train {unet3d,retinanet} --model-dir DIR [options]",
        description="Train a 3D U-Net on volumes of any size (unet3d) or a RetinaNet-style\n"
                    "detector on images (retinanet), split over the cores of a TPU, or of the\n"
                    "CPU emulator without one. The same --model-dir again resumes.")
    p.add_argument("model", choices=MODELS, help="the model")
    p.add_argument("--model-dir", required=True, metavar="DIR",
                   help="checkpoints, model.json; the run resumes from it")
    p.add_argument("--data", metavar="PATH",
                   help="volume pairs or COCO images (default: synthetic)")
    p.add_argument("--annotations", metavar="FILE",
                   help="retinanet: COCO instances JSON of --data")
    p.add_argument("--image-size", type=positive_int(32, 16384), default=512, metavar="PIXELS",
                   help="retinanet: image height and width (default 512)")
    p.add_argument("--max-boxes", type=positive_int(1, 10000), default=32, metavar="N",
                   help="retinanet: boxes per image (default 32)")
    p.add_argument("--size", type=positive_int(8, 1024), default=64, metavar="VOXELS",
                   help="edge of the synthetic cubes (default 64)")
    add_cores_option(p, trained=DEFAULT_CORES)
    p.add_argument("--spec", type=int_list((5, 4)), metavar="B,D,H,W,C",
                   help="split of the batch over --cores (default: even)")
    add_device_option(p)
    p.add_argument("--replicas", type=positive_int(1, 1024), default=1, metavar="N",
                   help="replicas, each on --cores cores (default 1)")
    p.add_argument("--batch", type=positive_int(1, 4096), metavar="N",
                   help="global batch (default: one per replica)")
    p.add_argument("--steps", type=positive_int(1, 10**7), default=200, metavar="N",
                   help="global step to train to (default 200)")
    p.add_argument("--checkpoint-every", type=positive_int(1), default=50, metavar="N",
                   help="steps between checkpoints (default 50)")
    add_unet_options(p, training=True)
    p.add_argument("--crop", type=int_list((1, 3), example="32,32,32"), metavar="D,H,W",
                   help="unet3d: random windows of this shape from --data")
    p.add_argument("--spacing", type=spacing, metavar="D,H,W",
                   help="unet3d: resample NIfTI --data to this spacing (mm)")
    add_modality_option(p, training=True)
    add_nonfinite_option(p)
    p.add_argument("--bn-momentum", type=momentum, metavar="M",
                   help=f"unet3d: batch norm momentum (default {DEFAULT_BN_MOMENTUM})")
    p.add_argument("--no-progress", action="store_true",
                   help="a line every --log-every steps, no progress bar")
    p.add_argument("--log-every", type=positive_int(1), metavar="N",
                   help="steps between those lines (default: --steps / 10)")
    p.set_defaults(func=run, check=lambda args: check_args(p, args))
    return p


def check_args(parser, args):
    """Checks that need several options (argparse-style one line, exit 2); the
    ``--model-dir`` must be a directory that exists or can be created, and writable."""
    from spatial_tf.commands.outputs import check_dir

    try:
        check_dir("--model-dir", args.model_dir)
    except ValueError as e:
        parser.error(str(e))
    if args.model == "retinanet":
        from spatial_tf.commands.detection import check_train_args

        for option in ("preset", "dtype_policy", "crop", "spacing", "modality", "bn_momentum"):
            if getattr(args, option) is not None:
                parser.error(f"argument --{option.replace('_', '-')}: not allowed with "
                             f"retinanet; expected it only with unet3d")

        return check_train_args(parser, args)
    if args.annotations is not None:
        parser.error("argument --annotations: not allowed with unet3d; expected it only with "
                     "retinanet (COCO data)")
    resolve_unet_preset(args)
    resolve_cores(parser, args, default_spec, recorded_cores(args.model_dir) or DEFAULT_CORES)
    if len(args.spec) != 5 or args.spec[4] != 1:
        parser.error(f"argument --spec: {','.join(map(str, args.spec))} is not allowed with "
                     f"unet3d; expected 5 split counts (B,D,H,W,C), channels unsplit (last "
                     f"1), e.g. {','.join(map(str, default_spec(args.cores)))}")
    check_batch(parser, args)
    if args.data is None:
        pool = 2 ** (args.depth - 1)
        for axis, count in zip("DHW", args.spec[1:4]):
            if args.size % (count * pool):
                parser.error(f"argument --size: {args.size} is not allowed with --spec "
                             f"{','.join(map(str, args.spec))} and --depth {args.depth}; "
                             f"expected a multiple of {count * pool} (axis {axis} split "
                             f"{count} ways, {pool}x pooled), e.g. --size "
                             f"{max(count * pool, args.size - args.size % (count * pool))}")
    elif not os.path.exists(args.data):
        parser.error(f"argument --data: {args.data} does not exist; expected a directory of "
                     f"volume pairs or a TFRecord file")
    if args.spacing is not None and (args.data is None or not os.path.isdir(args.data)):
        what = f"with the TFRecord file {args.data}" if args.data else "without --data"
        parser.error(f"argument --spacing: not allowed {what}, which records no voxel "
                     f"spacing; expected it with a --data directory of NIfTI volumes "
                     f"(.nii, .nii.gz), whose headers give it. Fix: leave --spacing out, or "
                     f"pass NIfTI volumes")
    _check_crop(parser, args)


def _check_crop(parser, args):
    """``--crop``: with ``--data`` only, edges that fit the split and the poolings."""
    from spatial_tf.commands.sizing import crop_problem

    if args.crop is None:
        return
    if args.data is None:
        parser.error(f"argument --crop: not allowed without --data; expected it with --data "
                     f"volumes (the synthetic cubes are --size {args.size}). Fix: pass --data, "
                     f"or leave --crop out")
    if len(args.crop) == 1:
        args.crop = args.crop * 3
    problem = crop_problem(args.crop, args.spec, args.depth)
    if problem:
        parser.error(problem)


def _record(args, shape, existing=None):
    """What ``model.json`` keeps; a resumed run keeps the convolution layers and the batch
    norm (masked to the real voxels or not) it began with, and the cores it was first
    trained on (evaluate's and predict's default ``--cores``; a checkpoint restores on any)."""
    conv = existing["conv"] if existing else ("keras" if args.preset else "halo")
    masked = existing["masked_bn"] if existing else not args.preset
    cores = existing.get("cores") if existing else args.cores
    return {"model": args.model, "shape": list(shape), "classes": args.classes,
            "depth": args.depth, "filters": args.filters, "dtype_policy": args.dtype_policy,
            "preset": args.preset, "conv": conv, "masked_bn": masked,
            "modality": args.modality, "bn_momentum": args.bn_momentum,
            "spacing": args.spacing, "cores": cores}


def _existing_record(args):
    """The model dir's record with its defaults filled in (None for a new dir); a left-out
    ``--dtype-policy``, ``--modality``, ``--bn-momentum`` or ``--spacing`` becomes the
    recorded one (for a new dir: ``--modality ct``, ``--bn-momentum`` 0.9, no
    resampling). Raises ValueError when ``model.json`` is broken."""
    from spatial_tf.commands import volumes

    existing = volumes.read_record(args.model_dir)
    if existing is not None:
        existing = {**RECORD_DEFAULTS, **existing}
    for option, new in (("dtype_policy", None), ("modality", "ct"),
                        ("bn_momentum", DEFAULT_BN_MOMENTUM), ("spacing", None)):
        if getattr(args, option) is None:  # resume with what it was trained with
            setattr(args, option, existing[option] if existing else new)
    return existing


def _check_same_model(args, shape, existing):
    """ValueError when the model dir's record (``existing``) is of another model."""
    from spatial_tf.commands import volumes

    if existing is None:
        return
    record = _record(args, shape, existing)
    if existing != record:
        diff = ", ".join(f"{k} {existing.get(k)} (asked {record.get(k)})"
                         for k in sorted(record) if existing.get(k) != record.get(k))
        raise ValueError(f"argument --model-dir: {args.model_dir} holds another model ({diff}); "
                         f"expected the same model to resume. Fix: use another --model-dir, or "
                         f"the options recorded in "
                         f"{os.path.join(args.model_dir, volumes.MODEL_FILE)}")


def run(args):
    if args.model == "retinanet":
        from spatial_tf.commands.detection import run_train

        return run_train(args)
    from spatial_tf import logs
    from spatial_tf.commands import volumes
    from spatial_tf.commands.options import fail

    prog = "python -m spatial_tf train"
    logs.start_tensorflow()
    with logs.quiet():
        import keras

    from spatial_tf import train
    from spatial_tf.commands.shared import strategy_for

    try:  # every file and option is checked before anything is written
        existing = _existing_record(args)  # a resumed run's recorded --spacing, first
        found, shape = _shapes(args)
        _check_same_model(args, shape, existing)
        strategy = strategy_for(prog, args, args.cores, args.replicas)
    except (ValueError, OSError, ImportError) as e:
        return fail(prog, str(e))
    if args.dtype_policy is None:  # mixed_bfloat16 on TPU, float32 elsewhere
        from spatial_tf.models import default_dtype_policy

        with strategy.scope():
            args.dtype_policy = default_dtype_policy()
    record = _record(args, shape, existing)
    spec = [args.spec, args.spec[:4], args.spec[:4]]  # image, labels, mask
    try:
        with strategy.scope():
            model = volumes.build_model(record)
            optimizer = keras.optimizers.Adam(3e-3)
            optimizer.build(model.trainable_variables)
    except ValueError as e:
        return fail(prog, f"argument --data: {e}")
    try:  # a checkpoint of another model is refused before anything is written
        start = train.Checkpointer(args.model_dir, model=model, optimizer=optimizer).restore()
    except (train.CheckpointMismatchError, train.CheckpointUnreadableError) as e:
        return fail(prog, f"argument --model-dir: {e}")
    distributed_dataset = _data(args, strategy, shape, spec, found.sizes)
    try:
        distributed_dataset(start)  # the spec is checked against the batches before training
    except ValueError as e:
        return fail(prog, f"argument --spec: {e}")
    if existing is None:
        volumes.write_record(args.model_dir, record)
    _say_what(prog, args, strategy, spec, found, shape)
    return train_until_signal(
        args, strategy, model, optimizer, distributed_dataset,
        lambda last: f"loss {last['loss']:.4f}, mean Dice {last['dice']:.3f}", spec=spec)


def _shapes(args):
    """``(scan, shape)``: every volume's size (each file read once and checked:
    ``sizing.scan``) and the training shape."""
    from spatial_tf.commands import sizing

    found = sizing.Scan([(args.size,) * 3], [sizing.RAS_AXES]) if args.data is None else \
        sizing.scan(args.data, args.classes, args.spacing, args.nonfinite,
                    progress=False if args.no_progress else None)
    return found, sizing.training_shape(found.sizes, args.spec, args.depth, args.crop)


def _data(args, strategy, shape, spec, sizes):
    """``distributed_dataset(done)``: the training batches from the one after ``done``
    steps, of the ``--data`` volumes of ``sizes`` (checked already)."""
    from spatial_tf import data
    from spatial_tf.commands import volumes

    def distributed_dataset(done):
        def dataset_fn(context):
            ds = volumes.source(args.data, (args.size,) * 3, args.classes,
                                spacing=args.spacing, nonfinite=args.nonfinite,
                                shapes=sizes).shard(
                context.num_input_pipelines, context.input_pipeline_id)
            # the pipeline is deterministic: skip the examples the first `done` steps took
            count = int(ds.cardinality())
            skip = done * args.batch // context.num_input_pipelines
            ds = ds.repeat().skip(skip % count if count > 0 else skip)
            return volumes.training_examples(ds, shape, args.modality, first=skip,
                                             seed=context.input_pipeline_id)

        return data.distribute(strategy, dataset_fn, args.batch, spec=spec)

    return distributed_dataset


def _say_what(prog, args, strategy, spec, found, shape):
    from spatial_tf.commands.shared import where
    from spatial_tf.commands.sizing import RAS_AXES, describe

    model_name = args.model + (f" ({args.preset} preset)" if args.preset else "")
    order = "" if all(tuple(a) == RAS_AXES for a in found.axes) else " (RAS+ voxel order)"
    sizes = found.sizes
    print(f"{prog}: {model_name} {'x'.join(map(str, shape))}{order}, {args.classes} classes, "
          f"{args.dtype_policy} on {where(strategy)}, spec {spec[:2]}, to step {args.steps} in "
          f"{args.model_dir}", flush=True)
    what = f"--data {args.data}: {plural(len(sizes), 'volume')}" if args.data else \
        "synthetic CT volumes"
    if args.spacing is not None:
        what += f" resampled to {'x'.join(f'{s:g}' for s in args.spacing)} mm"
    print(f"{prog}: {what}, {describe(sizes, shape, found.axes)}; --modality {args.modality}, "
          f"--bn-momentum {args.bn_momentum}", flush=True)
