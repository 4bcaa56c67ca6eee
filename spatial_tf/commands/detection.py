"""``train`` / ``evaluate`` / ``predict`` for ``retinanet``: detection on large images.

A model dir holds ``model.json`` (``{"model": "retinanet", "image_size", "classes",
"max_boxes", ...}``), ``ckpt-<step>`` checkpoints and ``train/`` summaries, as for the
3D U-Net. ``--data DIR --annotations FILE`` reads COCO-format images and instances JSON
(each image fit to ``--image-size``, aspect kept, padded); without them, synthetic
images of shapes on textured backgrounds are used (training seeds from 0, held-out ones
from 10000). Training augments with flips and scale jitter (static shapes).

>>> default_image_spec(4), default_image_spec(8), default_image_spec(1)
([1, 2, 2, 1], [1, 4, 2, 1], [1, 1, 1, 1])
"""
import math
import os

from spatial_tf.table import plural

__all__ = ["default_image_spec", "check_train_args", "record", "dataset", "build_model",
           "run_train", "run_evaluate", "run_predict", "HELD_OUT_SEED", "MAX_LEVEL"]

HELD_OUT_SEED = 10000
MAX_LEVEL = 5          # pyramid levels P3-P5: the image must divide by 2**5 per split piece
BATCH_NORM_MOMENTUM = 0.9


def default_image_spec(cores):
    """Split height, then width, alternately over ``cores``: ``[1, h, w, 1]``."""
    spec = [1, 1, 1, 1]
    axis = 1
    while math.prod(spec) < cores:
        spec[axis] *= 2
        axis = 3 - axis
    return spec


def check_train_args(parser, args):
    """``train retinanet``'s checks that need several options (exit 2 like argparse)."""
    from spatial_tf.commands.options import (DEFAULT_CORES, check_batch, recorded_cores,
                                             resolve_cores)

    resolve_cores(parser, args, default_image_spec,
                  recorded_cores(args.model_dir) or DEFAULT_CORES)
    shown = ",".join(map(str, args.spec))
    if len(args.spec) != 4 or args.spec[3] != 1:
        parser.error(f"argument --spec: {shown} is not allowed with retinanet; expected 4 "
                     f"split counts (batch, height, width, channels), channels unsplit, e.g. "
                     f"{','.join(map(str, default_image_spec(args.cores)))}")
    check_batch(parser, args)
    multiple = 2 ** MAX_LEVEL * max(args.spec[1:3])
    if args.image_size % multiple:
        parser.error(f"argument --image-size: {args.image_size} is not allowed with --spec "
                     f"{shown}; expected a multiple of {multiple} (the coarsest pyramid level, "
                     f"stride {2 ** MAX_LEVEL}, split {max(args.spec[1:3])} ways), e.g. "
                     f"--image-size {max(multiple, args.image_size - args.image_size % multiple)}")
    check_data_args(parser, args)


def check_data_args(parser, args):
    """``--data`` and ``--annotations`` come together and exist."""
    if (args.data is None) != (args.annotations is None):
        parser.error("argument --annotations: retinanet reads COCO data as --data IMAGE_DIR "
                     "--annotations INSTANCES_JSON; expected both or neither (neither: "
                     "synthetic images)")
    for flag, path in (("--data", args.data), ("--annotations", args.annotations)):
        if path is not None and not os.path.exists(path):
            parser.error(f"argument {flag}: {path} does not exist; expected a COCO images "
                         f"directory (--data) and its instances JSON (--annotations)")


def record(args):
    """What ``model.json`` keeps: enough to rebuild the model and its data, the name of
    each class (COCO's category names, or the synthetic shapes) for pictures, and the
    cores it is trained on (evaluate's and predict's default ``--cores``)."""
    return {"model": "retinanet", "image_size": args.image_size, "classes": args.classes,
            "max_boxes": args.max_boxes, "class_names": _class_names(args),
            "cores": args.cores}


def _class_names(args):
    from spatial_tf import data as stdata

    if args.data is None:
        return list(stdata.DETECTION_CLASSES[:args.classes])
    return list(stdata.load_coco(args.annotations, args.data).class_names)


def class_names(rec, synthetic):
    """The class names ``model.json`` recorded; for a model dir written before they
    were, the synthetic shapes' names on ``synthetic`` images, else None (numbers)."""
    from spatial_tf.data import DETECTION_CLASSES

    if "class_names" in rec:
        return list(rec["class_names"])
    return list(DETECTION_CLASSES[:rec["classes"]]) if synthetic else None


def build_model(rec):
    """The RetinaNet ``rec`` describes (call inside the strategy's scope)."""
    import keras

    from spatial_tf.models import RetinaNetOptions, retinanet

    keras.utils.set_random_seed(rec.get("seed", 0))
    size = rec["image_size"]
    options = RetinaNetOptions(max_level=MAX_LEVEL, batch_norm_momentum=BATCH_NORM_MOMENTUM)
    return retinanet((size, size, 3), num_classes=rec["classes"], options=options)


