"""Benchmark: the planner's answer for real video clip sizes, from XLA's TPU compiler.

``spatial_tf.models.video_classifier``, the (2+1)D classifier of docs/guide-video.md (per
stage a 1x3x3 convolution over each frame's pixels and a 3x1x1 one over the frames, each
with batch norm and ReLU, then 2x2 pooling in space; stages of 16, 32 and 64 filters,
global average pooling, a dense head) with an SGD train step and spatial_tf's cross-entropy, at ``--frames`` x ``--size``
x ``--size`` RGB clips. For each TPU generation and batch size, ``spatial_tf.plan``
compiles every spec (in space, in time, both) with that generation's TPU compiler
(libtpu, compile-only, on this CPU machine) and takes its verdict as the fit test.
Printed per row: the recommended spec and, per spec, the peak bytes per core the TPU
compiler assigns (``>``: refused as out of memory, with what it said it needs).

    python benchmarks/video_plan.py                                   # 32x512x512
    python benchmarks/video_plan.py --targets v5e --batches 1,2       # quicker

It needs libtpu (``pip install "spatial-tf[tpu-compile]"``).
"""
import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

SPECS = ((1, 1, 2, 2, 1), (1, 4, 1, 1, 1), (1, 2, 2, 1, 1))


def make_step(model, optimizer):
    import tensorflow as tf
    from spatial_tf import losses

    def train_step(clips, labels):          # called with the clips already split
        with tf.GradientTape() as tape:
            logits = model(clips, training=True)
            loss = tf.reduce_mean(losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return train_step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=32)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--cores", type=int, default=4)
    parser.add_argument("--batches", default="1,2,4,8")
    parser.add_argument("--targets", default="v3,v4,v5e")
    args = parser.parse_args(argv)

    import keras
    import tensorflow as tf
    import spatial_tf
    from spatial_tf.emulator.tpu.tpu_compile import libtpu_version
    from spatial_tf.models import video_classifier
    from spatial_tf.planning import PlanOptions
    from spatial_tf.table import format_bytes, format_table

    if libtpu_version() is None:
        raise SystemExit("libtpu is not installed: pip install 'spatial-tf[tpu-compile]'")
    keras.utils.set_random_seed(0)
    model = video_classifier((args.frames, args.size, args.size, 3))
    optimizer = keras.optimizers.SGD(0.01)
    optimizer.build(model.trainable_variables)
    step = make_step(model, optimizer)
    print(f"(2+1)D classifier, {model.count_params():,} parameters, SGD train step; clips "
          f"{args.frames}x{args.size}x{args.size}x3 on {args.cores} cores; figures: XLA's "
          f"TPU compiler (libtpu {libtpu_version()}, compile-only), per core", flush=True)
    rows = []
    for target in args.targets.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            inputs = (tf.TensorSpec((batch, args.frames, args.size, args.size, 3)),
                      tf.TensorSpec((batch,), tf.int32))
            start = time.perf_counter()
            plan = spatial_tf.plan(step, inputs, args.cores, budget=target, specs=SPECS,
                                   options=PlanOptions(progress=False))
            by_spec = {c.spec: c for c in plan.candidates}
            peaks = []
            for spec in SPECS:
                c = by_spec[spec]
                peaks.append((">" if c.tpu_fits is False else "") + format_bytes(c.tpu["peak"])
                             if c.ok else "did not compile")
            best = plan.recommended
            rows.append([target, batch, "[" + ",".join(map(str, best.spec)) + "]"
                         if best is not None and best.fits else "none fits", *peaks,
                         f"{time.perf_counter() - start:.0f}"])
            print(" | ".join(map(str, rows[-1])), flush=True)
    print()
    print(format_table(["TPU", "batch", "recommended"] +
                       ["[" + ",".join(map(str, s)) + "]" for s in SPECS] + ["s"], rows))


if __name__ == "__main__":
    main()
