"""Benchmark: per-core memory of users' own Keras models, as written and after
``spatial_tf.layers.partition_friendly``.

The models are written the way a Keras user writes them, with Keras layers only (no
spatial_tf layer inside):

- ``unet3d``: a 3D U-Net in the style of keras-io's segmentation examples (two
  ``Conv3D`` + ``BatchNormalization`` + ReLU per level, ``MaxPooling3D``,
  ``Conv3DTranspose`` and ``Concatenate`` on the way up), 3 levels, 8-32 filters, 64^3,
  1 channel, 3 classes, batch 1, SGD; loss: ``spatial_tf.losses.sparse_categorical_crossentropy``
  (``--loss keras`` for Keras' own).
- ``resnet2d``: a ResNet-style 2D classifier (7x7 stride-2 stem, three stages of two
  residual blocks, stride-2 3x3 convs between stages, global average pooling, dense head),
  256^2, 3 channels, 10 classes, batch 2, SGD, Keras' sparse cross-entropy.

Each train step is compiled by XLA's SPMD partitioner on ``N`` emulated cores for each
spec. Printed per spec and model form: temp bytes per core, the memory scaling
efficiency E(N) = temp(1) / (N * temp(N)) (temp(1): the same step unpartitioned), and the
number of all-gathers / all-to-alls. These are XLA:CPU figures from the emulator, not TPU
measurements; ``--target v5e`` adds E(N) from XLA's TPU compiler for that generation
(libtpu, compile-only: the same step's temp per core against its one-core program).

    python benchmarks/partition_friendly.py                   # unet3d, 8 cores
    python benchmarks/partition_friendly.py --model resnet2d  # 4 cores
    python benchmarks/partition_friendly.py --size 32         # quicker
    python benchmarks/partition_friendly.py --target v5e      # and the TPU compiler's E(8)
    python benchmarks/partition_friendly.py --loss keras --warnings  # each gather's fix
    # XLA's CSE off too: the SPMD partitioner's boundary masks are then recomputed at
    # each use instead of held through the step (not the emulator's memory model)
    python benchmarks/partition_friendly.py --disable-hlo-passes cpu-all-reduce-combiner,cse
"""
import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
_HERE = os.path.dirname(os.path.abspath(__file__))
# the repository (for spatial_tf from a checkout) and benchmarks/ (for _tpu_cells,
# also when a test loads this file by path)
sys.path[:0] = [os.path.join(_HERE, ".."), _HERE]
from _tpu_cells import step_time_cell  # noqa: E402

FORMS = ("as written", "partition_friendly", "halo=False", "halo only")
SPECS = {"unet3d": ([1, 8, 1, 1, 1], [1, 2, 2, 2, 1]), "resnet2d": ([1, 4, 1, 1], [1, 2, 2, 1])}
CORES = {"unet3d": 8, "resnet2d": 4}


def keras_unet3d(size, depth=3, filters=8, classes=3):
    """A 3D U-Net as keras-io's examples write one (Keras layers only)."""
    import keras
    from keras import layers

    def block(x, n):
        for _ in range(2):
            x = layers.Conv3D(n, 3, padding="same", use_bias=False)(x)
            x = layers.BatchNormalization()(x)
            x = layers.Activation("relu")(x)
        return x

    inputs = keras.Input((size, size, size, 1))
    x, skips = inputs, []
    for level in range(depth - 1):
        x = block(x, filters * 2 ** level)
        skips.append(x)
        x = layers.MaxPooling3D(2)(x)
    x = block(x, filters * 2 ** (depth - 1))
    for level in reversed(range(depth - 1)):
        x = layers.Conv3DTranspose(filters * 2 ** level, 2, strides=2, padding="same")(x)
        x = layers.Concatenate()([x, skips[level]])
        x = block(x, filters * 2 ** level)
    return keras.Model(inputs, layers.Conv3D(classes, 1)(x), name="keras_unet3d")


