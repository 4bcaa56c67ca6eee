"""Benchmark: Model Garden's RetinaNet train step split over 4 emulated cores.

The experiment ``retinanet_resnetfpn_coco`` (tf-models-official 2.20: ResNet-50, FPN
P3-P7, 9 anchors, tf_keras), 8 classes, batch 2, built by its own task. Two measurements,
both XLA:CPU figures from the emulator, not TPU measurements:

- By image size (the default; ``--target v5e`` adds the same from XLA's TPU compiler,
  libtpu compile-only): the model made partition-friendly with
  ``spatial_tf.layers.partition_friendly``; the train step is the model with a squared
  loss over every head output, gradients kept whole like the weights, and SGD. Per image
  size and spec: XLA:CPU's temp bytes per core of the partitioned step (4 cores) and of
  the same step on one core, their ratio, and the same ratio for the activations alone:
  from each figure the temp of the step at 64 x 64 is subtracted, where the weight-sized
  buffers (gradients, kernels copied into the layout the backward convolutions read) are
  nearly everything.
- ``--trainer``: the step Model Garden's own trainer runs (``train_lib.run_experiment``,
  orbit; the task's TFRecord input reader on synthetic examples written here, its focal
  and Huber losses, SGD with momentum), under ``spatial_tf.Emulator(4)`` in place of
  ``TPUStrategy``, with the image split by ``train_input_partition_dims`` as Model
  Garden's segmentation task splits its features (RetinaNet's task has no such field:
  ``spatial_retinanet_task`` adds it). As the task builds the model, after
  ``partition_friendly(trainer.model)`` and after ``partition_friendly(trainer.model,
  optimizer=trainer.optimizer)`` (the gradients kept whole): temp per core against the
  same step compiled for one core, and the gathers (all-gather, all-to-all) of the step sorted by where they
  come from. tests/integration/test_model_garden_retinanet.py runs the same job.

    python benchmarks/model_garden_retinanet.py [--sizes 128,256,512] [--specs 1,2,2,1]
        [--target v5e] [--no-halo]
    python benchmarks/model_garden_retinanet.py --trainer [--size 256] [--steps 2]

It needs Model Garden: run it in the environment of ``tests/integration``
(``pip install -e ".[model-garden]"``).
"""
import argparse
import dataclasses
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
_HERE = os.path.dirname(os.path.abspath(__file__))
# the repository (for spatial_tf from a checkout) and benchmarks/ (for _tpu_cells,
# also when a test loads this file by path)
sys.path[:0] = [os.path.join(_HERE, ".."), _HERE]

from _tpu_cells import split_and_one_core  # noqa: E402

CORES = 4
FLOOR_SIZE = 64
EXPERIMENT = "retinanet_resnetfpn_coco"
CLASSES = 8
BATCH = 2
TRAINER_DIMS = [1, 2, 2, 1]
# the loss flattens every level's head outputs and targets, [B, h, w, A * k] ->
# [B, h * w * A, k], and concatenates the levels (loss_utils.multi_level_flatten)
LOSS_OPS = re.compile(r"(gradient_tape/)?(Reshape|concat)(_\d+)?")


def temps(size, spec, target=None, halo=True):
    """``(temp per core on CORES cores, temp on one core)`` of the step at ``size`` from
    XLA:CPU, followed by the same two from XLA's TPU compiler for ``target`` if given
    (None where the compiler found the step does not fit) and the two predicted step
    times in seconds (the TPU compiler's cost model). ``halo``: partition_friendly's."""
    import tensorflow as tf
    import tf_keras
    from official.core import exp_factory, task_factory
    from official.vision import registry_imports  # noqa: F401

    import spatial_tf

    params = exp_factory.get_exp_config(EXPERIMENT)
    params.task.model.input_size = [size, size, 3]
    params.task.model.num_classes = CLASSES
    emulator = spatial_tf.Emulator(CORES)
    with emulator.scope():
        tf_keras.utils.set_random_seed(0)
        model = task_factory.get_task(params.task).build_model()
        spatial_tf.layers.partition_friendly(model, halo=halo)
        optimizer = tf_keras.optimizers.SGD(0.01)

    def step(image):
        image = spatial_tf.split(image, spec)
        with tf.GradientTape() as tape:
            out = model(image, training=True)
            loss = tf.add_n([tf.reduce_mean(tf.square(v))
                             for key in ("cls_outputs", "box_outputs")
                             for v in out[key].values()])
        grads = tape.gradient(loss, model.trainable_variables)
        grads = spatial_tf.split(grads, [None] * len(grads))
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    args = (tf.TensorSpec([BATCH, size, size, 3]),)
    compiled = emulator.compile(step, args)
    figures = [compiled.memory()["temp"], compiled.memory(partitioned=False)["temp"]]
    if target:
        on_tpu = emulator.compile(step, args, target=target)
        figures += [(on_tpu.memory(partitioned=p) or {}).get("temp") for p in (True, False)]
        figures += [_seconds(on_tpu, p) for p in (True, False)]
    return figures


