"""Benchmark: Model Garden's MoViNet-A0 train step split over frames, pixels or both.

MoViNet-A0 (``official.projects.movinet``, the base backbone, random initialization, no
weights downloaded) with ``MovinetClassifier``'s head, ``num_classes`` classes, Keras'
sparse cross-entropy on the logits, Adam (``--optimizer sgd`` for SGD); one train step on
``--cores`` emulated cores for each spec, first as Model Garden builds the model
(tf_keras' fused batch norm, grouped depthwise ``Conv3D``), then after
``spatial_tf.layers.partition_friendly(model)``.

Printed per spec and model form: temp bytes per core, the ratio to the same step on one
core (the unpartitioned program, compiled in the same report), the all-gathers (count /
bytes per core) and the halo exchange (collective-permutes). These are XLA:CPU figures
from the emulator, not TPU measurements; ``--target v5e`` adds the temp bytes per core
that XLA's TPU compiler assigns (libtpu, compile-only) and the step time its cost model
predicts, split and on one core.

    python benchmarks/video_movinet.py                          # 8x192x192, batch 2
    python benchmarks/video_movinet.py --frames 8 --size 64     # quicker
    python benchmarks/video_movinet.py --specs 1,1,2,2,1 --forms friendly --target v5e
    python benchmarks/video_movinet.py --frames 32 --specs 1,4,1,1,1 --forms friendly \
        --target v5e --space-to-depth

It needs Model Garden: run it in the environment of ``tests/integration``
(``pip install -e ".[model-garden]"``).
"""
import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
_HERE = os.path.dirname(os.path.abspath(__file__))
# the repository (for spatial_tf from a checkout) and benchmarks/ (for _tpu_cells,
# also when a test loads this file by path)
sys.path[:0] = [os.path.join(_HERE, ".."), _HERE]

from _tpu_cells import step_time_cell  # noqa: E402

SPECS = "1,1,2,2,1;1,4,1,1,1;1,2,2,1,1"


def movinet_classifier(frames, size, batch, num_classes, causal=False):
    """MoViNet-A0 base with Model Garden's classifier head, built for ``[batch, frames,
    size, size, 3]`` clips (random initialization)."""
    import tf_keras
    from official.projects.movinet.modeling import movinet, movinet_model

    spec = tf_keras.layers.InputSpec(shape=[None, frames, size, size, 3])
    backbone = movinet.Movinet(model_id="a0", causal=causal, input_specs=spec)
    model = movinet_model.MovinetClassifier(backbone, num_classes=num_classes,
                                            input_specs={"image": spec})
    model.build([batch, frames, size, size, 3])
    return model


def clip_loss(model, clips, labels, spec):
    """The mean sparse cross-entropy of ``model`` on ``clips`` split ``spec``."""
    import tensorflow as tf
    import spatial_tf

    logits = model(spatial_tf.split(clips, spec), training=True)
    return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
        labels, logits, from_logits=True))


def train_step(model, optimizer, spec):
    import tensorflow as tf

    def step(clips, labels):
        with tf.GradientTape() as tape:
            loss = clip_loss(model, clips, labels, spec)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--size", type=int, default=192)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--classes", type=int, default=5)
    parser.add_argument("--cores", type=int, default=4)
    parser.add_argument("--specs", default=SPECS, help="';'-separated specs")
    parser.add_argument("--forms", default="as_built,friendly")
    parser.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    parser.add_argument("--target", default=None, help="a TPU generation, e.g. v5e")
    parser.add_argument("--space-to-depth", action="store_true",
                        help="the friendly form with partition_friendly(space_to_depth=True): "
                             "the stem at stride 1 on its folded input")
    args = parser.parse_args(argv)

    import tensorflow as tf
    import tf_keras
    import spatial_tf
    from spatial_tf.table import format_bytes, format_table

    specs = [[int(c) for c in s.split(",")] for s in args.specs.split(";")]
    forms = args.forms.split(",")
    emulator = spatial_tf.Emulator(num_cores_per_replica=args.cores)
    with emulator.scope():
        tf_keras.utils.set_random_seed(0)
        model = movinet_classifier(args.frames, args.size, args.batch, args.classes)
        optimizer = (tf_keras.optimizers.Adam(1e-3) if args.optimizer == "adam"
                     else tf_keras.optimizers.SGD(0.01))
        optimizer.build(model.trainable_variables)
    clips = tf.random.stateless_normal((args.batch, args.frames, args.size, args.size, 3),
                                       (0, 1))
    labels = tf.range(args.batch) % args.classes
    print(f"MoViNet-A0 + classifier head, {model.count_params():,} parameters; clips "
          f"{args.batch}x{args.frames}x{args.size}x{args.size}x3, {args.optimizer} train step, "
          f"{args.cores} emulated cores (XLA:CPU figures"
          + (f"; TPU column: XLA's TPU compiler for {args.target}" if args.target else "")
          + ")", flush=True)
    rows = []
    for form in forms:
        if form == "friendly":
            changed = [c for c in spatial_tf.layers.partition_friendly(
                model, warn=False, space_to_depth=args.space_to_depth) if c.changed]
            print(f"partition_friendly changed {len(changed)} layers", flush=True)
        for spec in specs:
            start = time.perf_counter()
            report = emulator.report(train_step(model, optimizer, spec), (clips, labels),
                                     target=args.target)
            kinds = report.by_kind()
            gathers = [kinds.get(k, {"count": 0, "bytes": 0}) for k in ("all-gather",
                                                                       "all-to-all")]
            halo = kinds.get("collective-permute", {"count": 0, "bytes": 0})
            row = [form, str(spec), format_bytes(report.partitioned["temp"]),
                   format_bytes(report.unpartitioned["temp"]), f"{report.ratio('temp'):.2f}",
                   f"{gathers[0]['count']} / {format_bytes(gathers[0]['bytes'])}",
                   str(gathers[1]["count"]),
                   f"{halo['count']} / {format_bytes(halo['bytes'])}"]
            if args.target:
                tpu = report.tpu or {}
                part = (tpu.get("partitioned") or {}).get("temp")
                one = (tpu.get("unpartitioned") or {}).get("temp")
                row.append(format_bytes(part) if part is not None else str(tpu.get("verdict")))
                row.append(format_bytes(one) if one is not None else "-")
                row.append(f"{part / one:.3f}" if part and one else "-")
                row.append(step_time_cell(tpu))
            row.append(f"{time.perf_counter() - start:.0f}")
            rows.append(row)
            print(" | ".join(row), flush=True)
    headers = ["model", "spec", "temp per core", "one core", "ratio", "all-gathers",
               "all-to-alls", "collective-permutes"]
    headers += ([f"temp per core, {args.target} (TPU compiler)", "one core (TPU)", "ratio (TPU)",
                 "step time split / one core (TPU cost model)"] if args.target else [])
    headers += ["s"]
    print()
    print(format_table(headers, rows))


if __name__ == "__main__":
    main()
