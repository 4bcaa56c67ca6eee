"""Benchmark: the planner's verdicts against what is published about real TPU runs.

Each row is a configuration the Cloud TPU page "Processing large images with Cloud TPU"
or tensorflow/tpu's configurations (``models/official/unet3d/configs/cloud/``,
``models/official/retinanet/``) state, planned with ``spatial_tf.plan(..., budget="v3",
specs=[spec])``: with libtpu installed the verdict and the per-core peak are the TPU
compiler's (XLA:TPU for v3, compile-only), at the real size.

- 3D U-Net as tensorflow/tpu publishes it (``unet3d(preset="model_garden")``: 4 levels,
  32-512 filters, batch norm, 2x2x2 transposed-convolution upsampling, the same layer for
  layer), in Keras 3's ``mixed_bfloat16`` (tensorflow/tpu builds it under
  ``bfloat16_scope``), trained by Adam on spatial_tf's cross-entropy + soft Dice with
  int32 labels.
- RetinaNet as tensorflow/tpu publishes it (``retinanet_architecture.py``): ResNet-50
  (Keras' ``keras.applications.ResNet50``, random weights), FPN P3-P7 with 256 channels
  and batch norm, class and box heads of four 3x3 convolutions (256) shared across levels
  with batch norm per level, 9 anchors, 90 classes; ``mixed_bfloat16``; focal loss + Huber
  box loss against all-background targets made in the step (no target tensors fed);
  momentum SGD.

What differs from the published runs, and moves memory: Keras 3's batch norm computes in
float32 under ``mixed_bfloat16`` (tensorflow/tpu's computes in bfloat16 under
``bfloat16_scope``); tensorflow/tpu's U-Net Dice configurations feed one-hot float labels
where this step feeds int32 indices; RetinaNet's targets are made inside the step.

    python benchmarks/tpu_published.py                 # every row (long: the fitting
                                                        # compiles take minutes each)
    python benchmarks/tpu_published.py --rows 1,4      # some rows
    python benchmarks/tpu_published.py --list          # the rows and what was published
    python benchmarks/tpu_published.py --rows 1 --batch-norm none   # U-Net without BN
"""
import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# (model, what was published, source, input shape, cores per replica, spec, published fits)
ROWS = [
    ("unet3d", "128^3, batch 4 per core, one v3 core",
     "tensorflow/tpu v3-8_128x128x128_dice.yaml (global batch 32, 8 cores, no partition)",
     (4, 128, 128, 128, 1), 1, (1, 1, 1, 1, 1), True),
    ("unet3d", "128^3, batch 16 per replica, 8 cores [1,8,1,1,1]",
     "tensorflow/tpu v3-8_128x128x128_ce.yaml (global batch 16, one replica of 8 cores)",
     (16, 128, 128, 128, 1), 8, (1, 8, 1, 1, 1), True),
    ("unet3d", "256^3, batch 4 per replica, 16 cores [1,16,1,1,1]",
     "tensorflow/tpu v3-32_256x256x256_ce.yaml (global batch 8, 2 replicas of 16 cores)",
     (4, 256, 256, 256, 1), 16, (1, 16, 1, 1, 1), True),
    ("unet3d", "256^3, batch 1, one v3 core",
     "Cloud TPU page: 256^3 'do not fit into a single TPU core'",
     (1, 256, 256, 256, 1), 1, (1, 1, 1, 1, 1), False),
    ("retinanet", "1280^2, batch 8 per core, one v3 core",
     "Cloud TPU page: 'the largest image that can fit on a single Cloud TPU core (with "
     "per-device batch 8) is 1280x1280'", (8, 1280, 1280, 3), 1, (1, 1, 1, 1), True),
    ("retinanet", "2560^2, batch 8 per core, one v3 core",
     "Cloud TPU page: 1280^2 is the largest that fits one core", (8, 2560, 2560, 3), 1,
     (1, 1, 1, 1), False),
    ("retinanet", "2560^2, batch 8 per replica, 8 cores [1,4,2,1]",
     "Cloud TPU page: 2560^2 on v3-64, global batch 64; retinanet_main.py "
     "input_partition_dims=[1, 4, 2, 1]", (8, 2560, 2560, 3), 8, (1, 4, 2, 1), True),
]


