"""Benchmark: Model Garden's volumetric 3D U-Net train step on 1, 2 and 4 emulated cores.

The experiment ``seg_unet3d_test`` (tf-models-official 2.20; 2 levels, ``base_filters``
4, 2 channels, 2 classes, Dice loss, SGD with momentum, batch 2) with
``train_input_partition_dims=[1, cores, 1, 1, 1]``, trained by Model Garden's own
trainer (``train_utils.create_trainer``, orbit's loop) with ``spatial_tf.Emulator`` as
the strategy and the task's own TFRecord input. Printed per size and core count: the
train step's temp bytes per core and the ratio to the same step on one core, its
collectives by kind (count / bytes per core), the time to trace it, XLA's compile time,
and the time per step after the first. Each configuration runs as Model Garden builds it
(tf_keras' fused batch norm) and with ``spatial_tf.layers.unfuse_batch_norm`` applied to
the model before its first step. These are XLA:CPU figures from the emulator, not TPU
measurements; times depend on the machine.

    python benchmarks/model_garden_step.py [--sizes 32,64] [--cores 1,2,4] [--steps 3]
        [--batch-norm fused,unfused] [--target v3]

It needs Model Garden: run it in the environment of ``tests/integration``
(``pip install -e ".[model-garden]"``).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

KINDS = ("collective-permute", "all-gather", "all-to-all", "all-reduce")
CHANNELS = CLASSES = 2
BATCH = 2


def write_tfrecord(path, size, n=4):
    """``n`` examples in the format the task's decoder reads (raw float32 bytes)."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    with tf.io.TFRecordWriter(path) as w:
        for _ in range(n):
            image = rng.standard_normal((size,) * 3 + (CHANNELS,)).astype(np.float32)
            label = np.eye(CLASSES, dtype=np.float32)[(image[..., 0] > 0.5).astype(np.int64)]
            feature = {
                key: tf.train.Feature(bytes_list=tf.train.BytesList(value=[a.tobytes()]))
                for key, a in (("image/encoded", image), ("image/class/label", label))
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feature))
                    .SerializeToString())


def params_for(size, cores, data_path):
    from official.core import exp_factory
    from official.projects.volumetric_models import registry_imports  # noqa: F401

    params = exp_factory.get_exp_config("seg_unet3d_test")
    data = {"input_path": data_path, "input_size": [size] * 3, "num_channels": CHANNELS,
            "num_classes": CLASSES, "global_batch_size": BATCH}
    params.override({
        "task": {
            "model": {"input_size": [size] * 3, "num_channels": CHANNELS,
                      "num_classes": CLASSES, "backbone": {"unet_3d": {"base_filters": 4}}},
            "train_data": data, "validation_data": data,
            "train_input_partition_dims": [1, cores, 1, 1, 1],
            "eval_input_partition_dims": [1, cores, 1, 1, 1],
        },
        "trainer": {"optimizer_config": {
            "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
            "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.01}},
        }},
    }, is_strict=True)
    params.validate()
    params.lock()
    return params


def measure(size, cores, steps, data_path, batch_norm, target=None):
    """One row's figures: the report of the train step (with ``target``, the TPU
    compiler's figures for that generation beside XLA:CPU's) and its times."""
    import numpy as np
    import tensorflow as tf
    from official.core import task_factory, train_utils

    import spatial_tf

    emulator = spatial_tf.Emulator(num_cores_per_replica=cores)
    params = params_for(size, cores, data_path)
    with emulator.scope():
        task = task_factory.get_task(params.task)
        trainer = train_utils.create_trainer(params, task, train=True, evaluate=False)
    if batch_norm == "unfused":
        spatial_tf.layers.unfuse_batch_norm(trainer.model)
    start = time.perf_counter()
    trainer.train(tf.constant(1))  # traces, compiles and runs the first step
    first = time.perf_counter() - start
    start = time.perf_counter()
    logs = trainer.train(tf.constant(steps))
    step_seconds = (time.perf_counter() - start) / steps
    loss = float(logs["training_loss"])
    if not np.isfinite(loss):
        raise RuntimeError(f"{size}^3 on {cores} cores: training loss {loss}")
    trainable = {id(v.handle) for v in trainer.model.trainable_variables}
    (step,) = [s for s in emulator.compiled_steps
               if trainable <= {id(v.handle) for v in s.traced.written_variables}]
    report = step.report(on_tpu=step.lowered.compile(target) if target else None)
    return report, step.trace_seconds, first, step_seconds, loss


