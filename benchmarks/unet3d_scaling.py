"""Benchmark: per-core memory of a split 3D U-Net train step on 1, 2, 4, 8 emulated cores,
and its training throughput on the emulator next to TensorFlow's own one-device run.

For each spec family (the order in which axes are split as the core count doubles) and
core count N, the train step (3D U-Net, batch norm, SGD, spatial_tf's cross-entropy +
soft Dice) is compiled by XLA's SPMD partitioner on the emulator. Printed per core: temp
and peak bytes, the memory scaling efficiency E(N) = temp(1) / (N * temp(N)), where
temp(1) is the unpartitioned program's, the collectives by kind (count, bytes) and every
activation-sized all-gather / all-to-all with the op it comes from.

Then the throughput (volumes per second, the median of ``--steps`` timed steps after one
untimed): the same step run on the emulator with the 8-core spec of lowest temp, and as
TensorFlow runs it on its one CPU device (``tf.function(jit_compile=True)``, no split).
The emulated cores share this machine's CPU cores, so the emulator's figure is the cost of
checking the partitioned program, not a TPU forecast.

    python benchmarks/unet3d_scaling.py                  # 64^3, depth 3, 8-32 filters
    python benchmarks/unet3d_scaling.py --size 96
    python benchmarks/unet3d_scaling.py --preset model_garden --steps 2
    python benchmarks/unet3d_scaling.py --size 32 --steps 0   # memory only
    python benchmarks/unet3d_scaling.py --conv keras          # keras.layers.Conv3D instead
    python benchmarks/unet3d_scaling.py --preset model_garden --partition-friendly
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# spec at 8 cores -> the axes split at 2, 4, 8 cores (doubling in this order)
FAMILIES = {
    "1,8,1,1,1": [1, 1, 1],
    "1,2,2,2,1": [1, 2, 3],
    "1,4,2,1,1": [1, 1, 2],
}
KINDS = ("all-reduce", "all-gather", "all-to-all", "collective-permute", "reduce-scatter")


def spec_at(family, cores):
    """The family's spec on ``cores`` (1, 2, 4 or 8).

    >>> spec_at("1,2,2,2,1", 4), spec_at("1,4,2,1,1", 2)
    ([1, 2, 2, 1, 1], [1, 2, 1, 1, 1])
    """
    spec = [1] * 5
    for axis in FAMILIES[family][: cores.bit_length() - 1]:
        spec[axis] *= 2
    return spec


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=64, help="volume edge (default 64)")
    p.add_argument("--preset", choices=["model_garden"], default=None,
                   help="a published U-Net instead of spatial_tf's (model_garden: Model "
                        "Garden's volumetric 3D U-Net, 4 levels, 32-512 filters)")
    p.add_argument("--depth", type=int, default=None, help="U-Net levels (default 3, or the preset's)")
    p.add_argument("--filters", type=int, default=None,
                   help="filters at the top level (default 8, or the preset's)")
    p.add_argument("--classes", type=int, default=3, help="classes (default 3)")
    p.add_argument("--conv", choices=["halo", "keras"], default="halo",
                   help="the U-Net's convolutions: spatial_tf.layers.HaloConv3D (default) or "
                        "keras.layers.Conv3D after a Concatenate layer")
    p.add_argument("--dtype-policy", default="float32",
                   help="Keras dtype policy of the layers (default float32; mixed_bfloat16)")
    p.add_argument("--partition-friendly", action="store_true",
                   help="call spatial_tf.layers.partition_friendly(model) before the first step")
    p.add_argument("--steps", type=int, default=3,
                   help="timed steps per throughput figure (default 3; 0: memory only)")
    args = p.parse_args(argv)

    import keras
    import numpy as np
    import tensorflow as tf

    import spatial_tf
    from spatial_tf.models import UNetOptions, unet3d
    from spatial_tf.models.unet3d_presets import PRESETS
    from spatial_tf.table import format_bytes, format_table
    from spatial_tf.train import segmentation_loss

    defaults = PRESETS[args.preset] if args.preset else {"depth": 3, "base_filters": 8}
    depth = args.depth or defaults["depth"]
    filters = args.filters or defaults["base_filters"]
    keras.utils.set_random_seed(0)
    options = None if args.preset else UNetOptions(conv=args.conv)
    model = unet3d((args.size,) * 3 + (1,), num_classes=args.classes, depth=depth,
                   base_filters=filters, preset=args.preset, dtype_policy=args.dtype_policy,
                   options=options)
    changed = 0
    if args.partition_friendly:
        changes = spatial_tf.layers.partition_friendly(model)
        changed = len(spatial_tf.layers.changed_layers(changes))
    optimizer = keras.optimizers.SGD(0.01)
    optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(0)
    image = tf.constant(rng.normal(size=(1,) + (args.size,) * 3 + (1,)), tf.float32)
    labels = tf.constant(rng.integers(0, args.classes, size=(1,) + (args.size,) * 3), tf.int32)
    top = filters * (2 if args.preset else 1) * 2 ** (depth - 1)
    title = ("Model Garden's volumetric 3D U-Net" if args.preset else "3D U-Net")
    convs = "" if args.preset else f"{'HaloConv3D' if args.conv == 'halo' else 'Conv3D'}, "
    description = (f"{title} depth {depth}, {filters}-{top} filters, {convs}batch norm, "
                   f"{model.count_params() / 1e6:.2f} M parameters, {args.dtype_policy}, "
                   f"{args.size}^3, {args.classes} classes, batch 1, SGD, spatial_tf "
                   f"cross-entropy + soft Dice"
                   + (f", partition_friendly ({changed} layers changed)"
                      if args.partition_friendly else ""))
    print(description, flush=True)

    def make_step(spec):
        def train_step(image, labels):
            if spec is not None:
                image, labels = spatial_tf.split((image, labels), [spec, spec[:-1]])
            with tf.GradientTape() as tape:
                loss = segmentation_loss(labels, model(image, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        return train_step

    rows, gathers, at_8, reports = [], [], {}, {}
    for family in FAMILIES:
        for cores in (2, 4, 8):
            spec = spec_at(family, cores)
            if tuple(spec) in reports:  # e.g. [1,2,1,1,1] starts every family
                rows.append([family] + reports[tuple(spec)])
                continue
            emulator = spatial_tf.Emulator(num_cores_per_replica=cores)
            train_step = make_step(spec)
            report = emulator.report(train_step, args=(image, labels))
            temp1 = report.unpartitioned["temp"]
            if not rows:
                rows.append(["(unpartitioned)", "-", 1, format_bytes(temp1),
                             format_bytes(report.unpartitioned["peak"]), "1.00", ""])
            kinds = report.by_kind()
            collectives = ", ".join(
                f"{k} {kinds[k]['count']} / {format_bytes(kinds[k]['bytes'])}"
                for k in KINDS if k in kinds and kinds[k]["count"])
            reports[tuple(spec)] = [",".join(map(str, spec)), cores,
                                    format_bytes(report.partitioned["temp"]),
                                    format_bytes(report.partitioned["peak"]),
                                    f"{temp1 / (cores * report.partitioned['temp']):.2f}",
                                    collectives]
            rows.append([family] + reports[tuple(spec)])
            gathers += [f"{','.join(map(str, spec))}: {w}" for w in report.warnings]
            if cores == 8:
                at_8[family] = (report.partitioned["temp"], emulator, train_step)
            print(f"  {family} on {cores} cores: done", flush=True)
    print()
    print(format_table(
        ["family (8 cores)", "spec", "N", "temp/core", "peak/core", "E(N)",
         "collectives: count / bytes per core"],
        rows, right=("N", "temp/core", "peak/core", "E(N)"),
        title=f"{args.size}^3 U-Net train step, per core, on N emulated cores",
    ))
    print("activation-sized all-gathers / all-to-alls:" if gathers else
          "activation-sized all-gathers / all-to-alls: none")
    for line in gathers:
        print("  " + line)
    if args.steps <= 0:
        return 0

    best = min(at_8, key=lambda family: at_8[family][0])
    _, emulator, emulated_step = at_8[best]
    emulated = _timed(lambda: float(emulator.run(emulated_step, args=(image, labels))),
                      args.steps)
    one_device = tf.function(make_step(None), jit_compile=True)
    single = _timed(lambda: float(one_device(image, labels)), args.steps)
    print()
    print(format_table(
        ["run", "cores", "step (median)", "volumes / s"],
        [[f"emulator, spec {best}", 8, f"{emulated:.2f} s", f"{1 / emulated:.3f}"],
         ["TensorFlow, tf.function(jit_compile=True)", 1, f"{single:.2f} s",
          f"{1 / single:.3f}"]],
        right=("cores", "step (median)", "volumes / s"),
        title=f"{args.size}^3 training throughput, batch 1, median of {args.steps} steps "
              f"after one untimed ({os.cpu_count()} CPU cores)",
    ))
    return 0


def _timed(step, count):
    """Median seconds of ``count`` calls of ``step`` after one untimed call (compiles)."""
    step()
    times = []
    for _ in range(count):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


if __name__ == "__main__":
    sys.exit(main())
