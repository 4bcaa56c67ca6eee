"""Benchmark: a (2+1)D video network that resizes frames inside the model, before and after
``partition_friendly``, split in space on the emulator.

The pattern of TensorFlow's video tutorials (tensorflow.org/tutorials/video/video_classification):
``Conv3D (1,k,k)`` then ``Conv3D (k,1,1)``, LayerNormalization, and between blocks the
time axis folded into the batch (``b t h w c -> (b t) h w c``), Keras' ``Resizing`` to
half the frame size, and unfolded. Per-core temp (XLA:CPU) of the train step, split
``[1,1,2,2,1]`` on 4 cores, against the one-core step, and the TensorFlow ops whose
outputs XLA gathers.

    python benchmarks/video_resize.py                  # 10 x 112 x 112 clips, batch 2
    python benchmarks/video_resize.py --size 224       # the tutorial's frame size
    python benchmarks/video_resize.py --size 224 --target v5e   # and the TPU compiler's

With ``--target``, each row adds the per-core temp of the same step from XLA's TPU
compiler for that generation (libtpu, compile-only), against its one-core program, and a
third row has the forms ``partition_friendly(model, target=...)`` picks for that TPU.
"""
import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def model_2plus1d(frames, size, filters=(16, 32)):
    import keras
    import tensorflow as tf

    def fold(x):   # b t h w c -> (b t) h w c
        return tf.reshape(x, [-1] + list(x.shape[2:]))

    def unfold(x, t):
        return tf.reshape(x, [-1, t] + list(x.shape[1:]))

    inputs = keras.Input((frames, size, size, 3))
    x = inputs
    for i, f in enumerate(filters):
        x = keras.layers.Conv3D(f, (1, 3, 3), padding="same")(x)
        x = keras.layers.Conv3D(f, (3, 1, 1), padding="same", activation="relu")(x)
        x = keras.layers.LayerNormalization()(x)
        if i + 1 < len(filters):
            h = x.shape[2] // 2
            x = keras.layers.Lambda(fold)(x)
            x = keras.layers.Resizing(h, h)(x)
            x = keras.layers.Lambda(lambda y: unfold(y, frames))(x)
    x = keras.layers.GlobalAveragePooling3D()(x)
    return keras.Model(inputs, keras.layers.Dense(10)(x))


def measure(model, batch, spec, target=None):
    import keras
    import numpy as np
    import tensorflow as tf

    import spatial_tf

    optimizer = keras.optimizers.SGD(0.01)
    optimizer.build(model.trainable_variables)

    def train_step(clips, labels):
        with tf.GradientTape() as tape:
            logits = model(spatial_tf.split(clips, spec), training=True)
            loss = tf.reduce_mean(spatial_tf.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables))
        return loss

    clips = np.zeros((batch,) + tuple(model.input_shape[1:]), np.float32)
    labels = np.zeros((batch,), np.int32)
    cores = int(np.prod(spec))
    report = spatial_tf.Emulator(cores, target=target).report(train_step, (clips, labels))
    gathered = sorted({w.split("TensorFlow op '")[1].split("'")[0].rsplit("/", 1)[-1]
                       for w in report.warnings if "TensorFlow op '" in w})
    on_tpu = None if target is None else (report.tpu["partitioned"]["temp"],
                                          report.tpu["unpartitioned"]["temp"])
    return report.partitioned["temp"], report.unpartitioned["temp"], gathered, on_tpu


def _ratio(part, whole):
    """``part / whole`` to 3 places; "n/a" for a one-core step with no temp (tiny clips)."""
    return f"{part / whole:.3f}" if whole else "n/a"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=10)
    parser.add_argument("--size", type=int, default=112)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--target", default=None,
                        help="a TPU generation (e.g. v5e): add the TPU compiler's ratio")
    args = parser.parse_args(argv)
    from spatial_tf import logs

    logs.start_tensorflow()
    import spatial_tf
    from spatial_tf.table import format_bytes, format_table

    spec = [1, 1, 2, 2, 1]
    stages = {"as written": None, "after partition_friendly": {}}
    if args.target:  # the forms partition_friendly picks for that TPU, on a fresh model
        stages[f"after partition_friendly(target={args.target!r})"] = {"target": args.target}
    rows = []
    for stage, friendly in stages.items():
        model = model_2plus1d(args.frames, args.size)
        if friendly is not None:
            spatial_tf.layers.partition_friendly(model, warn=False, **friendly)
        temp, one, gathered, on_tpu = measure(model, args.batch, spec, args.target)
        row = [stage, format_bytes(temp), format_bytes(one), _ratio(temp, one)]
        if on_tpu:
            row += [format_bytes(on_tpu[0]), format_bytes(on_tpu[1]), _ratio(*on_tpu)]
        rows.append(row + [", ".join(gathered) or "none"])
    tpu = [] if args.target is None else [f"TPU {args.target} temp", "TPU one core", "TPU ratio"]
    print(format_table(
        ["model", "temp per core", "one core", "ratio"] + tpu + ["gathered at"], rows,
        title=f"(2+1)D network with Resizing, {args.batch}x{args.frames}x{args.size}x"
              f"{args.size}x3, {spec} on 4 cores (XLA:CPU"
              f"{'' if args.target is None else '; TPU columns: the TPU compiler for ' + args.target}"
              f"; ideal ratio 0.25 + halos)",
        right=("temp per core", "one core", "ratio", *tpu)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
