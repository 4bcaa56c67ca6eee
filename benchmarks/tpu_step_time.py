"""Benchmark: predicted TPU step times against every published TensorFlow-on-TPU step time
whose configuration is public.

Each row's per-replica program is compiled by XLA's TPU compiler (libtpu, compile-only,
on this CPU machine) through ``spatial_tf.plan(..., budget="v3", specs=[spec])`` and timed
with ``TpuCompiledStep.step_time`` (the compiler's estimated cycles at v3's clock, the
compiled collectives priced over v3's links). A data-parallel run's gradient sum over
its replicas is not in the per-replica program: it is priced the same way from the
model's float32 gradient bytes (``step_time.gradient_all_reduce``) and added.

The models are tensorflow/tpu's, rebuilt as ``benchmarks/tpu_published.py`` builds them
(RetinaNet R50-FPN, 3D U-Net), and Keras' ResNet-50 for MLPerf's ResNet-50 rows
(``keras.applications.ResNet50``: v1, where MLPerf ran v1.5, whose stride sits on the
3x3 convolution; about 5% more flops), all in ``mixed_bfloat16``.

    python benchmarks/tpu_step_time.py               # every row (fitting compiles take
                                                     # 3-15 min each; answers are cached)
    python benchmarks/tpu_step_time.py --rows 1,2    # some rows
    python benchmarks/tpu_step_time.py --list        # the rows and their sources
"""
import argparse
import dataclasses
import math
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)


@dataclasses.dataclass(frozen=True)
class Row:
    model: str            # retinanet, unet3d or resnet50
    run: str              # what was published, in words
    source: str
    shape: tuple          # the per-replica input
    cores: int            # cores per replica
    spec: tuple
    replicas: int         # data-parallel replicas of the published run
    published: float      # seconds per step
    batch_scale: int = 1  # the published batch is this many times the compiled one


CLOUD = "Cloud TPU, 'Processing large images with Cloud TPU'"
ROWS = [
    Row("retinanet", "1280^2, v3-8, global batch 64", CLOUD, (8, 1280, 1280, 3), 1,
        (1, 1, 1, 1), 8, 0.910),
    Row("retinanet", "2560^2, v3-64, global batch 64, [1,4,2,1]", CLOUD,
        (8, 2560, 2560, 3), 8, (1, 4, 2, 1), 8, 0.822),
    Row("unet3d", "128^3, v3-8, global batch 32", CLOUD, (4, 128, 128, 128, 1), 1,
        (1, 1, 1, 1, 1), 8, 3.428),
    Row("unet3d", "128^3, v3-8, global batch 32 (batch 1 per core compiled, x4)", CLOUD,
        (1, 128, 128, 128, 1), 1, (1, 1, 1, 1, 1), 8, 3.428, batch_scale=4),
    Row("unet3d", "256^3, v3-64, global batch 32, [1,16,1,1,1]", CLOUD,
        (8, 256, 256, 256, 1), 16, (1, 16, 1, 1, 1), 4, 3.02),
    Row("unet3d", "256^3, v3-64, global batch 32, [1,16,1,1,1] (batch 4 compiled, x2)",
        CLOUD, (4, 256, 256, 256, 1), 16, (1, 16, 1, 1, 1), 4, 3.02, batch_scale=2),
    Row("resnet50", "224^2, v3-8, global batch 1024, momentum",
        "MLPerf Training v0.5, Google cloud_v3.8 ResNet logs (5004 steps between evals)",
        (128, 224, 224, 3), 1, (1, 1, 1, 1), 8, 0.137),
    Row("resnet50", "224^2, v3-32, global batch 4096, LARS",
        "MLPerf Training v0.6, Google tpu-v3-32 ResNet logs (4-epoch blocks)",
        (128, 224, 224, 3), 1, (1, 1, 1, 1), 32, 0.131),
]


def build(row, batch_norm="keras"):
    """``(model or step, inputs, training, trainable variables)`` for ``row``;
    ``batch_norm="bf16"``: tensorflow/tpu's fused batch norm on bfloat16 activations
    (``tpu_published.bfloat16_batch_norm``) in place of Keras 3's float32 one."""
    import keras
    import tensorflow as tf

    from spatial_tf import planning
    from spatial_tf.models import ModelGardenUNetOptions, unet3d
    from tpu_published import bfloat16_batch_norm, retinanet_step

    keras.backend.clear_session()
    swap = bfloat16_batch_norm if batch_norm == "bf16" else (lambda m: m)
    if row.model == "unet3d":
        model = swap(unet3d(row.shape[1:], num_classes=3, preset="model_garden",
                            dtype_policy="mixed_bfloat16",
                            options=ModelGardenUNetOptions()))
        return model, row.shape, None, model.trainable_variables
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        if row.model == "retinanet":
            step = retinanet_step(row.shape[1:], batch_norm=batch_norm)
            return step, row.shape, None, step.model.trainable_variables
        model = swap(keras.applications.ResNet50(weights=None, input_shape=row.shape[1:]))
    finally:
        keras.config.set_dtype_policy("float32")
    training = planning.Training(
        loss=keras.losses.SparseCategoricalCrossentropy(),
        optimizer=keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True))
    inputs = (row.shape, tf.TensorSpec([row.shape[0]], tf.int32))
    return model, inputs, training, model.trainable_variables


