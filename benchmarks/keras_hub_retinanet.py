"""Benchmark: KerasHub's RetinaNet train step on 4 emulated cores, as written and after
``spatial_tf.layers.partition_friendly``.

The model is KerasHub's own, as docs/detection.md ("Why not KerasHub's RetinaNet")
describes it: ``keras_hub.models.RetinaNetObjectDetector`` on a ``RetinaNetBackbone`` over
the smallest ``ResNetBackbone`` it accepts (a 64-filter 7x7 stem, 64 filters in every
stage, one basic block each), P3-P5, one head convolution before the logits, 3 classes,
256 x 256, batch 1. The loss is the model's own ``compute_loss`` (its
``RetinaNetLabelEncoder`` matches 8 padded boxes to the anchors; Huber and focal losses
from ``compile``), in a custom SGD step: ``spatial_tf.split`` splits the image and
replicates the labels.

Each train step is compiled by XLA's SPMD partitioner on 4 emulated cores for each spec
(``Emulator.report``). Printed per spec and model form: temp bytes of the unpartitioned
step and per core, their ratio (temp per core / unpartitioned; 0.25 would be a perfect
split over 4 cores), and the number of all-gathers / all-to-alls. These are XLA:CPU
figures from the emulator, not TPU measurements.

    python benchmarks/keras_hub_retinanet.py              # 256 x 256
    python benchmarks/keras_hub_retinanet.py --warnings   # where each gather comes from
    python benchmarks/keras_hub_retinanet.py --loss squared  # the model alone

It needs KerasHub (``pip install -e ".[keras-hub]"``), beside Keras 3 and TensorFlow.
"""
import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

CORES = 4
SPECS = ([1, 4, 1, 1], [1, 2, 2, 1])
CLASSES = 3
BATCH = 1
MAX_BOXES = 8


def keras_hub_retinanet(size):
    """KerasHub's RetinaNet over its smallest ResNet, compiled for its own losses."""
    import keras
    import keras_hub

    image_encoder = keras_hub.models.ResNetBackbone(
        input_conv_filters=[64], input_conv_kernel_sizes=[7],
        stackwise_num_filters=[64, 64, 64, 64], stackwise_num_blocks=[1, 1, 1, 1],
        stackwise_num_strides=[1, 2, 2, 2], block_type="basic_block",
        image_shape=(size, size, 3))
    backbone = keras_hub.models.RetinaNetBackbone(
        image_encoder=image_encoder, min_level=3, max_level=5, use_p5=False,
        image_shape=(size, size, 3))
    model = keras_hub.models.RetinaNetObjectDetector(
        backbone=backbone, num_classes=CLASSES, bounding_box_format="yxyx",
        pre_logits_num_conv_layers=1)
    model.compile(optimizer=keras.optimizers.SGD(0.01))  # the default Huber and focal losses
    return model


def batch(size, seed=0):
    """One image in [0, 1] and its labels: up to MAX_BOXES boxes (yxyx pixels), class -1
    on padding."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    image = rng.uniform(0, 0.2, (BATCH, size, size, 3)).astype(np.float32)
    boxes = np.zeros((BATCH, MAX_BOXES, 4), np.float32)
    classes = np.full((BATCH, MAX_BOXES), -1, np.float32)
    for b in range(BATCH):
        for i in range(3):
            h, w = rng.integers(size // 8, size // 2, 2)
            y, x = rng.integers(0, size - h), rng.integers(0, size - w)
            boxes[b, i] = (y, x, y + h, x + w)
            classes[b, i] = rng.integers(0, CLASSES)
            image[b, y:y + h, x:x + w] += 0.5 + 0.1 * classes[b, i]
    return tf.constant(image), tf.constant(boxes), tf.constant(classes)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=256, help="image edge (default 256)")
    p.add_argument("--loss", choices=["model", "squared"], default="model",
                   help="the model's own compute_loss (default), or a squared loss over its "
                        "two outputs: the model without its label encoder and losses")
    p.add_argument("--warnings", action="store_true",
                   help="also print each report's gather warnings (op, line, fix)")
    args = p.parse_args(argv)

    import keras
    import keras_hub
    import tensorflow as tf

    import spatial_tf
    from spatial_tf.layers import partition_friendly
    from spatial_tf.table import format_bytes, format_table

    size = args.size
    image, boxes, classes = batch(size)
    print(f"KerasHub {keras_hub.__version__} RetinaNet at {size}, batch {BATCH}, {CORES} "
          f"emulated cores, loss: {args.loss} (Keras {keras.__version__}, TensorFlow "
          f"{tf.__version__})", flush=True)

    rows, failures = [], []
    for form in ("as written", "partition_friendly"):
        for spec in SPECS:
            emulator = spatial_tf.Emulator(CORES)
            with emulator.scope():
                keras.utils.set_random_seed(0)
                model = keras_hub_retinanet(size)
                optimizer = keras.optimizers.SGD(0.01)
                optimizer.build(model.trainable_variables)
            if form == "partition_friendly":
                try:
                    changes = partition_friendly(model, warn=False)
                except Exception as error:  # a finding: report it and go on
                    failures.append(f"partition_friendly({model.name}): "
                                    f"{type(error).__name__}: {error}")
                    print(f"  {form}, {spec}: {failures[-1]}", flush=True)
                    break
                if spec == SPECS[0]:
                    changed = spatial_tf.layers.changed_layers(changes)
                    looked_at = {c.path for c in changes}
                    print(f"  partition_friendly: {len(changed)} of {len(looked_at)} layers "
                          f"changed; not handled: "
                          f"{[c.path for c in changes if not c.handled] or 'none'}",
                          flush=True)

            def step(image, boxes, classes):
                image, boxes, classes = spatial_tf.split((image, boxes, classes),
                                                         [spec, None, None])
                with tf.GradientTape() as tape:
                    y_pred = model(image, training=True)
                    if args.loss == "model":
                        loss = model.compute_loss(
                            x=image, y={"boxes": boxes, "labels": classes}, y_pred=y_pred,
                            sample_weight=None)
                    else:
                        loss = tf.add_n([tf.reduce_mean(tf.square(v)) for v in y_pred.values()])
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss

            report = emulator.report(step, args=(image, boxes, classes))
            kinds = report.by_kind()
            temp1, temp = report.unpartitioned["temp"], report.partitioned["temp"]
            rows.append([form, ",".join(map(str, spec)), format_bytes(temp1),
                         format_bytes(temp), f"{temp / temp1:.2f}",
                         kinds.get("all-gather", {}).get("count", 0),
                         kinds.get("all-to-all", {}).get("count", 0)])
            print(f"  {form}, {spec}: done (compile {report.compile_seconds['partitioned']:.0f} s "
                  f"partitioned, {report.compile_seconds['unpartitioned']:.0f} s "
                  f"unpartitioned)", flush=True)
            if args.warnings:
                print("".join(f"    - {w}\n" for w in report.warnings), end="", flush=True)
    print()
    print(format_table(
        ["model", "spec", "temp unpartitioned", "temp/core", "ratio", "all-gathers",
         "all-to-alls"], rows,
        right=("temp unpartitioned", "temp/core", "ratio", "all-gathers", "all-to-alls"),
        title=f"KerasHub RetinaNet train step at {size} ({args.loss} loss), per core, on "
              f"{CORES} emulated cores"))
    for failure in failures:
        print(failure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
