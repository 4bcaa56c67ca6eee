"""A pod-slice-shaped run: the segmentation loop fed by 1 host or as on a v4-32 slice.

A v4-32 slice has 16 cores (megacore chips) on 4 hosts. With 2 cores per replica it
holds 8 replicas; ``Emulator(2, topology="v4-32")`` places them as ``tpu_strategy`` would
and gives each host its own input pipeline (``distribute_datasets_from_function``
sharding the volumes by ``input_pipeline_id``). The same 8 x 2 cores fed by one host are
the baseline. spatial_tf's 3D U-Net (depth 2, 4 filters) trains on synthetic CT volumes
with ``spatial_tf.train.make_train_step``; printed per layout: the first call (trace +
compile + run), the median of the following steps, the loss after the last step and the
per-core memory of one replica's program; then, per host of the slice, the cores it runs
and their memory. XLA:CPU figures, one process.

    python benchmarks/emulator_hosts.py [--topology v4-32] [--cores 2] [--steps 6] [--size 32]
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def run(emulator, steps, size):
    import keras
    import tensorflow as tf

    import spatial_tf
    from spatial_tf.data import synthetic_ct_dataset
    from spatial_tf.models import unet3d
    from spatial_tf.train import make_train_step

    cores, replicas = emulator.num_cores_per_replica, emulator.num_replicas
    spec = [[1, cores, 1, 1, 1], [1, cores, 1, 1]]
    with emulator.scope():
        keras.utils.set_random_seed(0)
        model = unet3d((size, size, size, 1), num_classes=3, depth=2, base_filters=4)
        optimizer = keras.optimizers.SGD(0.01)
        optimizer.build(model.trainable_variables)
    step_fn = make_train_step(model, optimizer, spec=spec)

    volumes = synthetic_ct_dataset((size,) * 3, num_volumes=2 * replicas).cache()

    def dataset_fn(context):
        data = volumes.shard(context.num_input_pipelines, context.input_pipeline_id)
        return data.repeat().batch(context.get_per_replica_batch_size(replicas),
                                   drop_remainder=True)

    iterator = iter(emulator.distribute_datasets_from_function(dataset_fn))

    @tf.function
    def train_step():
        return emulator.run(step_fn, args=(next(iterator),))

    times, out = [], None
    for _ in range(steps):
        start = time.perf_counter()
        out = train_step()
        float(emulator.experimental_local_results(out["loss"])[0])
        times.append(time.perf_counter() - start)
    batch = next(iter(dataset_fn(tf.distribute.InputContext(1, 0, replicas))))
    report = emulator.report(step_fn, args=(batch,))
    loss = float(emulator.experimental_local_results(out["loss"])[0])
    return times[0], statistics.median(times[1:]), loss, report.partitioned["peak"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topology", default="v4-32")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--size", type=int, default=32)
    args = p.parse_args(argv)
    import spatial_tf
    from spatial_tf.table import format_bytes, format_table

    pod = spatial_tf.Emulator(args.cores, topology=args.topology)
    one_host = spatial_tf.Emulator(args.cores, num_replicas=pod.num_replicas)
    rows, peak = [], 0
    for name, emulator in (("1 host", one_host), (args.topology, pod)):
        first, step, loss, peak = run(emulator, args.steps, args.size)
        rows.append([name, emulator.num_hosts, f"{emulator.num_replicas} x {args.cores}",
                     f"{first:.1f} s", f"{step * 1000:.0f} ms", f"{loss:.4f}",
                     format_bytes(peak)])
        print(f"  {name}: done", flush=True)
    right = ("hosts", "first call", "step (median)", "loss, replica 0", "peak per core")
    print(format_table(
        ["layout", "hosts", "replicas x cores", "first call", "step (median)",
         "loss, replica 0", "peak per core"], rows, right=right,
        title=f"3D U-Net train step at {args.size}^3, {args.steps} steps, emulated"))
    print()
    print(format_table(["task", "replica:core it runs", "cores", "memory (cores x peak)"],
                       _per_host(pod, peak, format_bytes), right=("cores",),
                       title=f"{args.topology}: memory per host"))
    return 0


def _per_host(emulator, peak, format_bytes):
    on = {}
    for replica, tasks in enumerate(emulator.host_layout.core_tasks):
        for core, task in enumerate(tasks):
            on.setdefault(task, []).append(f"{replica}:{core}")
    return [[task, " ".join(cores), len(cores), format_bytes(len(cores) * peak)]
            for task, cores in sorted(on.items())]


if __name__ == "__main__":
    sys.exit(main())
