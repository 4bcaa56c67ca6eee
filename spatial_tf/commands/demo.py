"""``python -m spatial_tf demo``: a spec applied to nested inputs in a training step.

Builds the seeds' (features, labels) dataset, validates the TPUEstimator-style spec
against its ``element_spec``, prints the layout table, then trains a small segmentation
net for a few steps with a custom training loop that calls ``spatial_tf.split``.
"""
import sys
import time

__all__ = ["add_parser", "run"]


def add_parser(subparsers):
    p = subparsers.add_parser(
        "demo",
        help="train a small model on split nested inputs and print the layout",
        description=__doc__,
    )
    p.add_argument("--cores", type=int, default=4, help="cores per replica (default 4)")
    p.add_argument("--size", type=int, default=64, help="image height and width (default 64)")
    p.add_argument("--batch", type=int, default=4, help="batch size (default 4)")
    p.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    p.set_defaults(func=run)
    return p


def make_spec(cores):
    """The seeds' spec: image split along height, mask in a 2-D grid, labels replicated."""
    rows = 2 if cores >= 4 else 1
    return [
        {"image": [1, cores, 1, 1], "image_mask": [1, rows, cores // rows, 1]},
        {"class_label": [1], "mask": None},
    ]


def run(args):
    from spatial_tf.devices import virtual_cpus

    virtual_cpus(max(args.cores, 2))  # before TensorFlow initializes

    import keras
    import tensorflow as tf

    import spatial_tf
    from spatial_tf.data import segmentation_dataset

    spec = make_spec(args.cores)
    ds = segmentation_dataset(batch_size=args.batch, size=args.size)
    print(f"spatial_tf demo: {args.cores} cores per replica, {args.size}x{args.size} images, "
          f"batch {args.batch}\n")
    print("spec (TPUEstimator input_partition_dims form):", spec, "\n")
    print(spatial_tf.summary(spec, ds.element_spec, args.cores), "\n")

    model = keras.Sequential(
        [keras.Input((args.size, args.size, 3)),
         keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
         keras.layers.Conv2D(1, 3, padding="same")]
    )
    optimizer = keras.optimizers.Adam(0.02)
    optimizer.build(model.trainable_variables)

    @tf.function(jit_compile=True)
    def train_step(batch):
        features, labels = spatial_tf.split(batch, spec, num_cores_per_replica=args.cores)
        with tf.GradientTape() as tape:
            logits = model(features["image"], training=True)
            loss = tf.reduce_mean(
                features["image_mask"]
                * tf.nn.sigmoid_cross_entropy_with_logits(labels["mask"], logits)
            )
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    it = iter(ds)
    hlo = train_step.experimental_get_compiler_ir(next(it))(stage="hlo")
    print("shardings in the compiled step (XLA HLO):")
    for line in hlo.splitlines():
        if 'custom_call_target="Sharding"' in line:
            shape = line.split("=", 1)[1].split("custom-call")[0].strip()
            print("  ", shape, line.split("sharding=")[1].split(", metadata")[0])
    print()
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        loss = float(train_step(next(it)))
        if step == 1 or step % 5 == 0 or step == args.steps:
            print(f"step {step:3d}/{args.steps}  loss {loss:.4f}  "
                  f"({time.perf_counter() - start:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    from spatial_tf.__main__ import main

    sys.exit(main(["demo"] + sys.argv[1:]))