def _seconds(on_tpu, partitioned):
    """The TPU cost model's predicted step time in seconds; None where there is none."""
    from spatial_tf.emulator.tpu import NoStepTime

    try:
        return on_tpu.step_time(partitioned).seconds
    except NoStepTime:
        return None


# ------------------------------------------------------------ Model Garden's trainer

_SPATIAL_TASK = []


def spatial_retinanet_task():
    """``(config class, task class)``: RetinaNet's task with ``train_input_partition_dims``
    and ``eval_input_partition_dims``, applied to the features as Model Garden's
    segmentation tasks apply them; registered with Model Garden's task factory once."""
    if _SPATIAL_TASK:
        return _SPATIAL_TASK[0]
    from typing import List

    from official.core import task_factory
    from official.vision.configs import retinanet as retinanet_config
    from official.vision.tasks import retinanet as retinanet_task

    @dataclasses.dataclass
    class SpatialRetinaNetTaskConfig(retinanet_config.RetinaNetTask):
        train_input_partition_dims: List[int] = dataclasses.field(default_factory=list)
        eval_input_partition_dims: List[int] = dataclasses.field(default_factory=list)

    @task_factory.register_task_cls(SpatialRetinaNetTaskConfig)
    class SpatialRetinaNetTask(retinanet_task.RetinaNetTask):
        """Model Garden's RetinaNet task; the features split over the logical devices
        (official/vision/tasks/semantic_segmentation.py's train and validation steps)."""

        def train_step(self, inputs, model, optimizer, metrics=None):
            inputs = _split_features(inputs, self.task_config.train_input_partition_dims)
            return super().train_step(inputs, model, optimizer, metrics)

        def validation_step(self, inputs, model, metrics=None):
            inputs = _split_features(inputs, self.task_config.eval_input_partition_dims)
            return super().validation_step(inputs, model, metrics)

    _SPATIAL_TASK.append((SpatialRetinaNetTaskConfig, SpatialRetinaNetTask))
    return _SPATIAL_TASK[0]


def _split_features(inputs, input_partition_dims):
    """``(features, labels)`` with the features split over the logical devices by
    ``input_partition_dims`` (none given: unchanged), as Model Garden's segmentation task
    does in its train and validation steps."""
    import tensorflow as tf

    features, labels = inputs
    if input_partition_dims:
        features = tf.distribute.get_strategy().experimental_split_to_logical_devices(
            features, input_partition_dims)
    return features, labels


