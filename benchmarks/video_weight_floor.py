"""Benchmark: where the temp that does not split comes from in a MoViNet-A0 train step.

The same MoViNet-A0 (``benchmarks/video_movinet.py``'s ``movinet_classifier``, random
init, after ``partition_friendly``) on ``Emulator(--cores)`` with one spec, as five
steps that each add one part of a train step: the forward pass and loss; the gradients
(returned, no update); an SGD update; an Adam update (two slots per weight); Adam with
the gradients kept whole on every core (``partition_friendly(model, optimizer=...)``,
``keep_gradients_whole``). Printed per step: temp per core, the unpartitioned step's
temp, their ratio, and the floor, temp per core minus the unpartitioned temp / cores
(what stays whole on every core, 0 for an ideal split). The floor's growth from one row
to the next is what that part adds. With ``--parts``, two more steps return the
gradients of MoViNet's depthwise kernels alone and of every other weight, to tell which
layers' kernel gradients make the floor. XLA:CPU figures from the emulator; with
``--target``, XLA's TPU compiler's for that generation beside them (compile-only).

    python benchmarks/video_weight_floor.py                       # 2x8x192x192, [1,1,2,2,1]
    python benchmarks/video_weight_floor.py --size 64 --spec 1,4,1,1,1
    python benchmarks/video_weight_floor.py --size 64 --parts --target v5e
    python benchmarks/video_weight_floor.py --frames 32 --spec 1,4,1,1,1 --steps adam

It needs Model Garden: run it in the environment of ``tests/integration``
(``pip install -e ".[model-garden]"``).
"""
import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

STEPS = ("forward", "gradients", "sgd", "adam", "adam, gradients whole")
# the gradients of some weights only: which layers' kernel gradients make the floor
PARTS = ("gradients, depthwise kernels only", "gradients, all but depthwise kernels")


def _is_depthwise_kernel(variable):
    """A grouped Conv3D's kernel with one input channel per group (MoViNet's depthwise)."""
    shape = variable.shape
    return len(shape) == 5 and shape[-2] == 1 and shape[-1] > 1


def make_step(kind, model, optimizer, spec):
    """One replica's step of ``kind`` (one of ``STEPS`` or ``PARTS``)."""
    import tensorflow as tf

    from video_movinet import clip_loss, train_step

    if kind not in ("forward", "gradients") + PARTS:
        return train_step(model, optimizer, spec)  # an update: SGD or Adam
    weights = model.trainable_variables
    if kind in PARTS:
        weights = [v for v in weights if _is_depthwise_kernel(v) == (kind == PARTS[0])]

    def step(clips, labels):
        if kind == "forward":
            return clip_loss(model, clips, labels, spec)
        with tf.GradientTape() as tape:
            loss = clip_loss(model, clips, labels, spec)
        return loss, tape.gradient(loss, weights)

    return step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--size", type=int, default=192)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--cores", type=int, default=4)
    parser.add_argument("--spec", default="1,1,2,2,1")
    parser.add_argument("--parts", action="store_true",
                        help="also the gradients of the depthwise kernels alone and of "
                             "every other weight")
    parser.add_argument("--steps", default=",".join(STEPS),
                        help=f"which steps, comma-separated, of: {', '.join(STEPS)}")
    parser.add_argument("--target", default=None,
                        help="a TPU generation, e.g. v5e: also the TPU compiler's temp")
    args = parser.parse_args(argv)

    import tensorflow as tf
    import tf_keras

    import spatial_tf
    from spatial_tf.table import format_bytes, format_table
    from video_movinet import movinet_classifier

    spec = [int(c) for c in args.spec.split(",")]
    emulator = spatial_tf.Emulator(num_cores_per_replica=args.cores)
    clips = tf.random.stateless_normal((args.batch, args.frames, args.size, args.size, 3),
                                       (0, 1))
    labels = tf.range(args.batch) % 5
    rows = []
    chosen = [kind.strip() for kind in args.steps.split(",")]
    unknown = sorted(set(chosen) - set(STEPS))
    if unknown:
        parser.error(f"--steps: {', '.join(unknown)} is not a step; expected some of "
                     f"{', '.join(STEPS)}")
    for kind in [k for k in STEPS if k in chosen] + list(PARTS if args.parts else ()):
        start = time.perf_counter()
        with emulator.scope():
            tf_keras.utils.set_random_seed(0)
            model = movinet_classifier(args.frames, args.size, args.batch, 5)
            optimizer = (tf_keras.optimizers.SGD(0.01) if kind == "sgd"
                         else tf_keras.optimizers.Adam(1e-3))
            optimizer.build(model.trainable_variables)
        whole = optimizer if kind == "adam, gradients whole" else None
        spatial_tf.layers.partition_friendly(model, optimizer=whole, warn=False)
        report = emulator.report(make_step(kind, model, optimizer, spec), (clips, labels),
                                 target=args.target)
        rows.append([kind, *_figures(report.partitioned, report.unpartitioned, args.cores)])
        if args.target:
            tpu = report.tpu
            rows[-1] += (_figures(tpu["partitioned"], tpu["unpartitioned"], args.cores)
                         if tpu["partitioned"] and tpu["unpartitioned"] else ["-"] * 4)
        rows[-1].append(f"{time.perf_counter() - start:.0f}")
        print(" | ".join(rows[-1]), flush=True)
    weights = sum(v.shape.num_elements() * v.dtype.size for v in model.trainable_variables)
    print(f"\nMoViNet-A0 + classifier head after partition_friendly, clips "
          f"{args.batch}x{args.frames}x{args.size}x{args.size}x3 split {spec} over "
          f"{args.cores} emulated cores; trainable weights {format_bytes(weights)}; "
          f"XLA:CPU temp" + (f"; XLA:TPU {args.target} compile-only beside it"
                             if args.target else ""))
    columns = ["temp per core", "one core", "ratio", "floor (per core - one core / cores)"]
    headers = ["step", *columns]
    if args.target:
        headers += [f"{c}, {args.target} (TPU compiler)" for c in columns]
    print(format_table(headers + ["s"], rows))


def _figures(partitioned, unpartitioned, cores):
    """Temp per core, on one core, their ratio and the floor, formatted."""
    from spatial_tf.table import format_bytes

    part, one = partitioned["temp"], unpartitioned["temp"]
    return [format_bytes(part), format_bytes(one), f"{part / one:.2f}" if one else "-",
            format_bytes(part - one / cores)]


if __name__ == "__main__":
    main()
