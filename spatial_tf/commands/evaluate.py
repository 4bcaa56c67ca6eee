"""``python -m spatial_tf evaluate``: Dice per class of a trained 3D U-Net on held-out
volumes, or COCO mAP of a trained detector on held-out images.

Rebuilds the model recorded in ``MODEL_DIR/model.json``, restores its last checkpoint
(written on any core count) and runs it split over ``--cores`` (TPU if present, else the
emulator; 1: unpartitioned) on ``--data`` or on held-out synthetic volumes.
"""
import argparse
import os
import sys
from typing import Callable

from spatial_tf.commands.options import positive_int, power_of_two
from spatial_tf.commands.shared import load, restore  # noqa: F401 (kept importable from here)

__all__ = ["add_parser", "run", "restore", "load", "run_for_model"]

PROG = "python -m spatial_tf evaluate"


def add_parser(subparsers):
    p = subparsers.add_parser("evaluate", help="Dice per class (unet3d) or COCO mAP "
                              "(retinanet) on held-out data", description=__doc__)
    p.add_argument("--model-dir", required=True, metavar="DIR", help="a train --model-dir")
    p.add_argument("--data", metavar="PATH",
                   help="unet3d: volume pairs directory or TFRecord file; retinanet: COCO "
                        "images directory, with --annotations (default: held-out synthetic)")
    p.add_argument("--annotations", metavar="FILE",
                   help="retinanet: the COCO instances JSON of the --data images")
    p.add_argument("--volumes", type=positive_int(1, 10**6), default=4, metavar="N",
                   help="synthetic held-out volumes or images (default 4)")
    p.add_argument("--cores", type=power_of_two, default=1, metavar="N",
                   help="cores per replica to evaluate on (default 1: unpartitioned)")
    p.set_defaults(func=run)
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

    try:
        record, latest = load(prog, args.model_dir)
    except (ValueError, OSError) as e:
        return fail(prog, str(e))
    command = retinanet if record.get("model") == "retinanet" else unet3d
    return command(args, record, latest)


def run(args):
    from spatial_tf import logs
    from spatial_tf.commands.detection import run_evaluate

    logs.start_tensorflow()
    return run_for_model(PROG, args, _run_unet3d, run_evaluate)


def _run_unet3d(args, record, latest):
    from spatial_tf.commands import volumes
    from spatial_tf.commands.options import fail

    prog = PROG
    import numpy as np
    import tensorflow as tf

    import spatial_tf
    from spatial_tf import data, train

    try:
        shape = tuple(record["shape"])
        ds = volumes.dataset(args.data, shape[0], record["classes"], seed=volumes.HELD_OUT_SEED,
                             num_volumes=args.volumes)
        if tuple(ds.element_spec[1].shape.as_list()) != shape:
            raise ValueError(f"argument --data: {args.data} has volumes of shape "
                             f"{tuple(ds.element_spec[1].shape.as_list())}; expected {shape}, the "
                             f"trained model's. Fix: resample or pad the volumes")
    except (ValueError, OSError, ImportError) as e:
        return fail(prog, str(e))
    if args.cores > 1:
        from spatial_tf.commands.shared import default_spec

        strategy = spatial_tf.auto(num_cores_per_replica=args.cores)
        grid = default_spec(args.cores)
        spec = [grid, grid[:4]]
    else:
        strategy, spec = tf.distribute.get_strategy(), None
    with strategy.scope():
        model = volumes.build_model(record)
    step = restore(model, latest)
    step_fn = train.make_eval_step(model, spec)
    dist = data.distribute(strategy, lambda context: ds, strategy.num_replicas_in_sync, spec=spec)

    @tf.function
    def evaluate(batch):
        return strategy.run(step_fn, args=(batch,))

    scores = []
    for batch in dist:
        out = evaluate(batch)
        scores += [np.asarray(v) for v in strategy.experimental_local_results(out)]
    per_class = np.nanmean(np.stack(scores), axis=0)
    print(f"{os.path.basename(latest)} (step {step}) on {len(scores)} held-out volumes, "
          f"{'x'.join(map(str, shape))}, {strategy.__class__.__name__}:")
    print("class  Dice")
    for k, v in enumerate(per_class):
        print(f"{k:5d}  {v:.4f}")
    print(f" mean  {np.nanmean(per_class):.4f}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    from spatial_tf.__main__ import main

    sys.exit(main(["evaluate"] + sys.argv[1:]))