def keras_resnet2d(size, classes=10):
    """A small ResNet-style classifier (Keras layers only)."""
    import keras
    from keras import layers

    def conv_bn(x, n, k, strides=1, relu=True):
        x = layers.Conv2D(n, k, strides=strides, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization()(x)
        return layers.Activation("relu")(x) if relu else x

    inputs = keras.Input((size, size, 3))
    x = conv_bn(inputs, 16, 7, strides=2)
    x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
    for stage, n in enumerate((16, 32, 64)):
        for block in range(2):
            strides = 2 if stage and not block else 1
            shortcut = x
            if strides != 1 or x.shape[-1] != n:
                shortcut = conv_bn(x, n, 1, strides=strides, relu=False)
            y = conv_bn(x, n, 3, strides=strides)
            y = conv_bn(y, n, 3, relu=False)
            x = layers.Activation("relu")(layers.Add()([y, shortcut]))
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(classes)(x), name="keras_resnet2d")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(SPECS), default="unet3d")
    p.add_argument("--size", type=int, default=None,
                   help="image / volume edge (default 64 for unet3d, 256 for resnet2d)")
    p.add_argument("--loss", choices=["spatial_tf", "keras"], default="spatial_tf",
                   help="unet3d's loss: spatial_tf.losses' or Keras' sparse cross-entropy")
    p.add_argument("--warnings", action="store_true",
                   help="also print each report's gather warnings (op, line, fix)")
    p.add_argument("--disable-hlo-passes", default=None, metavar="PASSES",
                   help="XLA passes to skip in every compile, comma-separated (default: the "
                        "emulator's, spatial_tf.emulator.xla._xla.TPU_LIKE_OPTIONS)")
    p.add_argument("--target", default=None,
                   help="a TPU generation (e.g. v5e): add the TPU compiler's E(N)")
    p.add_argument("--splits", default="slab,cube",
                   help="which of the model's two specs: slab (one axis), cube (all three "
                        "spatial axes; two for resnet2d), or both (default)")
    p.add_argument("--forms", default="as written,partition_friendly",
                   help="the model as written, after partition_friendly, or both (default); "
                        "also 'halo=False' (partition_friendly(model, halo=False)) and 'halo "
                        "only' (partition_friendly with the update order of the other "
                        "convolutions taken back)")
    args = p.parse_args(argv)
    for value, known in ((args.splits, ("slab", "cube")), (args.forms, FORMS)):
        if not set(value.split(",")) <= set(known):
            p.error(f"{value!r}: expected a comma-separated choice of {', '.join(known)}")
    options = (None if args.disable_hlo_passes is None
               else {"xla_disable_hlo_passes": args.disable_hlo_passes})

    import keras
    import numpy as np
    import tensorflow as tf

    import spatial_tf
    from spatial_tf.layers import partition_friendly
    from spatial_tf.table import format_bytes, format_table

    size = args.size or (64 if args.model == "unet3d" else 256)
    cores = CORES[args.model]
    rng = np.random.default_rng(0)
    if args.model == "unet3d":
        batch, classes = 1, 3
        image = tf.constant(rng.normal(size=(batch, size, size, size, 1)), tf.float32)
        labels = tf.constant(rng.integers(0, classes, (batch, size, size, size)), tf.int32)
        if args.loss == "spatial_tf":
            loss_fn = lambda y, p: spatial_tf.losses.sparse_categorical_crossentropy(  # noqa: E731
                y, p, from_logits=True)
        else:
            loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    else:
        batch, classes = 2, 10
        image = tf.constant(rng.normal(size=(batch, size, size, 3)), tf.float32)
        labels = tf.constant(rng.integers(0, classes, (batch,)), tf.int32)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    print(f"{args.model} at {size}, batch {batch}, {cores} emulated cores, loss "
          f"{args.loss if args.model == 'unet3d' else 'keras'}"
          + (f", XLA passes off: {args.disable_hlo_passes}" if options else ""), flush=True)

    rows = []
    chosen = dict(zip(("slab", "cube"), SPECS[args.model]))
    for form in args.forms.split(","):
        for spec in (chosen[name] for name in args.splits.split(",")):
            emulator = spatial_tf.Emulator(cores, compiler_options=options, target=args.target)
            with emulator.scope():
                keras.utils.set_random_seed(0)
                model = keras_unet3d(size) if args.model == "unet3d" else keras_resnet2d(size)
                optimizer = keras.optimizers.SGD(0.01)
                optimizer.build(model.trainable_variables)
            if form != "as written":
                changes = partition_friendly(model, warn=False, halo=form != "halo=False")
                if form == "halo only":
                    _take_back_the_order(model, changes)
            label_spec = spec[:-1] if args.model == "unet3d" else None

            def step(image, labels):
                image, labels = spatial_tf.split((image, labels), [spec, label_spec])
                with tf.GradientTape() as tape:
                    loss = loss_fn(labels, model(image, training=True))
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss

            report = emulator.report(step, args=(image, labels))
            kinds = report.by_kind()
            temp1, temp = report.unpartitioned["temp"], report.partitioned["temp"]
            rows.append([form, ",".join(map(str, spec)), format_bytes(temp1),
                         format_bytes(temp), f"{temp1 / (cores * temp):.2f}",
                         kinds.get("all-gather", {}).get("count", 0),
                         kinds.get("all-to-all", {}).get("count", 0)] + _tpu_cells(report, cores))
            print(f"  {form}, {spec}: done", flush=True)
            if args.warnings:
                print("".join(f"    - {w}\n" for w in report.warnings), end="", flush=True)
    print()
    tpu = [] if args.target is None else [f"TPU temp/core", f"TPU E({cores})",
                                          "TPU step time split / one core"]
    print(format_table(
        ["model", "spec", "temp unpartitioned", "temp/core", f"E({cores})", "all-gathers",
         "all-to-alls"] + tpu, rows,
        right=("temp unpartitioned", "temp/core", f"E({cores})", "all-gathers", "all-to-alls",
               *tpu),
        title=f"{args.model} train step at {size}, per core, on {cores} emulated cores "
              f"(XLA:CPU{'' if args.target is None else '; TPU columns: the TPU compiler for ' + args.target})"))
    return 0


def _take_back_the_order(model, changes):
    """Undo ``partition_friendly``'s update order on the convolutions that got only that
    (strided, 1x1, transposed), keeping the halo form of the others."""
    layers = {layer.name: layer for layer in model._flatten_layers()}
    for change in changes:
        if "made to wait" in change.after:
            layer = layers[change.path.split("/")[-1]]
            for attribute in ("convolution_op", "call"):  # set on the layer object itself
                vars(layer).pop(attribute, None)


def _tpu_cells(report, cores):
    """The TPU compiler's temp per core, E(N) and the cost model's step times (none
    without a target)."""
    if not report.tpu:
        return []
    from spatial_tf.table import format_bytes

    one, part = report.tpu["unpartitioned"]["temp"], report.tpu["partitioned"]["temp"]
    return [format_bytes(part), f"{one / (cores * part):.2f}", step_time_cell(report.tpu)]


if __name__ == "__main__":
    sys.exit(main())
