"""Benchmark: 2D layers on the frames of a clip split in time, four ways, on the emulator.

A block of per-frame layers (``Conv2D``, ``MaxPooling2D``, ``Conv2D``, ``Resizing`` back
to the frame size) on clips ``(batch, frames, height, width, 3)``, written as users
write it: the frames folded into the batch by einops or ``tf.reshape`` around the 2D
layers, or Keras' ``TimeDistributed``; and with ``spatial_tf.layers``' per-frame layers,
which keep the 5-D shape. Per-core temp (XLA:CPU) of the SGD train step, split
``[1,2,1,1,1]`` (time) on 2 cores, against the one-core step; the bytes per core XLA
gathers or sends frame by frame (the report's warnings), and the report's fix. The
folded block split ``[1,1,2,1,1]`` (height; after ``partition_friendly``, for Keras'
``Resizing``) is the other fix the report names.

    python benchmarks/video_per_frame.py                     # 2 x 8 x 32 x 32 clips
    python benchmarks/video_per_frame.py --frames 16 --size 64
"""
import argparse
import os
import re
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def block(way, frames, size, filters=16):
    """The Keras model of the block written ``way``."""
    import keras
    import tensorflow as tf

    import spatial_tf

    two_d = [keras.layers.Conv2D(filters, 3, padding="same", activation="relu"),
             keras.layers.MaxPooling2D(2),
             keras.layers.Conv2D(filters, 3, padding="same", activation="relu"),
             keras.layers.Resizing(size, size)]
    inputs = keras.Input((frames, size, size, 3))
    x = inputs
    if way == "per-frame layers":
        for layer in [spatial_tf.layers.FrameConv2D(filters, 3, padding="same", activation="relu"),
                      spatial_tf.layers.FrameMaxPooling2D(2),
                      spatial_tf.layers.FrameConv2D(filters, 3, padding="same", activation="relu"),
                      spatial_tf.layers.FrameResizing(size, size)]:
            x = layer(x)
    elif way == "TimeDistributed":
        for layer in two_d:
            x = keras.layers.TimeDistributed(layer)(x)
    else:
        if way == "einops fold":
            import einops

            def fold(y):
                return einops.rearrange(y, "b t h w c -> (b t) h w c")

            def unfold(y):
                return einops.rearrange(y, "(b t) h w c -> b t h w c", t=frames)
        else:
            def fold(y):
                return tf.reshape(y, [-1] + list(y.shape[2:]))

            def unfold(y):
                return tf.reshape(y, [-1, frames] + list(y.shape[1:]))
        x = keras.layers.Lambda(fold)(x)
        for layer in two_d:
            x = layer(x)
        x = keras.layers.Lambda(unfold)(x)
    return keras.Model(inputs, x)


def measure(model, batch, spec):
    """``(report, temp per core, one-core temp, bytes per core in the warnings)``."""
    import keras
    import numpy as np
    import tensorflow as tf

    import spatial_tf

    optimizer = keras.optimizers.SGD(0.01)
    optimizer.build(model.trainable_variables)

    def train_step(clips):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(spatial_tf.split(clips, spec)) ** 2)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables))
        return loss

    clips = np.zeros((batch,) + tuple(model.input_shape[1:]), np.float32)
    report = spatial_tf.Emulator(int(np.prod(spec))).report(train_step, (clips,))
    sent = sum(_bytes(re.search(r"x, ([\d.]+ \w+) per core", w).group(1))
               for w in report.warnings)
    return report, report.partitioned["temp"], report.unpartitioned["temp"], sent


def _bytes(text):
    value, unit = text.split()
    return float(value) * 1024 ** ["B", "KiB", "MiB", "GiB"].index(unit)


def _fix(report):
    """The start of the report's first fix, or "none"."""
    if not report.warnings:
        return "none"
    fix = report.warnings[0].split("Fix: ", 1)[1]
    fix = fix.replace(" (FrameConv2D.from_conv2d(conv) converts a keras.layers.Conv2D, "
                      "weights included)", "")
    return fix.split(", which")[0].split(". ")[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--batch", type=int, default=2)
    args = parser.parse_args(argv)
    from spatial_tf import logs

    logs.start_tensorflow()
    from spatial_tf.table import format_bytes, format_table

    import spatial_tf

    rows = []
    time, height = [1, 2, 1, 1, 1], [1, 1, 2, 1, 1]
    for way, spec in (("einops fold", time), ("tf.reshape fold", time),
                      ("TimeDistributed", time), ("per-frame layers", time),
                      ("tf.reshape fold", height)):
        model = block(way, args.frames, args.size)
        if spec == height:  # Keras' Resizing by 2 gathers a split height; this keeps it
            spatial_tf.layers.partition_friendly(model, warn=False)
            way += ", partition_friendly"
        report, temp, one, sent = measure(model, args.batch, spec)
        rows.append([way, str(spec), format_bytes(temp), format_bytes(one), f"{temp / one:.2f}",
                     format_bytes(sent), _fix(report)])
    print(format_table(
        ["block", "spec", "temp per core", "one core", "ratio", "gathered / sent", "fix named"],
        rows, title=f"per-frame block, {args.batch}x{args.frames}x{args.size}x{args.size}x3 "
                    f"clips, SGD, 2 cores (XLA:CPU; ideal ratio 0.5)",
        right=("temp per core", "one core", "ratio", "gathered / sent")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
