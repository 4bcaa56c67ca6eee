"""Benchmark: Model Garden's RetinaNet train step split over 4 emulated cores, by image size.

The experiment ``retinanet_resnetfpn_coco`` (tf-models-official 2.20: ResNet-50, FPN
P3-P7, 9 anchors, tf_keras), 8 classes, batch 2, built by its own task and made
partition-friendly with ``spatial_tf.layers.partition_friendly``; the train step is the
model with a squared loss over every head output, gradients kept whole like the weights,
and SGD. Per image size and spec: XLA:CPU's temp bytes per core of the partitioned step
(4 cores) and of the same step on one core, their ratio, and the same ratio for the
activations alone: from each figure the temp of the step at 64 x 64 is subtracted, where
the weight-sized buffers (gradients, kernels copied into the layout the backward
convolutions read) are nearly everything. XLA:CPU figures from the emulator, not TPU
measurements.

    python benchmarks/model_garden_retinanet.py [--sizes 128,256,512] [--specs 1,2,2,1]

It needs Model Garden: run it in the environment of ``tests/integration``
(``pip install -e ".[model-garden]"``).
"""
import argparse
import json
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

CORES = 4
FLOOR_SIZE = 64


def temps(size, spec):
    """``(temp per core on CORES cores, temp on one core)`` of the step at ``size``."""
    import tensorflow as tf
    import tf_keras
    from official.core import exp_factory, task_factory
    from official.vision import registry_imports  # noqa: F401

    import spatial_tf

    params = exp_factory.get_exp_config("retinanet_resnetfpn_coco")
    params.task.model.input_size = [size, size, 3]
    params.task.model.num_classes = 8
    emulator = spatial_tf.Emulator(CORES)
    with emulator.scope():
        tf_keras.utils.set_random_seed(0)
        model = task_factory.get_task(params.task).build_model()
        spatial_tf.layers.partition_friendly(model)
        optimizer = tf_keras.optimizers.SGD(0.01)

    def step(image):
        image = spatial_tf.split(image, spec)
        with tf.GradientTape() as tape:
            out = model(image, training=True)
            loss = tf.add_n([tf.reduce_mean(tf.square(v))
                             for key in ("cls_outputs", "box_outputs")
                             for v in out[key].values()])
        grads = tape.gradient(loss, model.trainable_variables)
        grads = spatial_tf.split(grads, [None] * len(grads))
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    compiled = emulator.compile(step, (tf.zeros([2, size, size, 3]),))
    return compiled.memory()["temp"], compiled.memory(partitioned=False)["temp"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="128,256,512", help="image edges (default 128,256,512)")
    p.add_argument("--specs", default="1,2,2,1", help="specs, ';'-separated (default 1,2,2,1)")
    p.add_argument("--one", help=argparse.SUPPRESS)  # SIZE;SPEC: one compile, as JSON
    args = p.parse_args(argv)
    if args.one:
        size, spec = args.one.split(";")
        print(json.dumps(temps(int(size), [int(c) for c in spec.split(",")])))
        return 0
    from spatial_tf.table import format_bytes, format_table

    def measure(size, spec):
        # a process per compile: the programs of one do not pile up in the next's memory
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--one",
                               f"{size};{spec}"], stdout=subprocess.PIPE, text=True)
        if done.returncode:
            raise SystemExit(f"size {size}, spec {spec}: the compile failed ({done.returncode})")
        return json.loads(done.stdout.strip().splitlines()[-1])

    rows = []
    for spec in args.specs.split(";"):
        floor_split, floor_whole = measure(FLOOR_SIZE, spec)
        for size in [int(s) for s in args.sizes.split(",")]:
            split, whole = measure(size, spec)
            rows.append([f"{size}x{size}", f"[{spec}]", format_bytes(whole), format_bytes(split),
                         f"{split / whole:.2f}",
                         f"{(split - floor_split) / (whole - floor_whole):.2f}"])
            print(f"  {size}, [{spec}]: done", file=sys.stderr, flush=True)
        rows.append([f"{FLOOR_SIZE}x{FLOOR_SIZE} (floor)", f"[{spec}]", format_bytes(floor_whole),
                     format_bytes(floor_split), f"{floor_split / floor_whole:.2f}", "-"])
    print(format_table(
        ["image", "spec", "temp, 1 core", f"temp/core, {CORES} cores", "ratio",
         "activations ratio"], rows,
        right=("temp, 1 core", f"temp/core, {CORES} cores", "ratio", "activations ratio"),
        title=f"Model Garden RetinaNet (ResNet-50 FPN) train step, batch 2, {CORES} emulated "
              f"cores, after partition_friendly"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
