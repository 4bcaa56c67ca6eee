"""``python -m spatial_tf evaluate``: Dice per class of a trained 3D U-Net on held-out
volumes, or COCO mAP of a trained detector on held-out images.

Rebuilds the model recorded in ``MODEL_DIR/model.json``, restores its last checkpoint
(written on any core count) and runs it split over ``--cores`` (TPU if present, else the
emulator; 1: unpartitioned) on ``--data`` or on held-out synthetic volumes. Volumes of
any size: intensities are scaled for the recorded ``--modality``, then every volume is
zero-padded at the end of each axis to the largest one's size (at least the training
shape) rounded up to what the split and the poolings accept; the padding is masked out
of Dice, which is the Dice of the unpadded volume. Dice per class is the mean over
volumes of each volume's Dice.

A model trained with ``--spacing`` (recorded in ``model.json``) sees every ``--data``
volume resampled to that spacing, as in training; its prediction is resampled back to
the volume's own grid (nearest neighbour) and Dice is computed there, against the label
file as it is: the Dice a user measures on the mask ``predict`` writes.
"""
import argparse
import os
import sys
from typing import Callable

from spatial_tf.commands.options import (add_command, add_cores_option, add_device_option,
                                         add_modality_option, add_nonfinite_option,
                                         positive_int, trained_model_dir)
from spatial_tf.table import plural
from spatial_tf.commands.shared import load, restore  # noqa: F401 (kept importable from here)

__all__ = ["add_parser", "run", "restore", "load", "run_for_model"]

PROG = "python -m spatial_tf evaluate"


def add_parser(subparsers):
    p = add_command(
        subparsers, "evaluate", help="Dice per class (unet3d) or COCO mAP (retinanet) on "
                                     "held-out data",
        description="Dice per class of a trained 3D U-Net on held-out volumes, or COCO mAP of\n"
                    "a trained detector on held-out images, split over --cores of a TPU, or of\n"
                    "the CPU emulator without one (--cores 1 here: unpartitioned).")
    p.add_argument("--model-dir", required=True, metavar="DIR", help="a train --model-dir")
    p.add_argument("--data", metavar="PATH",
                   help="volume pairs or COCO images (default: synthetic)")
    p.add_argument("--annotations", metavar="FILE",
                   help="retinanet: COCO instances JSON of --data")
    p.add_argument("--volumes", type=positive_int(1, 10**6), default=4, metavar="N",
                   help="synthetic held-out volumes or images (default 4)")
    add_cores_option(p, trained=1)
    add_device_option(p)
    add_modality_option(p)
    add_nonfinite_option(p)
    p.set_defaults(func=run, check=lambda args: trained_model_dir(PROG, args))
    return p


def run_for_model(prog: str, args: argparse.Namespace, unet3d: Callable[..., int],
                  retinanet: Callable[..., int]) -> int:
    """Load ``args.model_dir`` and run the command for the model it holds:
    ``unet3d(args, record, latest_checkpoint)``, or ``retinanet(...)`` for a detector. A
    dir without a trained model fails as the parser would: its error, exit status 2.

    >>> import argparse
    >>> run_for_model("evaluate", argparse.Namespace(model_dir="no/such/dir"), print, print)
    2
    """
    from spatial_tf.commands.options import fail
    from spatial_tf.commands.volumes import RECORD_DEFAULTS

    try:
        record, latest = load(prog, args.model_dir)
        if record.get("model") == "retinanet":
            if getattr(args, "modality", None) is not None:
                raise ValueError(f"argument --modality: not allowed with {args.model_dir}, a "
                                 f"retinanet model dir; expected it only with unet3d. Fix: "
                                 f"leave --modality out")
            return retinanet(args, record, latest)
        record = {**RECORD_DEFAULTS, **record}
        _check_modality(args, record)
    except (ValueError, OSError) as e:
        return fail(prog, str(e))
    return unet3d(args, record, latest)


def _check_modality(args, record):
    """``--modality``, when given, must be the recorded one (ValueError otherwise)."""
    from spatial_tf.commands.volumes import MODEL_FILE

    given = getattr(args, "modality", None)
    if given is not None and given != record["modality"]:
        raise ValueError(f"argument --modality: {given} is not the modality {args.model_dir} "
                         f"was trained with; expected {record['modality']}, recorded in "
                         f"{os.path.join(args.model_dir, MODEL_FILE)}. Fix: leave --modality "
                         f"out, or train a model with --modality {given}")


def run(args):
    from spatial_tf import logs
    from spatial_tf.commands.detection import run_evaluate

    logs.start_tensorflow()
    return run_for_model(PROG, args, _run_unet3d, run_evaluate)