def bfloat16_batch_norm(model):
    """``model`` with each Keras ``BatchNormalization`` replaced by tensorflow/tpu's batch
    norm under ``bfloat16_scope``: TensorFlow's fused batch norm on the bfloat16
    activations themselves (``tf.compat.v1.nn.fused_batch_norm``, float32 scale, offset
    and statistics), where Keras 3's casts its inputs to float32 first."""
    import keras
    import tensorflow as tf

    class FusedBfloat16BatchNorm(keras.layers.BatchNormalization):
        def call(self, inputs, training=None, mask=None):
            rank = len(inputs.shape)
            if self.axis not in (-1, rank - 1, [-1], [rank - 1]) or rank not in (4, 5):
                return super().call(inputs, training=training, mask=mask)
            fmt = "NHWC" if rank == 4 else "NDHWC"
            ones = tf.ones([inputs.shape[-1]], tf.float32)
            scale = tf.cast(self.gamma.value, tf.float32) if self.scale else ones
            offset = tf.cast(self.beta.value, tf.float32) if self.center else ones * 0
            if not training:
                y, _, _ = tf.compat.v1.nn.fused_batch_norm(
                    inputs, scale, offset, tf.cast(self.moving_mean.value, tf.float32),
                    tf.cast(self.moving_variance.value, tf.float32), self.epsilon,
                    data_format=fmt, is_training=False)
                return y
            y, mean, variance = tf.compat.v1.nn.fused_batch_norm(
                inputs, scale, offset, epsilon=self.epsilon, data_format=fmt,
                is_training=True)
            m = self.momentum
            self.moving_mean.assign(self.moving_mean * m + mean * (1 - m))
            self.moving_variance.assign(self.moving_variance * m + variance * (1 - m))
            return y

    def clone(layer):
        if type(layer) is keras.layers.BatchNormalization:
            return FusedBfloat16BatchNorm.from_config(layer.get_config())
        return layer.__class__.from_config(layer.get_config())

    return keras.models.clone_model(model, clone_function=clone)