def write_examples(path, count, size, seed=0, boxes=3):
    """``count`` tf.Examples as the task's decoder reads them (PNG image, normalized
    boxes, class ids 1..CLASSES-1), each with ``boxes`` filled rectangles on noise."""
    import numpy as np
    import tensorflow as tf

    def floats(v):
        return tf.train.Feature(float_list=tf.train.FloatList(value=v))

    def ints(v):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=v))

    def strings(v):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=v))

    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(path) as writer:
        for index in range(count):
            image = rng.integers(0, 60, (size, size, 3), dtype=np.uint8)
            corners, classes = [], []
            for _ in range(boxes):
                h, w = rng.integers(size // 8, size // 2, 2)
                y, x = rng.integers(0, size - h), rng.integers(0, size - w)
                label = int(rng.integers(1, CLASSES))
                image[y:y + h, x:x + w] = 60 + 25 * label
                corners.append((y / size, x / size, (y + h) / size, (x + w) / size))
                classes.append(label)
            ymin, xmin, ymax, xmax = (list(c) for c in zip(*corners))
            feature = {
                "image/encoded": strings([tf.io.encode_png(image).numpy()]),
                "image/source_id": strings([str(index + 1).encode()]),
                "image/height": ints([size]), "image/width": ints([size]),
                "image/object/bbox/ymin": floats(ymin), "image/object/bbox/xmin": floats(xmin),
                "image/object/bbox/ymax": floats(ymax), "image/object/bbox/xmax": floats(xmax),
                "image/object/class/label": ints(classes),
                "image/object/is_crowd": ints([0] * boxes),
                "image/object/area": floats([(b - t) * (r - l) * size * size for t, l, b, r
                                             in corners]),
            }
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())


def trainer_params(input_path, size, steps, dims, learning_rate=0.001):
    """``retinanet_resnetfpn_coco`` for a small train-only job: CLASSES classes, ``size``
    squared images, batch BATCH from ``input_path`` (no augmentation, float32), SGD with
    the experiment's momentum at a constant ``learning_rate``, no pretrained checkpoint
    (it is on Cloud Storage) and no COCO evaluation; a summary and a loop every step;
    ``dims`` as the train and eval partition dims."""
    from official.core import exp_factory

    config_class, _ = spatial_retinanet_task()
    params = exp_factory.get_exp_config(EXPERIMENT)
    params.task = config_class(params.task.as_dict())
    data = {"input_path": input_path, "global_batch_size": BATCH, "dtype": "float32"}
    params.override({
        "runtime": {"mixed_precision_dtype": "float32"},
        "task": {
            "init_checkpoint": None, "annotation_file": None, "use_coco_metrics": False,
            "model": {"num_classes": CLASSES, "input_size": [size, size, 3]},
            "train_data": dict(data, shuffle_buffer_size=BATCH, seed=1, parser={
                "aug_rand_hflip": False, "aug_scale_min": 1.0, "aug_scale_max": 1.0}),
            "validation_data": data,
            "train_input_partition_dims": list(dims),
            "eval_input_partition_dims": list(dims),
        },
        "trainer": {
            "train_steps": steps, "steps_per_loop": 1, "summary_interval": 1,
            "checkpoint_interval": steps, "validation_interval": steps,
            "optimizer_config": {
                "learning_rate": {"type": "constant",
                                  "constant": {"learning_rate": learning_rate}},
                "warmup": {"type": None},
            },
        },
    }, is_strict=True)
    params.validate()
    params.lock()
    return params


def build_trainer(strategy, params, model_dir, friendly=True, whole_gradients=False, seed=0):
    """Model Garden's task and trainer, built in ``strategy.scope()`` as ``run_experiment``
    builds them (the weights drawn from ``seed``); ``partition_friendly`` applied to the
    trainer's model if ``friendly``, and to its optimizer too (the gradients kept whole)
    if ``whole_gradients``. Returns ``(task, trainer, changes)``."""
    import tf_keras
    from official.core import task_factory, train_utils

    from spatial_tf.layers import partition_friendly

    tf_keras.utils.set_random_seed(seed)
    with strategy.scope():
        task = task_factory.get_task(params.task, logging_dir=model_dir)
        trainer = train_utils.create_trainer(params, task, train=True, evaluate=False)
    optimizer = trainer.optimizer if whole_gradients else None
    changes = partition_friendly(trainer.model, optimizer=optimizer) if friendly else []
    return task, trainer, changes


def run_trainer(strategy, params, model_dir, friendly=True, whole_gradients=False):
    """Train with Model Garden's ``run_experiment`` (mode ``train``) on ``strategy``.
    Returns ``(trainer, changes)``."""
    from official.core import train_lib

    task, trainer, changes = build_trainer(strategy, params, model_dir, friendly,
                                           whole_gradients)
    train_lib.run_experiment(distribution_strategy=strategy, task=task, mode="train",
                             params=params, model_dir=model_dir, trainer=trainer)
    return trainer, changes