def _run_unet3d(args, record, latest):
    from spatial_tf.commands import sizing, volumes
    from spatial_tf.commands.options import fail
    from spatial_tf.commands.shared import default_spec, strategy_for, where

    grid = default_spec(args.cores)
    spacing = record["spacing"] if args.data is not None else None  # synthetic: model's grid
    try:  # every file read once and checked before any work
        found = sizing.Scan([tuple(record["shape"])], [sizing.RAS_AXES]) if args.data is None \
            else sizing.scan(args.data, record["classes"], spacing, args.nonfinite,
                             trained=True)
        sizes = found.sizes
        shape = sizing.eval_shape(sizes, grid, record["depth"], trained=record["shape"])
        ds = volumes.padded_examples(
            volumes.source(args.data, record["shape"], record["classes"],
                           seed=volumes.HELD_OUT_SEED, num_volumes=args.volumes,
                           spacing=spacing, nonfinite=args.nonfinite, shapes=sizes),
            shape, record["modality"])
        partitioned = args.cores > 1 or args.device == "tpu"
        strategy = strategy_for(PROG, args, args.cores) if partitioned else None
    except (ValueError, OSError, ImportError) as e:
        return fail(PROG, str(e))
    import numpy as np
    import tensorflow as tf

    if strategy is None:   # --cores 1: unpartitioned
        strategy = tf.distribute.get_strategy()
    spec = [grid, grid[:4], grid[:4]] if partitioned else None
    if spacing is None:
        step, per_volume = _dice(strategy, spec, record, latest, ds, shape)
        how = sizing.describe(sizes, shape, found.axes)
    else:
        step, masks = _dice(strategy, spec, record, latest, ds, shape, predict=True)
        per_volume = _dice_on_own_grids(masks, volumes.pair_files(args.data), sizes,
                                        record["classes"])
        how = (f"resampled to {'x'.join(f'{s:g}' for s in spacing)} mm "
               f"({sizing.describe(sizes, shape, found.axes)}), Dice on each volume's own "
               f"grid")
    per_class = np.nanmean(per_volume, axis=0)
    print(f"{os.path.basename(latest)} (step {step}) on "
          f"{plural(len(per_volume), 'held-out volume')}, "
          f"{how}, on {where(strategy)}:")
    print("class  Dice")
    for k, v in enumerate(per_class):
        print(f"{k:5d}  {v:.4f}")
    print(f" mean  {np.nanmean(per_class):.4f}")
    return 0


def _dice(strategy, spec, record, latest, ds, shape, predict=False):
    """``(step, per_volume)``: each volume's Dice per class, the padding masked (with
    ``predict``: each volume's predicted class mask, padded, instead), on ``strategy``
    split as ``spec`` (None: unpartitioned)."""
    import numpy as np
    import tensorflow as tf

    from spatial_tf import data, train
    from spatial_tf.commands import volumes

    with strategy.scope():
        model = volumes.build_model(record, shape)
    step = restore(model, latest)
    step_fn = _predict_step(model, spec) if predict else train.make_eval_step(model, spec)
    dist = data.distribute(strategy, lambda context: ds, strategy.num_replicas_in_sync, spec=spec)

    @tf.function
    def evaluate(batch):
        return strategy.run(step_fn, args=(batch,))

    scores = []
    for batch in dist:
        out = evaluate(batch)
        scores += [np.asarray(v) for v in strategy.experimental_local_results(out)]
    return step, (scores if predict else np.stack(scores))


def _predict_step(model, spec):
    """``step(batch) -> class mask`` (int32, the batch's spatial shape), split as ``spec``."""
    import tensorflow as tf

    from spatial_tf.steps import run_model, split_segmentation_batch

    def step(batch):
        image, _, mask = split_segmentation_batch(tuple(batch), spec)
        return tf.argmax(run_model(model, image, mask, training=False), axis=-1,
                         output_type=tf.int32)

    return step


def _dice_on_own_grids(masks, pairs, sizes, num_classes):
    """Each volume's Dice per class on its own grid: ``masks[i]`` (a batch of one padded
    mask at the model's spacing) cropped to ``sizes[i]``, resampled back to the shape of
    ``pairs[i]``'s label file by nearest neighbour, scored against that file."""
    import numpy as np

    from spatial_tf import data, metrics

    scores = []
    for mask, size, (image_path, label_path) in zip(masks, sizes, pairs):
        labels = data.read_labels(label_path, image=image_path)
        mask = np.asarray(mask)[0][tuple(map(slice, size))]
        back = data.resample_to_shape(mask, labels.shape, order=0)
        per_class, _ = metrics.dice_score(labels[None], back[None], num_classes)
        scores.append(per_class.numpy())
    return np.stack(scores)


if __name__ == "__main__":  # pragma: no cover
    from spatial_tf.__main__ import main

    sys.exit(main(["evaluate"] + sys.argv[1:]))