def dataset(rec, data=None, annotations=None, seed=0, num_images=8):
    """Unbatched ``(image, {"boxes", "classes"})`` examples: COCO or synthetic."""
    from spatial_tf import data as stdata

    size = rec["image_size"]
    if data is None:
        return stdata.synthetic_detection_dataset(size, num_images=num_images, seed=seed,
                                                  num_classes=rec["classes"],
                                                  max_boxes=rec["max_boxes"])
    categories = len(stdata.load_coco(annotations, data).category_ids)
    if categories != rec["classes"]:
        raise ValueError(f"argument --classes: {annotations} has {categories} categories and "
                         f"the model {rec['classes']} classes; expected the same. Fix: "
                         f"--classes {categories}")
    return stdata.coco_dataset(annotations, data, max_boxes=rec["max_boxes"],
                               image_size=(size, size), resize="fit")


def _check_record(prog, model_dir, rec):
    from spatial_tf.commands import volumes

    existing = volumes.read_record(model_dir)
    if existing is not None and "class_names" not in existing:  # written before names were
        rec = {k: v for k, v in rec.items() if k != "class_names"}
    # a run may resume on other cores: the record keeps the first run's
    rec = {k: v for k, v in rec.items() if k != "cores" or existing is None}
    if existing is not None and {k: v for k, v in existing.items() if k != "cores"} != rec:
        diff = ", ".join(f"{k} {existing.get(k)} (asked {rec.get(k)})"
                         for k in sorted((set(rec) | set(existing)) - {"cores"})
                         if existing.get(k) != rec.get(k))
        raise ValueError(f"argument --model-dir: {model_dir} holds another model ({diff}); "
                         f"expected the same model to resume. Fix: use another --model-dir, or "
                         f"the options recorded in {os.path.join(model_dir, volumes.MODEL_FILE)}")
    return existing


