"""Benchmark: a 3D U-Net train step on the CPU emulator against TensorFlow on one device.

One process, same model, same inputs. Measures the emulator's compile time (trace + XLA
SPMD compile), the emulated step on N virtual cores, the same step under TensorFlow's
``jit_compile`` on one device and as a plain TensorFlow graph (oneDNN kernels), and the
per-core temp bytes partitioned vs unpartitioned. With ``--xla-options`` it also
compiles the emulated step with each XLA CPU option below and times it.

    python benchmarks/emulator_unet3d.py                     # 64^3, depth 3, 8 cores
    python benchmarks/emulator_unet3d.py --spec 1,8,1,1,1 --xla-options
    python benchmarks/emulator_unet3d.py --size 32 --steps 3 # quick
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# XLA CPU options tried with --xla-options (name -> value)
XLA_OPTIONS = [
    ("xla_cpu_use_xnnpack", True),
    ("xla_cpu_experimental_xnn_graph_fusion_mode", "XNN_GRAPH_FUSION_MODE_GREEDY"),
    ("xla_cpu_experimental_onednn_custom_call", True),
    ("xla_cpu_use_onednn", True),
    ("xla_cpu_enable_fast_math", True),
    ("xla_cpu_multi_thread_eigen", False),
    ("xla_cpu_enable_concurrency_optimized_scheduler", True),
    ("xla_cpu_use_fusion_emitters", False),
]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=64, help="volume edge (default 64)")
    p.add_argument("--depth", type=int, default=3, help="U-Net levels (default 3)")
    p.add_argument("--filters", type=int, default=8, help="filters at the top level (default 8)")
    p.add_argument("--spec", default="1,2,2,2,1", help="split of the volume (default 1,2,2,2,1)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per variant (default 5)")
    p.add_argument("--conv", choices=["halo", "keras"], default="halo",
                   help="the U-Net's convolutions: HaloConv3D (default) or keras.layers.Conv3D")
    p.add_argument("--xla-options", action="store_true", help="also time each XLA CPU option")
    return p.parse_args(argv)


def median_step_seconds(run, steps):
    run()  # warm-up (compiles where needed)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None):
    args = parse_args(argv)
    spec = [int(s) for s in args.spec.split(",")]
    cores = 1
    for s in spec:
        cores *= s

    import keras
    import numpy as np
    import tensorflow as tf

    import spatial_tf
    from spatial_tf.emulator import Emulator
    from spatial_tf.models import UNetOptions, unet3d
    from spatial_tf.table import format_bytes, format_table

    keras.utils.set_random_seed(0)
    model = unet3d((args.size,) * 3 + (1,), num_classes=2, depth=args.depth,
                   base_filters=args.filters, options=UNetOptions(conv=args.conv))
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
    optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(0)
    image = tf.constant(rng.normal(size=(1,) + (args.size,) * 3 + (1,)), tf.float32)
    labels = tf.cast(image[..., 0] > 0, tf.int32)

    def train_step(image, labels):
        image, labels = spatial_tf.split((image, labels), [spec, spec[:-1]], num_cores_per_replica=cores)
        with tf.GradientTape() as tape:
            logits = model(image, training=True)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    print(f"3D U-Net depth {args.depth}, {args.filters}-{args.filters * 2 ** (args.depth - 1)} filters, "
          f"{'HaloConv3D' if args.conv == 'halo' else 'Conv3D'}, batch norm, {args.size}^3, "
          f"batch 1, SGD train step; split {spec} over {cores} cores; "
          f"{model.count_params():,} parameters; host has {os.cpu_count()} CPUs", flush=True)

    emulator = Emulator(num_cores_per_replica=cores)
    start = time.perf_counter()
    step = emulator.compile(train_step, args=(image, labels))
    compile_s = time.perf_counter() - start
    print(f"compiled for {cores} cores in {compile_s:.1f} s; timing...", flush=True)
    emulated_s = median_step_seconds(lambda: emulator.run(train_step, args=(image, labels)), args.steps)
    report = emulator.report(train_step, args=(image, labels))

    jit = tf.function(train_step, jit_compile=True)
    jit_s = median_step_seconds(lambda: jit(image, labels).numpy(), args.steps)
    graph = tf.function(train_step)
    graph_s = median_step_seconds(lambda: graph(image, labels).numpy(), args.steps)

    rows = [
        ["compile (trace + XLA SPMD), emulated", f"{compile_s:.1f} s", f"{compile_s / 30:.2f} of the 30 s target"],
        [f"step, emulated on {cores} cores", f"{emulated_s:.2f} s", f"{emulated_s / jit_s:.2f}x TF jit_compile (target <= 1.5x)"],
        ["step, TF jit_compile on 1 device", f"{jit_s:.2f} s", "1.00x"],
        ["step, TF graph (oneDNN) on 1 device", f"{graph_s:.2f} s", f"{graph_s / jit_s:.2f}x TF jit_compile"],
        ["temp bytes per core, partitioned", format_bytes(report.partitioned["temp"]),
         f"{report.ratio('temp'):.2f}x unpartitioned"],
        ["temp bytes, unpartitioned", format_bytes(report.unpartitioned["temp"]), ""],
        ["peak bytes per core, partitioned", format_bytes(report.partitioned["peak"]),
         f"{report.ratio('peak'):.2f}x unpartitioned"],
    ]
    print()
    print(format_table(["measure", "value", "ratio"], rows, right=("value",)))
    print()
    print(report)

    if args.xla_options:
        base = _time_options(Emulator, cores, train_step, image, labels, None, args.steps)
        option_rows = [["(defaults)", f"{base[0]:.1f}", f"{base[1]:.2f}", "1.00", ""]]
        for name, value in XLA_OPTIONS:
            try:
                c, s = _time_options(Emulator, cores, train_step, image, labels, {name: value}, args.steps)
                option_rows.append([f"{name}={value}", f"{c:.1f}", f"{s:.2f}", f"{s / base[1]:.2f}", ""])
            except Exception as e:  # an option this XLA build rejects
                option_rows.append([f"{name}={value}", "-", "-", "-", str(e).splitlines()[0][:60]])
        print()
        print(format_table(["XLA CPU option", "compile s", "step s", "vs defaults", "note"], option_rows,
                           title=f"emulated step on {cores} cores with XLA CPU options "
                                 f"(TF jit_compile {jit_s:.2f} s, TF graph {graph_s:.2f} s)"))
    return 0


def _time_options(emulator_cls, cores, train_step, image, labels, options, steps):
    emulator = emulator_cls(num_cores_per_replica=cores, compiler_options=options)
    start = time.perf_counter()
    emulator.compile(train_step, args=(image, labels))
    compile_s = time.perf_counter() - start
    step_s = median_step_seconds(lambda: emulator.run(train_step, args=(image, labels)), steps)
    return compile_s, step_s


if __name__ == "__main__":
    sys.exit(main())
