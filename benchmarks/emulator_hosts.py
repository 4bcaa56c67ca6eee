"""A pod-slice-shaped run: the segmentation loop fed by 1 host or by several.

A v4-32 slice has 4 hosts. Here the same shape in miniature: ``R`` replicas of ``C``
cores (default 4 x 2 = 8 emulated cores), fed by one host or by ``--hosts`` hosts (each with its own input pipeline,
``distribute_datasets_from_function`` sharding the volumes by ``input_pipeline_id``).
spatial_tf's 3D U-Net (depth 2, 4 filters) trains on synthetic CT volumes with
``spatial_tf.train.make_train_step``; printed per layout: the first call (trace + compile
+ run), the median of the following steps, the loss after the last step and the
per-core memory of one replica's program (the same on every host). XLA:CPU figures, one
process.

    python benchmarks/emulator_hosts.py [--hosts 4] [--steps 6] [--size 32]
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def run(num_hosts, replicas, cores, steps, size):
    import keras
    import tensorflow as tf

    import spatial_tf
    from spatial_tf.data import synthetic_ct_dataset
    from spatial_tf.models import unet3d
    from spatial_tf.train import make_train_step

    emulator = spatial_tf.Emulator(cores, num_replicas=replicas, num_hosts=num_hosts)
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
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--size", type=int, default=32)
    args = p.parse_args(argv)
    from spatial_tf.table import format_bytes, format_table

    rows = []
    for hosts in (1, args.hosts):
        first, step, loss, peak = run(hosts, args.replicas, args.cores, args.steps, args.size)
        rows.append([hosts, f"{args.replicas} x {args.cores}", f"{first:.1f} s",
                     f"{step * 1000:.0f} ms", f"{loss:.4f}", format_bytes(peak)])
        print(f"  {hosts} host(s): done", flush=True)
    print(format_table(
        ["hosts", "replicas x cores", "first call", "step (median)", "loss, replica 0",
         "peak per core"], rows,
        right=("hosts", "first call", "step (median)", "loss, replica 0", "peak per core"),
        title=f"3D U-Net train step at {args.size}^3, {args.steps} steps, emulated"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
