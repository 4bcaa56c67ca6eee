"""Benchmark: per-core memory of the RetinaNet train step on 1, 2, 4, 8 emulated cores.

For each image size and spec family (the order in which the height and width are split
as the core count doubles), the detection train step (``spatial_tf.models.retinanet``
with its defaults: backbone 16-128 filters, P3-P5, 64-filter pyramid and heads; anchor
matching, focal + Huber loss, SGD; batch 1, 8 padded boxes) is compiled by XLA's SPMD
partitioner on the emulator. Printed per core: temp and peak bytes, E(N) = temp(1) /
(N * temp(N)) with temp(1) the unpartitioned program's, collectives by kind (count /
bytes), then every all-gather and all-to-all with its TensorFlow op.

    python benchmarks/detector_scaling.py                    # 512 and 1024
    python benchmarks/detector_scaling.py --sizes 512 --families rows
"""
import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# family name -> the spatial axes (1 = height, 2 = width) doubled at 2, 4, 8 cores
FAMILIES = {"rows": [1, 1, 1], "grid": [1, 2, 1]}
KINDS = ("all-reduce", "all-gather", "all-to-all", "collective-permute", "reduce-scatter")


def spec_at(family, cores):
    """The image spec of ``family`` on ``cores`` (1, 2, 4 or 8).

    >>> spec_at("grid", 8), spec_at("rows", 4)
    ([1, 4, 2, 1], [1, 4, 1, 1])
    """
    spec = [1] * 4
    for axis in FAMILIES[family][: cores.bit_length() - 1]:
        spec[axis] *= 2
    return spec


def _batch(size, rng, tf, count=1):
    boxes, classes = [], []
    for i in range(8):
        h = rng.uniform(0.05, 0.3) * size
        y, x = rng.uniform(0, size - h, size=2)
        boxes.append([y, x, y + h, x + h * rng.uniform(0.5, 2.0)])
        classes.append(i % 3 if i < 6 else -1)
    image = tf.constant(rng.uniform(size=(count, size, size, 3)), tf.float32)
    labels = {"boxes": tf.constant([boxes] * count, tf.float32),
              "classes": tf.constant([classes] * count, tf.int32)}
    return image, labels