def measure(row, batch_norm="keras"):
    """The row's plan candidate (the TPU compiler's verdict and step time) and the
    seconds of its data-parallel gradient sum."""
    import spatial_tf
    from spatial_tf import planning
    from spatial_tf.emulator.tpu.step_time import gradient_all_reduce

    what, inputs, training, variables = build(row, batch_norm)
    plan = spatial_tf.plan(what, inputs, row.cores, budget="v3", specs=[row.spec],
                           options=planning.PlanOptions(progress=False), training=training)
    gradient_bytes = sum(math.prod(v.shape) * 4 for v in variables)
    return plan.candidates[0], gradient_all_reduce(gradient_bytes, row.replicas, "v3")


def batch_linearity(edge, batches=(1, 2, 4), batch_norm="keras"):
    """The U-Net's predicted step time at cube ``edge`` on one v3 core for each batch,
    against batch 1's times the batch: whether a time compiled at a smaller batch may be
    scaled to the published one (rows marked "x2", "x4")."""
    from spatial_tf.emulator.tpu.step_time import seconds_text
    from spatial_tf.table import format_table

    rows, first = [], None
    for batch in batches:
        row = Row("unet3d", f"{edge}^3, batch {batch}", "", (batch, edge, edge, edge, 1), 1,
                  (1, 1, 1, 1, 1), 1, float("nan"))
        c, _ = measure(row, batch_norm)
        if c.step_time is None:
            rows.append([batch, "-", "-", "does not fit"])
            continue
        first = first or (batch, c.step_time)
        scaled = first[1] * batch / first[0]
        rows.append([batch, seconds_text(c.step_time), seconds_text(scaled),
                     f"{c.step_time / scaled:.2f}"])
    return format_table(["batch", "predicted", f"batch {first[0] if first else 1} x batch",
                         "ratio"], rows, right=("predicted", "ratio"),
                        title=f"U-Net (tensorflow/tpu's) {edge}^3 on one v3 core: step time "
                              f"against batch")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default=None, help="row numbers, e.g. 1,2 (default all)")
    p.add_argument("--list", action="store_true", help="list the rows and exit")
    p.add_argument("--batch-norm", choices=("keras", "bf16"), default="keras",
                   help="Keras 3's batch norm (float32 inside, the default), or bf16: "
                        "tensorflow/tpu's fused batch norm on bfloat16 activations")
    p.add_argument("--batch-linearity", type=int, metavar="EDGE",
                   help="instead of the rows: the U-Net's step time at batch 1, 2, 4 on one "
                        "v3 core at cube EDGE, against batch 1's times the batch")
    args = p.parse_args(argv)
    if args.batch_linearity:
        print(batch_linearity(args.batch_linearity, batch_norm=args.batch_norm))
        return 0
    chosen = [int(r) for r in args.rows.split(",")] if args.rows else range(1, len(ROWS) + 1)
    if args.list:
        for number, row in enumerate(ROWS, 1):
            print(f"{number}. {row.model} {row.run}: {row.published:.3f} s ({row.source})")
        return 0

    from spatial_tf.emulator.tpu.step_time import seconds_text
    from spatial_tf.emulator.tpu.tpu_compile import libtpu_version
    from spatial_tf.table import format_bytes, format_table

    if libtpu_version() is None:
        print("libtpu is not installed: pip install 'spatial-tf[tpu-compile]'", file=sys.stderr)
        return 2
    rows = []
    for number in chosen:
        row = ROWS[number - 1]
        start = time.perf_counter()
        c, reduce = measure(row, args.batch_norm)
        seconds = time.perf_counter() - start
        if c.step_time is None:
            why = (f"does not fit: needs {format_bytes(c.tpu['peak'])} per core"
                   if c.ok and c.tpu_fits is False else (c.step_time_missing or c.reason))
            rows.append([number, f"{row.model} {row.run}", seconds_text(row.published),
                         "-", "-", why, "", "cached" if c.cached else f"{seconds:.0f}"])
            continue
        parts = dict(c.step_time_parts)
        if reduce:
            parts[f"gradient all-reduce over {row.replicas} replicas"] = reduce
        predicted = (c.step_time + reduce) * row.batch_scale
        top = sorted(parts.items(), key=lambda kv: -kv[1])[:2]
        rows.append([number, f"{row.model} {row.run}", seconds_text(row.published),
                     seconds_text(predicted), f"{predicted / row.published - 1:+.0%}",
                     max(parts, key=parts.get),
                     ", ".join(f"{k} {seconds_text(v * row.batch_scale)}" for k, v in top),
                     "cached" if c.cached else f"{seconds:.0f}"])
        print(f"row {number} done in {seconds:.0f} s", file=sys.stderr, flush=True)
    print(format_table(
        ["#", "model and published run (TensorFlow on TPU v3)", "published", "predicted",
         "error", "dominant part", "largest parts", "compile s"],
        rows, right=("published", "predicted", "error", "compile s"),
        title=f"Predicted step time (XLA:TPU v3 cost model, libtpu {libtpu_version()}, "
              f"compile-only) against published step times"
              + ("; batch norm: fused, on bfloat16 activations" if args.batch_norm == "bf16"
                 else "")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