def run_train(args):
    """``python -m spatial_tf train retinanet ...``."""
    from spatial_tf import logs
    from spatial_tf.commands import volumes
    from spatial_tf.commands.options import fail
    from spatial_tf.commands.shared import strategy_for, train_until_signal, where

    prog = "python -m spatial_tf train"
    logs.start_tensorflow()
    with logs.quiet():
        import keras

    from spatial_tf import data, detection, train

    try:
        rec = record(args)
        existing = _check_record(prog, args.model_dir, rec)
        examples = dataset(rec, args.data, args.annotations)
        strategy = strategy_for(prog, args, args.cores, args.replicas)
    except (ValueError, OSError) as e:
        return fail(prog, str(e))
    spec = [args.spec, {"boxes": None, "classes": None}]
    with strategy.scope():
        model = build_model(rec)
        optimizer = keras.optimizers.Adam(1e-3)
        optimizer.build(model.trainable_variables)
    try:
        start = train.Checkpointer(args.model_dir, model=model, optimizer=optimizer).restore()
    except (train.CheckpointMismatchError, train.CheckpointUnreadableError) as e:
        return fail(prog, f"argument --model-dir: {e}")
    if existing is None:
        volumes.write_record(args.model_dir, rec)

    def distributed_dataset(done):  # the data position: begins after the `done` steps
        def dataset_fn(context):
            ds = examples.shard(context.num_input_pipelines, context.input_pipeline_id)
            ds = data.augment_dataset(ds.repeat(), seed=0)
            return ds.skip(done * args.batch // context.num_input_pipelines)

        return data.distribute(strategy, dataset_fn, args.batch, spec=spec)

    try:
        distributed_dataset(start)  # the spec is checked against the batches before training
    except ValueError as e:
        return fail(prog, f"argument --spec: {e}")
    step_fn = detection.make_detection_train_step(model, optimizer, spec)
    print(f"{prog}: retinanet {args.image_size}x{args.image_size}, {args.classes} classes on "
          f"{where(strategy)}, spec {spec}, to step {args.steps} in {args.model_dir}", flush=True)
    return train_until_signal(
        args, strategy, model, optimizer, distributed_dataset,
        lambda last: f"loss {last['loss']:.4f} (class {last['class_loss']:.4f}, "
                     f"box {last['box_loss']:.4f})", step_fn=step_fn)


def _detector(prog, args, rec, cores):
    """``(model, predict(images) -> detections dict of NumPy arrays)`` on ``cores``, on the
    ``--device`` of ``args`` (ValueError for ``--device tpu`` without a TPU)."""
    import numpy as np
    import tensorflow as tf

    from spatial_tf import detection
    from spatial_tf.commands.shared import strategy_for

    size = rec["image_size"]
    if cores > 1 or args.device == "tpu":
        strategy = strategy_for(prog, args, cores)
        spec = default_image_spec(cores)
    else:
        strategy, spec = tf.distribute.get_strategy(), None
    with strategy.scope():
        model = build_model(rec)
    step_fn = detection.make_detection_predict_step(model, spec)

    @tf.function
    def outputs(images):
        return strategy.run(step_fn, args=(images,))

    def predict(images):
        raw = outputs(images)
        raw = tf.nest.map_structure(lambda t: strategy.experimental_local_results(t)[0], raw)
        found = detection.postprocess(raw, detection.AnchorConfig(max_level=MAX_LEVEL),
                                      (size, size))
        return {k: np.asarray(v) for k, v in found.items()}

    return model, predict


def run_evaluate(args, rec, latest):
    """``python -m spatial_tf evaluate`` of a retinanet model dir: COCO mAP."""
    from spatial_tf.commands.shared import restore
    from spatial_tf.commands.options import fail
    from spatial_tf.detection import DetectionEvaluator

    prog = "python -m spatial_tf evaluate"
    if args.annotations is None and args.data is not None:
        return fail(prog, "argument --annotations: a retinanet model is evaluated on COCO data "
                          "as --data IMAGE_DIR --annotations INSTANCES_JSON; expected both")
    try:
        held_out = dataset(rec, args.data, args.annotations, seed=HELD_OUT_SEED,
                           num_images=args.volumes)
        model, predict = _detector(prog, args, rec, args.cores)
    except (ValueError, OSError) as e:
        return fail(prog, str(e))
    step = restore(model, latest)
    evaluator = DetectionEvaluator(rec["classes"], class_names=class_names(rec, synthetic=args.data is None))
    count = 0
    for images, labels in held_out.batch(1):
        evaluator.update({k: v.numpy() for k, v in labels.items()}, predict(images))
        count += 1
    result = evaluator.result()
    print(f"{os.path.basename(latest)} (step {step}) on {plural(count, 'held-out image')}, "
          f"{rec['image_size']}x{rec['image_size']}, {plural(args.cores, 'core')}:")
    for key in ("mAP", "mAP@0.5", "mAP@0.75", "recall@0.5"):
        print(f"{key:>10}  {result[key]:.4f}")
    for key in sorted(k for k in result if k.startswith("AP/")):
        print(f"{key:>10}  {result[key]:.4f}")
    return 0


def run_predict(args, rec, latest):
    """``python -m spatial_tf predict`` of a retinanet model dir: boxes drawn on a PNG."""
    import numpy as np

    from spatial_tf.commands.shared import restore
    from spatial_tf.commands.options import fail
    from spatial_tf.data import synthetic_detection_image
    from spatial_tf.detection import draw_detections
    from spatial_tf.commands.outputs import check_file, model_dir_inputs, write_atomically

    prog = "python -m spatial_tf predict"
    size = rec["image_size"]
    png = args.png or os.path.join(args.model_dir, "detections.png")
    try:
        check_file("--png", png, [("--input", args.input)] + model_dir_inputs(args.model_dir),
                   example="detections.png")
    except ValueError as e:
        return fail(prog, str(e))
    if args.input is None:
        image, labels = synthetic_detection_image(size, seed=HELD_OUT_SEED + args.index,
                                                  num_classes=rec["classes"],
                                                  max_boxes=rec["max_boxes"])
    else:
        try:
            image = _read_image(args.input, size)
        except (ValueError, OSError) as e:
            return fail(prog, str(e))
        labels = None
    names = class_names(rec, synthetic=args.input is None)
    try:
        model, predict = _detector(prog, args, rec, 1)
    except ValueError as e:
        return fail(prog, str(e))
    step = restore(model, latest)
    found = predict(image[None].astype(np.float32))
    write_atomically(png, lambda tmp: draw_detections(
        tmp, image, found, class_names=names, score_threshold=args.score_threshold,
        ground_truth=labels))
    n = int(found["num_detections"][0])
    kept = [i for i in range(n) if found["scores"][0, i] >= args.score_threshold]
    print(f"step {step}: {plural(len(kept), 'detection')} scoring >= {args.score_threshold} "
          f"({n} after non-max suppression)")
    for i in kept[:20]:
        y0, x0, y1, x1 = found["boxes"][0, i]
        name = names[found["classes"][0, i]] if names else str(found["classes"][0, i])
        print(f"  {name:>10} {found['scores'][0, i]:.3f}  box y {y0:.0f}-{y1:.0f}, "
              f"x {x0:.0f}-{x1:.0f}")
    print(f"PNG with the boxes: {png}")
    return 0


def _read_image(path, size):
    """A PNG/JPEG as float32 [size, size, 3] in [0, 1], fit to ``size`` (aspect kept)."""
    import numpy as np
    import tensorflow as tf

    if not os.path.isfile(path):
        raise ValueError(f"argument --input: {path} does not exist; expected a PNG or JPEG "
                         f"image for a retinanet model. Fix: check the path")
    try:
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
    except tf.errors.InvalidArgumentError:
        raise ValueError(f"argument --input: {path} is not a PNG, JPEG, GIF or BMP image; "
                         f"expected an image for a retinanet model") from None
    image = tf.image.convert_image_dtype(image, tf.float32)
    return np.asarray(tf.image.resize_with_pad(image, size, size))
