"""``python -m spatial_tf demo``: a 3D U-Net on CT-like volumes, split over emulated cores.

Makes synthetic CT-like volumes (body, organs, a lesion) and their label masks, prints
the layout table of the split batch, trains a small 3D U-Net for a few steps with
``spatial_tf.train`` on ``spatial_tf.Emulator`` (XLA's SPMD partitioner splits every
step over virtual CPU cores, as on a TPU) with a progress bar, then prints the per-core
memory and communication report against the unpartitioned step, the parity verdict of
the partitioned step against the unpartitioned one, the Dice per class of its
predictions on held-out volumes next to what a guess that ignores the image can score,
and writes a PNG of a held-out volume's middle slice: input, label and prediction.
"""
import functools
import os
import sys
import tempfile

from spatial_tf.commands.options import add_command, add_cores_option, positive_int
from spatial_tf.table import plural

__all__ = ["add_parser", "run", "make_spec", "check_args"]

MAX_SIZE, MAX_BATCH, MAX_STEPS = 256, 64, 10000
DEPTH, FILTERS, CLASSES = 2, 8, 3
CLASS_NAMES = ("background", "organ", "lesion")
CLASS_WEIGHTS = (1.0, 1.0, 4.0)  # the lesion, 0.3% of the voxels, counts 4 times
HELD_OUT = 3  # volumes scored after training (seeds 10000, 10001, ...)
# what the memory table's rows are, printed under it
MEMORY_ROWS = (
    "argument: what the step reads on each core: the weights, the optimizer state and its "
    "piece of the batch",
    "output: what the step writes: the new weights and optimizer state, the loss and the "
    "Dice",
    "alias: the outputs written in place of their arguments (the variables), counted once",
    "temp: activations, gradients and scratch space while the step runs; peak = argument + "
    "output - alias + temp",
)


def add_parser(subparsers):
    p = add_command(
        subparsers, "demo", help="train a small 3D U-Net split over emulated cores and report it",
        description="Train a small 3D U-Net on synthetic CT-like volumes split over emulated\n"
                    "CPU cores, then print its memory and communication per core, its parity\n"
                    "with the unpartitioned step and its Dice, and write a slice PNG.")
    add_cores_option(p)
    p.add_argument("--size", type=positive_int(1, MAX_SIZE), default=32, metavar="VOXELS",
                   help="edge of the synthetic cubes (default 32)")
    p.add_argument("--batch", type=positive_int(1, MAX_BATCH), default=1, metavar="N",
                   help="volumes per step (default 1)")
    p.add_argument("--steps", type=positive_int(1, MAX_STEPS), default=20, metavar="N",
                   help="training steps (default 20)")
    p.add_argument("--png", metavar="PATH",
                   help="the slice PNG (default: in a new temporary folder)")
    p.set_defaults(func=run, check=lambda args: check_args(p, args))
    return p


def make_spec(cores):
    """The demo's spec: the volume's three spatial axes split as evenly as possible,
    the labels alike (they meet the logits voxel by voxel, so nothing moves between
    layouts).

    >>> make_spec(8)
    [[1, 2, 2, 2, 1], [1, 2, 2, 2]]
    >>> make_spec(4)
    [[1, 2, 2, 1, 1], [1, 2, 2, 1]]
    """
    from spatial_tf.commands.shared import default_spec

    grid = default_spec(cores)
    return [grid, grid[:4]]


def check_args(parser, args):
    """Refuse a ``--size`` the spec and the U-Net's pooling cannot split evenly, and a
    ``--png`` that cannot be written (exit 2)."""
    from spatial_tf.commands.outputs import check_file

    if args.png is not None:
        try:
            check_file("--png", args.png, example="slice.png")
        except ValueError as e:
            parser.error(str(e))
    grid = make_spec(args.cores)[0][1:4]
    step = max(grid) * 2 ** (DEPTH - 1)
    if args.size % step or args.size < 8:
        parser.error(
            f"argument --size: {args.size} is not allowed with --cores {args.cores}, which "
            f"splits the volume {'x'.join(map(str, grid))} ways before a 2x pooling; expected "
            f"a multiple of {step}, at least 8, e.g. --size {max(step, 8, args.size - args.size % step)}"
        )


def run(args):
    from spatial_tf import logs

    logs.start_tensorflow()  # its start-up lines stay hidden (SPATIAL_TF_VERBOSE=1)
    import spatial_tf
    from spatial_tf import data

    spec = make_spec(args.cores)
    shape = (args.size,) * 3
    ds = data.synthetic_ct_dataset(shape, num_volumes=8, num_classes=CLASSES)
    batched = ds.batch(args.batch, drop_remainder=True)
    print(f"spatial_tf demo: 3D U-Net on {plural(args.cores, 'emulated core')}, CT-like "
          f"{'x'.join(map(str, shape))} volumes, batch {args.batch}, "
          f"{plural(args.steps, 'step')}\n")
    print("spec [image, labels]:", spec, "\n")
    print(spatial_tf.summary(batched.element_spec, spec, args.cores), "\n")

    strategy, model, step_fn, last = _train(args, spec, shape, ds)
    batch = next(iter(batched))
    print(strategy.report(step_fn, args=(batch,)))
    print("\n".join(MEMORY_ROWS) + "\n")
    comparison = strategy.compare(step_fn, args=(batch,))
    print(str(comparison).splitlines()[0])
    print(compared(comparison))
    _show_held_out(args, model, shape, last["step"])
    if not comparison.ok:
        print("\ndemo: the partitioned step does not match the unpartitioned one "
              "(python -c 'import spatial_tf' and Emulator.compare show every row).",
              file=sys.stderr)
        return 1
    return 0