def training_losses(model_dir, tag="training_loss"):
    """``{step: value}`` of a scalar the trainer wrote to ``model_dir/train``."""
    import tensorflow as tf

    found = {}
    for path in glob.glob(os.path.join(model_dir, "train", "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    found[event.step] = float(tf.make_ndarray(value.tensor))
    return dict(sorted(found.items()))


def train_step(emulator):
    """The ``CompiledStep`` of the trainer's train step (Model Garden names it step_fn)."""
    steps = [s for s in emulator.compiled_steps if s.traced.name == "step_fn"]
    if len(steps) != 1:
        raise AssertionError(f"expected one compiled step_fn, got "
                             f"{[s.traced.name for s in emulator.compiled_steps]}")
    return steps[0]


def activation_threshold(size, cores=CORES):
    """The size from which a gathered tensor counts as activation-sized: an eighth of a
    core's piece of the split image: ``Emulator.report``'s rule (an eighth of the smallest
    split argument) applied to the image alone."""
    return BATCH * size * size * 3 * 4 // cores // 8


def is_kernel_piece(shape, kernel, cores=CORES):
    """Whether a gathered ``shape`` is ``kernel`` (or a part of it) tiled along its window
    axes, as ``Emulator.report`` tells them apart (``spatial_tf.emulator.diagnose.remedies``)."""
    from spatial_tf.emulator.diagnose.remedies import is_kernel_piece as library_rule

    return len(kernel) >= 3 and library_rule(shape, kernel, cores)


def sort_gathers(compiled, model, size):
    """The all-gathers and all-to-alls of ``compiled`` by where they come from:
    ``kernel`` (a weight or weight gradient tiled along its window axes), ``small``
    (under ``activation_threshold``), ``loss`` (the loss's flattening of the head
    outputs and targets), ``backbone_fpn`` (an op in the backbone's or FPN's scope) and
    ``other`` (activation-sized elsewhere, or in an op without a layer scope)."""
    from spatial_tf.emulator.xla.hlo_text import dims

    kernels = [v.shape.as_list() for v in model.trainable_variables if v.shape.rank == 4]
    scopes = tuple(f"/{layer.name}/" for layer in (model.backbone, model.decoder))
    threshold = activation_threshold(size, compiled.program.num_partitions)
    found = {k: [] for k in ("kernel", "small", "loss", "backbone_fpn", "other")}
    for c in compiled.gathers():
        if any(is_kernel_piece(dims(c.shape), k, compiled.program.num_partitions)
               for k in kernels):
            found["kernel"].append(c)
        elif c.bytes < threshold:
            found["small"].append(c)
        elif LOSS_OPS.fullmatch(c.op_name):
            found["loss"].append(c)
        elif any(scope in f"/{c.op_name}" for scope in scopes):
            found["backbone_fpn"].append(c)
        else:
            found["other"].append(c)
    return found


TRAINER_FORMS = {
    "built": "as built",
    "friendly": "partition_friendly",
    "whole": "partition_friendly, optimizer= too",
}


def trainer_measure(size, steps, form):
    """One ``--trainer`` row, as a dict (run in a process of its own)."""
    import time

    import spatial_tf

    with tempfile.TemporaryDirectory(prefix="mg_retinanet_") as root:  # checkpoints: 0.5 GB
        write_examples(os.path.join(root, "train.tfrecord"), BATCH, size)
        params = trainer_params(os.path.join(root, "train.tfrecord"), size, steps,
                                TRAINER_DIMS)
        emulator = spatial_tf.Emulator(CORES)
        start = time.perf_counter()
        trainer, changes = run_trainer(emulator, params, os.path.join(root, "model"),
                                       friendly=form != "built",
                                       whole_gradients=form == "whole")
        train_seconds = time.perf_counter() - start
        losses = list(training_losses(os.path.join(root, "model")).values())
    compiled = train_step(emulator)
    found = sort_gathers(compiled, trainer.model, size)
    start = time.perf_counter()
    report = compiled.report()  # compiles the step for one core too
    unpartitioned_seconds = time.perf_counter() - start
    kinds = report.by_kind()
    return {
        "changed": len(spatial_tf.layers.changed_layers(changes)),
        "temp": report.partitioned["temp"], "temp1": report.unpartitioned["temp"],
        "gathers": {k: kinds.get(k, {}).get("count", 0) for k in ("all-gather", "all-to-all")},
        "sorted": {k: [len(v), sum(c.bytes for c in v)] for k, v in found.items()},
        "backbone_fpn_ops": sorted({c.op_name for c in found["backbone_fpn"]}),
        "small_ops": sorted({c.op_name for c in found["small"]
                             if not LOSS_OPS.fullmatch(c.op_name)}),
        "losses": losses,
        "report_threshold": report.gather_threshold_bytes,
        "report_warnings": len(report.warnings),
        "seconds": {"trace": compiled.trace_seconds, "compile": compiled.compile_seconds,
                    "train": train_seconds, "compile_unpartitioned": unpartitioned_seconds},
    }


def _count(pair):
    from spatial_tf.table import format_bytes

    return f"{pair[0]} / {format_bytes(pair[1])}" if pair[0] else "0"


def trainer_table(size, steps):
    from spatial_tf.table import format_bytes, format_table

    rows, notes = [], []
    for form, label in TRAINER_FORMS.items():
        done = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--trainer-one",
             f"{size};{steps};{form}"], stdout=subprocess.PIPE, text=True)
        if done.returncode:
            raise SystemExit(f"--trainer, {label}: failed ({done.returncode})")
        r = json.loads(done.stdout.strip().splitlines()[-1])
        s = r["sorted"]
        rows.append([label, format_bytes(r["temp1"]), format_bytes(r["temp"]),
                     f"{r['temp'] / r['temp1']:.2f}", r["gathers"]["all-gather"],
                     r["gathers"]["all-to-all"], _count(s["backbone_fpn"]),
                     _count(s["other"]), _count(s["loss"]), _count(s["kernel"]),
                     _count(s["small"]), " -> ".join(f"{x:.3f}" for x in r["losses"])])
        secs = r["seconds"]
        threshold = r["report_threshold"]
        notes.append(
            f"{label}: {r['changed']} layers changed; trace {secs['trace']:.0f} s, compile "
            f"{secs['compile']:.0f} s, run_experiment {secs['train']:.0f} s, one-core compile "
            f"{secs['compile_unpartitioned']:.0f} s; activation-sized gathers in the "
            f"backbone/FPN at {r['backbone_fpn_ops'] or 'none'}; small ones outside the loss "
            f"at {r['small_ops'] or 'none'}; Emulator.report: {r['report_warnings']} gather "
            f"warnings from {format_bytes(threshold) if threshold else 'no threshold'}")
        print(f"  {label}: done", file=sys.stderr, flush=True)
    print(format_table(
        ["model", "temp, 1 core", f"temp/core, {CORES} cores", "ratio", "all-gathers",
         "all-to-alls", "backbone/FPN", "other", "loss", "kernel pieces", "small",
         "training loss"], rows,
        right=("temp, 1 core", f"temp/core, {CORES} cores", "ratio"),
        title=f"Model Garden's trainer: {EXPERIMENT}, {size}x{size}, batch {BATCH}, "
              f"train_input_partition_dims {TRAINER_DIMS}, {CORES} emulated cores; gathers "
              f"as count / bytes per core, activation-sized from "
              f"{format_bytes(activation_threshold(size))}"))
    print("\n".join(notes))


