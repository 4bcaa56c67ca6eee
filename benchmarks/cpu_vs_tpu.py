"""Benchmark: per-core memory by XLA:CPU (the emulator) against XLA's TPU compiler.

The same traced train step of each model is planned twice with ``spatial_tf.plan`` and
one spec: on XLA:CPU (``PlanOptions(memory="cpu", target=None)``, the emulator's
TPU-like schedule) and by the TPU compiler for one generation (``target=...``, libtpu,
compile-only), unpartitioned and split. Printed per model and core count: the per-core
peak of each, their ratio (TPU / CPU: how much XLA:CPU under- or over-states the TPU),
and the split's saving on each (peak on N cores / peak on one).

Models: spatial_tf's own 3D U-Net (depth 3, 8-32 filters, float32, SGD-free Adam step
of ``spatial_tf.train``), tensorflow/tpu's 3D U-Net as published (Model Garden's
preset: 4 levels, 32-512 filters, ``mixed_bfloat16``), and Keras' own ResNet50
(``keras.applications``, random weights, classification, Adam) on large images.

    python benchmarks/cpu_vs_tpu.py                    # every model, v3
    python benchmarks/cpu_vs_tpu.py --target v5e --models resnet50
"""
import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

MODELS = ("unet3d", "tensorflow_tpu_unet3d", "resnet50")


def build(name):
    """``(description, model or step, shape, (cores, spec) pairs)`` of one model."""
    import keras
    import tensorflow as tf

    from spatial_tf.models import unet3d

    if name == "unet3d":
        shape = (1, 64, 64, 64, 1)
        return ("spatial_tf 3D U-Net (depth 3, 8-32 filters), 64^3, float32",
                unet3d(shape[1:], num_classes=3), shape,
                [(1, (1, 1, 1, 1, 1)), (8, (1, 8, 1, 1, 1))])
    if name == "tensorflow_tpu_unet3d":
        shape = (1, 64, 64, 64, 1)
        return ("tensorflow/tpu 3D U-Net (4 levels, 32-512 filters), 64^3, bf16",
                unet3d(shape[1:], num_classes=3, preset="model_garden",
                       dtype_policy="mixed_bfloat16"), shape,
                [(1, (1, 1, 1, 1, 1)), (8, (1, 8, 1, 1, 1))])
    model = keras.applications.ResNet50(weights=None, input_shape=(512, 512, 3), classes=10)
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)

    def resnet50_step(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    images = (8, 512, 512, 3)
    return ("Keras ResNet50 (keras.applications), 512^2, batch 8, float32",
            resnet50_step, (images, tf.TensorSpec((8,), tf.int32)),
            [(1, (1, 1, 1, 1)), (4, (1, 4, 1, 1))])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(MODELS), help=f"among {', '.join(MODELS)}")
    p.add_argument("--target", default="v3", help="TPU generation (default v3)")
    args = p.parse_args(argv)

    import spatial_tf
    from spatial_tf import planning
    from spatial_tf.emulator.tpu.tpu_compile import libtpu_version
    from spatial_tf.table import format_bytes, format_table, plural

    if libtpu_version() is None:
        print("libtpu is not installed: pip install 'spatial-tf[tpu-compile]'", file=sys.stderr)
        return 2
    rows = []
    for name in args.models.split(","):
        description, model, shape, layouts = build(name)
        peaks = {}
        for cores, spec in layouts:
            for basis, options in (
                    ("cpu", planning.PlanOptions(memory="cpu", target=None, progress=False)),
                    ("tpu", planning.PlanOptions(target=args.target, progress=False))):
                start = time.perf_counter()
                plan = spatial_tf.plan(model, shape, cores, specs=[spec], options=options)
                c = plan.candidates[0]
                peaks[(cores, basis)] = (c.peak(basis), c.tpu_fits)
                print(f"{name} {plural(cores, 'core')} {basis}: {format_bytes(c.peak(basis))} "
                      f"({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
        for cores, spec in layouts:
            cpu, _ = peaks[(cores, "cpu")]
            tpu, fits = peaks[(cores, "tpu")]
            one_cpu, one_tpu = peaks[(1, "cpu")][0], peaks[(1, "tpu")][0]
            rows.append([description, cores, "[" + ",".join(map(str, spec)) + "]",
                         format_bytes(cpu), ("" if fits else "> ") + format_bytes(tpu),
                         f"{tpu / cpu:.2f}", f"{cpu / one_cpu:.2f}", f"{tpu / one_tpu:.2f}"])
    print(format_table(
        ["model", "cores", "spec", "XLA:CPU peak", f"XLA:TPU {args.target} peak",
         "TPU / CPU", "CPU split / one", "TPU split / one"], rows,
        right=("XLA:CPU peak", f"XLA:TPU {args.target} peak", "TPU / CPU", "CPU split / one",
               "TPU split / one"),
        title=f"Per-core peak, XLA:CPU (emulator) against the TPU compiler (XLA:TPU "
              f"{args.target}, libtpu {libtpu_version()}, compile-only)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