def projections(measured, sizes, budget):
    """Rows of predicted peak bytes per core at ``sizes`` from a fit over ``measured``:
    ``{spec label: {edge: peak bytes}}``, fitted as ``a + b * pixels`` (planning.LinearFit);
    with 3+ measured sizes the fit also leaves out the largest and reports its error there.

    >>> rows = projections({"x": {512: 10.0, 1024: 25.0, 2048: 85.0}}, [4096], 1000.0)
    >>> rows[0][:2], round(rows[0][2], 6)
    (['x', 4096], 325.0)
    """
    from spatial_tf.planning import LinearFit

    rows = []
    for label, by_edge in measured.items():
        edges = sorted(by_edge)
        if len(edges) < 2:
            continue
        fit = LinearFit.from_points([e * e for e in edges], [by_edge[e] for e in edges])
        check = ""
        if len(edges) >= 3:
            held = LinearFit.from_points([e * e for e in edges[:-1]], [by_edge[e] for e in edges[:-1]])
            check = f"{100 * held.error(edges[-1] ** 2, by_edge[edges[-1]]):+.1f}% at {edges[-1]}"
        for edge in sizes:
            peak = fit.predict(edge * edge)
            rows.append([label, edge, peak, "yes" if peak <= budget else "no", check])
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="512,1024", help="image edges (default 512,1024)")
    p.add_argument("--families", default="rows,grid", help="spec families (rows, grid)")
    p.add_argument("--cores", default="2,4,8", help="core counts (default 2,4,8)")
    p.add_argument("--batch", type=int, default=1, help="images per replica (default 1)")
    p.add_argument("--project", default="",
                   help="image edges to predict per-core peak bytes at, from a fit over the "
                        "measured sizes (e.g. 1280,2560), against a v3 core's budget")
    args = p.parse_args(argv)

    import keras
    import numpy as np
    import tensorflow as tf

    import spatial_tf
    from spatial_tf.detection import make_detection_train_step
    from spatial_tf.models import retinanet
    from spatial_tf.table import format_bytes, format_table, plural

    rows, gathers, measured = [], [], {}
    for size in [int(s) for s in args.sizes.split(",")]:
        keras.utils.set_random_seed(0)
        model = retinanet((size, size, 3), num_classes=3)
        optimizer = keras.optimizers.SGD(0.01)
        optimizer.build(model.trainable_variables)
        batch = _batch(size, np.random.default_rng(0), tf, args.batch)
        print(f"RetinaNet {size}x{size}, {model.count_params():,} parameters", flush=True)
        temp1, seen = None, set()
        for family in args.families.split(","):
            for cores in [int(c) for c in args.cores.split(",")]:
                spec = spec_at(family, cores)
                if tuple(spec) in seen:   # e.g. [1, 2, 1, 1] begins both families
                    continue
                seen.add(tuple(spec))
                step = make_detection_train_step(model, optimizer,
                                                 [spec, {"boxes": None, "classes": None}])
                started = time.perf_counter()
                report = spatial_tf.Emulator(num_cores_per_replica=cores).report(step, args=(batch,))
                measured.setdefault(",".join(map(str, spec)) + f" ({cores} cores)", {})[size] = \
                    report.partitioned["peak"]
                if temp1 is None:
                    measured.setdefault("unpartitioned (1 core)", {})[size] = \
                        report.unpartitioned["peak"]
                    temp1 = report.unpartitioned["temp"]
                    rows.append([size, "(unpartitioned)", 1, format_bytes(temp1),
                                 format_bytes(report.unpartitioned["peak"]), "1.00", ""])
                kinds = report.by_kind()
                rows.append([size, ",".join(map(str, spec)), cores,
                             format_bytes(report.partitioned["temp"]),
                             format_bytes(report.partitioned["peak"]),
                             f"{temp1 / (cores * report.partitioned['temp']):.2f}",
                             ", ".join(f"{k} {kinds[k]['count']} / {format_bytes(kinds[k]['bytes'])}"
                                       for k in KINDS if k in kinds and kinds[k]["count"])])
                for c in report.collectives:
                    if c.kind in ("all-gather", "all-to-all"):
                        gathers.append([size, ",".join(map(str, spec)), c.kind,
                                        format_bytes(c.bytes), c.shape, c.op_name or "(unnamed)"])
                print(f"  {size} {spec} on {cores} cores: {time.perf_counter() - started:.0f} s; "
                      f"temp {format_bytes(report.partitioned['temp'])}, "
                      f"{plural(len(report.warnings), 'activation-sized gather warning')}", flush=True)
    print()
    print(format_table(["size", "spec", "N", "temp/core", "peak/core", "E(N)",
                        "collectives: count / bytes per core"], rows,
                       right=("N", "temp/core", "peak/core", "E(N)"),
                       title=f"RetinaNet train step, batch {args.batch}, per core, on N emulated cores"))
    print()
    if gathers:
        print(format_table(["size", "spec", "kind", "bytes/core", "shape", "TensorFlow op"],
                           gathers, title="every all-gather and all-to-all"))
    else:
        print("every all-gather and all-to-all: none")
    if args.project:
        from spatial_tf.planning import parse_budget

        budget = parse_budget("v3")
        projected = projections(measured, [int(e) for e in args.project.split(",")], budget.usable)
        print()
        print(format_table(
            ["spec", "size", "peak/core (fit)", "fits a v3 core", "fit error, held out"],
            [[r[0], f"{r[1]}^2", format_bytes(int(r[2])), r[3], r[4]] for r in projected],
            right=("peak/core (fit)",),
            title=f"projected from a fit (a + b * pixels) over the measured sizes, batch "
                  f"{args.batch}; budget: {budget.name}, XLA:CPU figures"))
        print("Cloud TPU's published RetinaNet runs: 1280^2 on v3-8 (8 cores, global batch 64: "
              "one core per replica, batch 8 each); 2560^2 on v3-64 (64 cores, global batch "
              "64: 8 cores per replica, batch 8 each).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