def _ratio_cells(figures, floor=None):
    """Table cells of ``figures`` (``temps``' list: per core and one core, for XLA:CPU and
    then the TPU compiler): one core, per core, their ratio and the activations' ratio
    (``floor``'s figures subtracted; "-" without a floor or where the TPU compiler found
    no fit)."""
    from spatial_tf.table import format_bytes

    cells = []
    for i in range(0, len(figures), 2):
        split, whole = figures[i:i + 2]
        floor_split, floor_whole = floor[i:i + 2] if floor else (None, None)
        if split is None or whole is None:
            cells += [format_bytes(whole) if whole else "-",
                      format_bytes(split) if split else "-", "-", "-"]
            continue
        activations = ("-" if floor_split is None or floor_whole is None
                       else f"{(split - floor_split) / (whole - floor_whole):.2f}")
        cells += [format_bytes(whole), format_bytes(split), f"{split / whole:.2f}", activations]
    return cells


def _step_time_cells(seconds):
    """The predicted step times, split / one core, as one cell (none without a target).

    >>> _step_time_cells([0.026, 0.104]), _step_time_cells([None, 0.104]), _step_time_cells([])
    (['26.0 ms / 0.104 s'], ['- / 0.104 s'], [])
    """
    return [split_and_one_core(*seconds)] if seconds else []