def _train(args, spec, shape, ds):
    """Train the U-Net on the emulator; ``(strategy, model, its train step, last logs)``."""
    from spatial_tf import logs

    with logs.quiet():
        import keras

    import spatial_tf
    from spatial_tf import data, train
    from spatial_tf.commands.shared import where
    from spatial_tf.models import UNetOptions, unet3d

    strategy = spatial_tf.Emulator(num_cores_per_replica=args.cores)  # stands for TPUStrategy
    with strategy.scope():
        keras.utils.set_random_seed(0)
        # batch norm's inference statistics must follow the weights within 20 steps: with
        # 0.9 they still lag and the prediction is background only
        model = unet3d(shape + (1,), num_classes=CLASSES, depth=DEPTH, base_filters=FILTERS,
                       options=UNetOptions(norm_momentum=0.5))
        optimizer = keras.optimizers.Adam(3e-3)
        optimizer.build(model.trainable_variables)
    loss_fn = functools.partial(train.segmentation_loss, class_weights=CLASS_WEIGHTS)
    dist = data.distribute(strategy, lambda context: ds.repeat(), args.batch, spec=spec)
    print(f"training on {where(strategy)} (the first step traces and compiles)", flush=True)
    with tempfile.TemporaryDirectory() as model_dir:
        last = train.train(strategy, model, optimizer, dist, steps=args.steps,
                           model_dir=model_dir, spec=spec,
                           options=train.TrainOptions(checkpoint_every=args.steps,
                                                      loss_fn=loss_fn))
    sys.stderr.flush()
    print(f"step {last['step']}: loss {last['loss']:.4f}, mean Dice {last['dice']:.3f}\n",
          flush=True)
    return strategy, model, train.make_train_step(model, optimizer, spec, loss_fn), last


def _show_held_out(args, model, shape, step):
    """Print the held-out Dice and write the PNG of one held-out volume."""
    import numpy as np

    from spatial_tf import data
    from spatial_tf.commands.predict import slice_png

    volumes = [data.synthetic_ct(shape, seed=10000 + i, num_classes=CLASSES)
               for i in range(HELD_OUT)]
    windowed = data.window(np.stack([v[0] for v in volumes]), preset="abdomen")
    labels = np.stack([v[1] for v in volumes])
    logits = model(windowed, training=False).numpy()
    print(held_out_dice(labels, logits))
    png = args.png or os.path.join(tempfile.mkdtemp(prefix="spatial_tf_demo_"), "slice.png")
    slice_png(png, windowed.numpy()[0, ..., 0], labels[0], np.argmax(logits[0], axis=-1),
              title=f"held-out volume after {plural(step, 'step')}", class_names=CLASS_NAMES)
    print(f"slice PNG (input / label / prediction): {png}")


def compared(comparison) -> str:
    """One line: what the parity verdict's results are.

    >>> from types import SimpleNamespace as Row
    >>> print(compared(Row(rows=[Row(path="loss"), Row(path="update of kernel")])))
    results: the step's 1 outputs and 1 variable updates, each computed partitioned and unpartitioned from the same weights and batch, and compared
    """
    updates = sum(row.path.startswith("update of ") for row in comparison.rows)
    return (f"results: the step's {len(comparison.rows) - updates} outputs and {updates} "
            f"variable updates, each computed partitioned and unpartitioned from the same "
            f"weights and batch, and compared")


def held_out_dice(labels, logits) -> str:
    """One line: Dice per class of ``logits`` against ``labels``, and per foreground class
    chance level: a guess made voxel by voxel regardless of the image, the class with
    probability ``q``, expects Dice ``2pq / (p + q)`` on a class covering a fraction ``p``
    of the voxels, at most ``2p / (1 + p)`` (predicting it everywhere).

    >>> import numpy as np
    >>> labels = np.zeros((2, 4, 4, 4), int); labels[:, :2, :2, :2] = 1
    >>> print(held_out_dice(labels, np.eye(3)[labels]))
    held-out Dice on 2 volumes: background 1.000, organ 1.000, lesion 1.000; chance (voxels guessed regardless of the image) at most organ 0.222, lesion 0.000
    """
    from spatial_tf import metrics

    per_class, _ = metrics.dice_score(labels, logits)
    names = CLASS_NAMES if len(per_class) == len(CLASS_NAMES) else range(len(per_class))
    fractions = [float((labels == c).mean()) for c in range(len(per_class))]
    scores = ", ".join(f"{n} {d:.3f}" for n, d in zip(names, per_class.numpy()))
    chance = ", ".join(f"{n} {2 * p / (1 + p):.3f}" for n, p in zip(names[1:], fractions[1:]))
    return (f"held-out Dice on {plural(len(labels), 'volume')}: {scores}; chance (voxels guessed "
            f"regardless of the image) at most {chance}")


if __name__ == "__main__":  # pragma: no cover
    from spatial_tf.__main__ import main

    sys.exit(main(["demo"] + sys.argv[1:]))