def retinanet_step(image_shape, num_classes=90, anchors=9, batch_norm="keras"):
    """tensorflow/tpu's RetinaNet train step (see the module docstring), built for
    ``image_shape`` (height, width, channels); ``batch_norm="bf16"``: with
    ``bfloat16_batch_norm``."""
    import keras
    import tensorflow as tf

    backbone = keras.applications.ResNet50(weights=None, include_top=False,
                                           input_shape=image_shape)
    c3, c4, c5 = (backbone.get_layer(n).output for n in
                  ("conv3_block4_out", "conv4_block6_out", "conv5_block3_out"))
    layers = keras.layers
    laterals = [layers.Conv2D(256, 1, name=f"l{i}")(c) for i, c in zip((3, 4, 5), (c3, c4, c5))]
    p5 = laterals[2]
    p4 = layers.Add()([laterals[1], layers.UpSampling2D(2)(p5)])
    p3 = layers.Add()([laterals[0], layers.UpSampling2D(2)(p4)])
    levels = [layers.Conv2D(256, 3, padding="same", name=f"post{i}")(p)
              for i, p in zip((3, 4, 5), (p3, p4, p5))]
    p6 = layers.Conv2D(256, 3, strides=2, padding="same", name="p6")(c5)
    p7 = layers.Conv2D(256, 3, strides=2, padding="same", name="p7")(layers.ReLU()(p6))
    levels = [layers.BatchNormalization(name=f"p{i}_bn")(p)
              for i, p in zip(range(3, 8), levels + [p6, p7])]
    heads = {}
    for head, width in (("class", num_classes * anchors), ("box", 4 * anchors)):
        convs = [layers.Conv2D(256, 3, padding="same", name=f"{head}_{i}") for i in range(4)]
        final = layers.Conv2D(width, 3, padding="same", name=f"{head}_out", dtype="float32")
        outputs = []
        for level, x in zip(range(3, 8), levels):
            for i, conv in enumerate(convs):  # weights shared, batch norm per level
                x = layers.ReLU()(layers.BatchNormalization(name=f"{head}_{i}_bn{level}")(conv(x)))
            outputs.append(final(x))
        heads[head] = outputs
    model = keras.Model(backbone.input, heads)
    if batch_norm == "bf16":
        model = bfloat16_batch_norm(model)
    optimizer = keras.optimizers.SGD(0.08, momentum=0.9)
    optimizer.build(model.trainable_variables)

    def train_step(images):
        with tf.GradientTape() as tape:
            out = model(images, training=True)
            loss = 0.0
            for logits, boxes in zip(out["class"], out["box"]):
                background = tf.zeros_like(logits)  # every anchor background, in the step
                loss += tf.reduce_sum(keras.losses.binary_focal_crossentropy(
                    background, logits, gamma=1.5, from_logits=True))
                loss += 50.0 * tf.reduce_sum(keras.losses.huber(tf.zeros_like(boxes), boxes,
                                                                 delta=0.1))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    train_step.model = model  # for the gradient bytes of a data-parallel step
    return train_step


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default=None, help="row numbers, e.g. 1,4 (default all)")
    p.add_argument("--budget", default="v3", help="TPU generation (default v3)")
    p.add_argument("--list", action="store_true", help="list the rows and exit")
    p.add_argument("--batch-norm", choices=("keras", "none"), default="keras",
                   help="Keras 3's batch norm as published (default), or none: how much "
                        "the batch norm moves memory")
    args = p.parse_args(argv)
    chosen = [int(r) for r in args.rows.split(",")] if args.rows else range(1, len(ROWS) + 1)
    if args.list:
        for number, row in enumerate(ROWS, 1):
            print(f"{number}. {row[0]} {row[1]}: {'ran' if row[6] else 'does not fit'} "
                  f"({row[2]})")
        return 0

    import keras

    import spatial_tf
    from spatial_tf import planning
    from spatial_tf.emulator.tpu.tpu_compile import libtpu_version
    from spatial_tf.models import ModelGardenUNetOptions, unet3d
    from spatial_tf.table import format_bytes, format_table

    if libtpu_version() is None:
        print("libtpu is not installed: pip install 'spatial-tf[tpu-compile]'", file=sys.stderr)
        return 2
    results = []
    for number in chosen:
        kind, what, source, shape, cores, spec, published = ROWS[number - 1]
        keras.backend.clear_session()
        if kind == "unet3d":
            model = unet3d(shape[1:], num_classes=3, preset="model_garden",
                           dtype_policy="mixed_bfloat16",
                           options=ModelGardenUNetOptions(batch_norm=args.batch_norm == "keras"))
        else:
            keras.config.set_dtype_policy("mixed_bfloat16")
            model = retinanet_step(shape[1:])
            keras.config.set_dtype_policy("float32")
        start = time.perf_counter()
        plan = spatial_tf.plan(model, shape, cores, budget=args.budget, specs=[spec],
                               options=planning.PlanOptions(progress=False))
        seconds = time.perf_counter() - start
        c = plan.candidates[0]
        agree = c.fits == published
        results.append([number, f"{kind} {what}", "ran" if published else "does not fit",
                        "fits" if c.fits else "out of memory",
                        ("" if c.fits else "> ") + format_bytes(c.peak("tpu")),
                        "yes" if agree else "NO", f"{seconds:.0f}"])
        print(f"row {number} done in {seconds:.0f} s: {c.fits}, {format_bytes(c.peak('tpu'))}",
              file=sys.stderr, flush=True)
    print(format_table(
        ["#", "tensorflow/tpu model, bf16", "published",
         "TPU compiler", "peak per core", "agrees", "s"],
        results, right=("peak per core", "s"),
        title=f"Published TPU runs against the planner with the TPU compiler "
              f"(XLA:TPU {args.budget}, libtpu {libtpu_version()}, compile-only)"
              + ("" if args.batch_norm == "keras" else "; the U-Net without batch norm")))
    return 0 if all(r[5] == "yes" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