def size_table(args):
    """The by-size table: XLA:CPU's figures, and the TPU compiler's for ``--target``."""
    from spatial_tf.table import format_table

    def measure(size, spec):
        # a process per compile: the programs of one do not pile up in the next's memory
        one = f"{size};{spec}" + (f";{args.target}" if args.target else "")
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", one]
                              + (["--no-halo"] if args.no_halo else []),
                              stdout=subprocess.PIPE, text=True)
        if done.returncode:
            raise SystemExit(f"size {size}, spec {spec}: the compile failed ({done.returncode})")
        return json.loads(done.stdout.strip().splitlines()[-1])

    rows = []
    for spec in args.specs.split(";"):
        floor = measure(FLOOR_SIZE, spec)
        for size in [int(s) for s in args.sizes.split(",")]:
            figures = measure(size, spec)
            rows.append([f"{size}x{size}", f"[{spec}]"] + _ratio_cells(figures[:4], floor)
                        + _step_time_cells(figures[4:]))
            print(f"  {size}, [{spec}]: done", file=sys.stderr, flush=True)
        rows.append([f"{FLOOR_SIZE}x{FLOOR_SIZE} (floor)", f"[{spec}]"]
                    + _ratio_cells(floor[:4]) + _step_time_cells(floor[4:]))
    headers = ["temp, 1 core", f"temp/core, {CORES} cores", "ratio", "activations ratio"]
    if args.target:
        headers += [f"{h}, {args.target}" for h in headers] + [
            f"step time split / one core, {args.target} (cost model)"]
    print(format_table(
        ["image", "spec"] + headers, rows, right=headers,
        title=f"Model Garden RetinaNet (ResNet-50 FPN) train step, batch {BATCH}, {CORES} "
              f"emulated cores, after partition_friendly"
              f"{'(halo=False)' if args.no_halo else ''}; XLA:CPU figures"
              + (f", then XLA's TPU compiler for {args.target} (libtpu, compile-only)"
                 if args.target else "")))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="128,256,512", help="image edges (default 128,256,512)")
    p.add_argument("--specs", default="1,2,2,1", help="specs, ';'-separated (default 1,2,2,1)")
    p.add_argument("--target", help="also compile with XLA's TPU compiler for this TPU "
                                    "generation, e.g. v5e (needs libtpu)")
    p.add_argument("--no-halo", action="store_true",
                   help="partition_friendly(model, halo=False): stride-1 convolutions only "
                        "ordered, TensorFlow's kernel gradient kept")
    p.add_argument("--trainer", action="store_true",
                   help="measure the step Model Garden's trainer runs (as built, after "
                        "partition_friendly, and with the gradients kept whole) instead")
    p.add_argument("--size", type=int, default=256, help="--trainer's image edge (256)")
    p.add_argument("--steps", type=int, default=2, help="--trainer's train steps (2)")
    p.add_argument("--one", help=argparse.SUPPRESS)  # SIZE;SPEC[;TARGET]: one compile, as JSON
    p.add_argument("--trainer-one", help=argparse.SUPPRESS)  # SIZE;STEPS;FORM
    args = p.parse_args(argv)
    if args.one:
        size, spec, *target = args.one.split(";")
        print(json.dumps(temps(int(size), [int(c) for c in spec.split(",")], *target,
                               halo=not args.no_halo)))
        return 0
    if args.trainer_one:
        size, steps, form = args.trainer_one.split(";")
        print(json.dumps(trainer_measure(int(size), int(steps), form)))
        return 0
    if args.trainer:
        trainer_table(args.size, args.steps)
        return 0
    size_table(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