def row(size, cores, batch_norm, steps, target=None):
    """The table row of one configuration (measured in this process)."""
    from spatial_tf.table import format_bytes, plural

    with tempfile.TemporaryDirectory() as tmp:
        data_path = os.path.join(tmp, "train.tfrecord")
        write_tfrecord(data_path, size)
        report, trace_s, first_s, step_s, loss = measure(
            size, cores, steps, data_path, batch_norm, target)
    kinds = report.by_kind()
    print(f"  {size}^3, {batch_norm}, {plural(cores, 'core')}: loss {loss:.4f}, first call "
          f"{first_s:.1f} s", file=sys.stderr, flush=True)
    for warning in report.warnings:  # where the split does not survive
        print(f"    {warning}", file=sys.stderr, flush=True)
    return (
        [f"{size}³", batch_norm, cores, f"[1,{cores},1,1,1]",
         format_bytes(report.partitioned["temp"]), f"{report.ratio('temp'):.2f}"]
        + [f"{kinds[k]['count']} / {format_bytes(kinds[k]['bytes'])}" if k in kinds else "0"
           for k in KINDS]
        + [f"{trace_s:.1f}", f"{report.compile_seconds['partitioned']:.1f}",
           f"{step_s:.2f}"]
        + (_tpu_cells(report) if target else [])
    )


def _tpu_cells(report):
    """The TPU compiler's peak per core and its ratio to one core's, or its verdict."""
    from spatial_tf.table import format_bytes

    tpu = report.tpu
    if not tpu["fits"]["partitioned"]:
        return [tpu["verdict"]["partitioned"], "-"]
    one = tpu["unpartitioned"]
    ratio = f"{tpu['partitioned']['peak'] / one['peak']:.2f}" if one else "-"
    return [format_bytes(tpu["partitioned"]["peak"]), ratio]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="32,64", help="volume edges (default 32,64)")
    p.add_argument("--cores", default="1,2,4", help="emulated cores (default 1,2,4)")
    p.add_argument("--steps", type=int, default=3, help="timed steps after the first")
    p.add_argument("--one", help=argparse.SUPPRESS)  # SIZE,CORES,BATCH_NORM: one row as JSON
    p.add_argument("--target", default=None,
                   help="also compile each step with XLA's TPU compiler for this TPU "
                        "generation (e.g. v3; needs libtpu: pip install libtpu==0.0.42.1)")
    p.add_argument("--batch-norm", default="fused,unfused",
                   help="fused (Model Garden's model as built), unfused (after "
                        "spatial_tf.layers.unfuse_batch_norm) or both (default)")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    core_counts = [int(c) for c in args.cores.split(",")]
    batch_norms = args.batch_norm.split(",")
    unknown = set(batch_norms) - {"fused", "unfused"}
    if unknown:
        p.error(f"--batch-norm: {sorted(unknown)}; expected fused and/or unfused")

    from spatial_tf.table import format_table

    if args.one:  # one configuration, in a process of its own: print its row as JSON
        size, cores, batch_norm = args.one.split(",")
        print(json.dumps(row(int(size), int(cores), batch_norm, args.steps, args.target)))
        return 0
    rows, notes = [], []
    for size in sizes:
        for batch_norm in batch_norms:
            for cores in core_counts:
                # a process per configuration: XLA's compiled programs and TensorFlow's
                # graphs of one do not pile up in the memory of the next
                done = subprocess.run(
                    [sys.executable, os.path.abspath(__file__), "--steps", str(args.steps),
                     "--one", f"{size},{cores},{batch_norm}"]
                    + (["--target", args.target] if args.target else []),
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                )
                sys.stderr.write("".join(
                    line for line in done.stderr.splitlines(keepends=True)
                    if line.startswith("  ")))  # the child's progress and warnings
                if done.returncode == 0:
                    rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
                else:  # e.g. XLA cannot compile it: a note under the table says why
                    found = re.findall(r"(?:Error|error): (.*)", done.stderr)
                    notes.append(f"[{len(notes) + 1}] {size}³, {batch_norm}, {cores} cores: "
                                 f"{found[-1][:160] if found else 'failed'}")
                    rows.append([f"{size}³", batch_norm, cores, f"[1,{cores},1,1,1]",
                                 f"failed [{len(notes)}]"] + ["-"] * (10 if args.target else 8))
                print("  " + " | ".join(map(str, rows[-1])), file=sys.stderr, flush=True)
    print(format_table(
        ["volume", "batch norm", "cores", "partition dims", "temp/core", "÷ 1 core"]
        + list(KINDS)
        + ["trace s", "compile s", "step s"]
        + ([f"XLA:TPU {args.target} peak/core", "÷ 1 core (TPU)"] if args.target else []),
        rows, right=("temp/core", "÷ 1 core", "trace s", "compile s", "step s",
                     f"XLA:TPU {args.target} peak/core", "÷ 1 core (TPU)"),
        title=f"Model Garden seg_unet3d_test (base_filters 4, batch {BATCH}), train step "
              f"with SGD + momentum on emulated cores (XLA:CPU figures"
              + (f"; XLA:TPU {args.target}: the TPU compiler, compile-only)" if args.target
                 else ")"),
    ))
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
