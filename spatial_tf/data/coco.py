"""COCO-format detection data: a reader into fixed-size padded examples, and a writer.

``coco_dataset(annotation_file, image_dir)`` reads a COCO ``instances`` JSON (``images``,
``annotations`` with ``bbox = [x, y, width, height]`` in pixels, ``categories``) and the
images it names (PNG or JPEG) into unbatched examples of static shape::

    image:  float32 [height, width, 3] in [0, 1]
    labels: {"boxes":   float32 [max_boxes, 4], (ymin, xmin, ymax, xmax) in pixels,
             "classes": int32 [max_boxes], 0 .. num_classes - 1, -1 on padding rows}

The annotations are checked when the dataset is made, before any image is decoded.
Policies (all applied on the host, in this order):

- ``iscrowd`` annotations are skipped (COCO's evaluation ignores them too);
- boxes reaching outside the image are clipped to it; boxes with no area left
  (width or height <= 0) are dropped;
- an image with no boxes is kept, its rows all padding;
- an image with more than ``max_boxes`` boxes keeps the ``max_boxes`` largest (by area)
  and a warning says how many images lost boxes;
- class ``k`` is the ``k``-th category id of ``categories`` (default: the file's ids,
  sorted); an annotation of another id is an error;
- images of different sizes need ``resize="fit"`` and ``image_size``: each is scaled,
  keeping its aspect ratio, to fit ``image_size``, and padded with zeros at the bottom
  and right; its boxes are scaled with it.

>>> import os, tempfile
>>> from spatial_tf.data.images import synthetic_detection_dataset
>>> folder = tempfile.mkdtemp()
>>> path = write_coco(folder, synthetic_detection_dataset(64, num_images=2), ["a", "b", "c"])
>>> ds = coco_dataset(path, os.path.join(folder, "images"), max_boxes=16)
>>> image, labels = next(iter(ds))
>>> image.shape.as_list(), labels["boxes"].shape.as_list()
([64, 64, 3], [16, 4])
"""
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union
import json
import numbers
import os
import warnings

import numpy as np
import tensorflow as tf

from spatial_tf.table import plural

__all__ = ["CocoData", "load_coco", "coco_dataset", "write_coco"]

PathLike = Union[str, os.PathLike]


class CocoData(NamedTuple):
    """The checked contents of one annotation file (``load_coco``)."""
    files: List[str]                 # image paths, in the file's ``images`` order
    sizes: np.ndarray                # int [n, 2]: (height, width) from the annotations
    boxes: List[np.ndarray]          # per image float32 [m, 4] (ymin, xmin, ymax, xmax), clipped
    classes: List[np.ndarray]        # per image int32 [m], 0 .. num_classes - 1
    image_ids: List[int]             # the file's image ids
    category_ids: List[int]          # class k is category_ids[k]
    class_names: List[str]           # class k's name


def _number(value):
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and np.isfinite(value)


def load_coco(annotation_file: PathLike, image_dir: PathLike,
              categories: Optional[Sequence[int]] = None) -> CocoData:
    """Read and check a COCO annotation file; boxes clipped, degenerate ones dropped.

    Args:
      annotation_file: the ``instances`` JSON.
      image_dir: the folder the ``file_name`` of each image is relative to.
      categories: the category ids that become classes 0, 1, ...; by default all of the
        file's ``categories``, sorted by id.

    Raises:
      FileNotFoundError: no annotation file, or an image it names is missing.
      ValueError: malformed JSON, a missing key, a bad ``bbox``, an unknown image or
        category id; the message names the file, the entry and the fix.
    """
    path = os.fspath(annotation_file)
    content = _read_json(path)
    names, category_ids = _categories(content, path, categories)
    files, sizes, index = _images(content, path, os.fspath(image_dir))
    boxes, classes = _annotations(content, path, index, sizes, category_ids, categories)
    return CocoData(files, np.asarray(sizes, np.int64).reshape(-1, 2),
                    [np.asarray(b, np.float32).reshape(-1, 4) for b in boxes],
                    [np.asarray(c, np.int32) for c in classes], list(index), category_ids,
                    [names[c] for c in category_ids])


def _read_json(path):
    """The annotation file's content, checked to have COCO's three lists."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such annotation file. Expected a COCO instances "
                                f"JSON there. Fix: check the path (relative paths start at "
                                f"{os.getcwd()}).")
    try:
        with open(path, encoding="utf-8") as f:
            content = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: is not valid JSON ({e}). Expected a COCO instances file. "
                         f"Fix: repair or re-export the file.") from e
    if not isinstance(content, dict):
        raise ValueError(f"{path}: holds a JSON {type(content).__name__}; expected an object "
                         f"with keys 'images', 'annotations' and 'categories'. Fix: re-export "
                         f"it in COCO format.")
    for key in ("images", "annotations", "categories"):
        if not isinstance(content.get(key), list):
            raise ValueError(f"{path}: has no list '{key}'; expected a COCO instances file "
                             f"with 'images', 'annotations' and 'categories'. Fix: add "
                             f"'{key}' (an empty list if there are none) or re-export the file.")
    return content


def _categories(content, path, categories):
    """``({id: name}, the ids that become classes 0, 1, ...)``."""
    file_ids = []
    names = {}
    for i, category in enumerate(content["categories"]):
        if not isinstance(category, dict) or not _int_id(category.get("id")):
            raise ValueError(f"{path}: categories[{i}] is {_short(category)}; expected an "
                             f"object with an int 'id'. Fix: give every category an int id "
                             f"and a name.")
        names[category["id"]] = str(category.get("name", category["id"]))
        file_ids.append(category["id"])
    if categories is None:
        category_ids = sorted(file_ids)
    else:
        category_ids = list(categories)
        missing = [c for c in category_ids if c not in names]
        if missing:
            raise ValueError(f"load_coco: categories lists id {missing[0]}, which {path} does "
                             f"not define (its ids: {sorted(file_ids)}). Fix: pass ids from "
                             f"the file's 'categories'.")

    return names, category_ids


def _images(content, path, image_dir):
    """``(image files, (height, width) each, {image id: position})``."""
    files, sizes, index = [], [], {}
    for i, image in enumerate(content["images"]):
        ok = isinstance(image, dict) and _int_id(image.get("id")) \
            and isinstance(image.get("file_name"), str) \
            and all(_int_id(image.get(k)) and image[k] > 0 for k in ("height", "width"))
        if not ok:
            raise ValueError(f"{path}: images[{i}] is {_short(image)}; expected an object "
                             f"with an int 'id', a 'file_name' and positive int 'height' and "
                             f"'width'. Fix: give every image its id, file name and size.")
        if image["id"] in index:
            raise ValueError(f"{path}: images[{i}] repeats image id {image['id']}; expected "
                             f"unique ids. Fix: give each image its own id.")
        index[image["id"]] = len(files)
        file = os.path.join(image_dir, image["file_name"])
        if not os.path.isfile(file):
            raise FileNotFoundError(f"{file}: no such image (images[{i}] of {path}). Fix: pass "
                                    f"the folder the file names are relative to as image_dir.")
        files.append(file)
        sizes.append((image["height"], image["width"]))
    return files, sizes, index


def _annotations(content, path, index, sizes, category_ids, categories):
    """Per image: its boxes (clipped; degenerate and crowd ones dropped) and classes."""
    to_class = {c: k for k, c in enumerate(category_ids)}
    boxes: List[List[Any]] = [[] for _ in sizes]
    classes: List[List[int]] = [[] for _ in sizes]
    for i, annotation in enumerate(content["annotations"]):
        if not isinstance(annotation, dict):
            raise ValueError(f"{path}: annotations[{i}] is {_short(annotation)}; expected an "
                             f"object. Fix: re-export the file in COCO format.")
        where = f"annotation {annotation.get('id', f'[{i}]')}"
        if annotation.get("image_id") not in index:
            raise ValueError(f"{path}: {where} refers to image_id "
                             f"{annotation.get('image_id')!r}, which is not in 'images'. Fix: "
                             f"add the image to 'images' or remove the annotation.")
        if annotation.get("iscrowd", 0):
            continue
        category = annotation.get("category_id")
        if category not in to_class:
            if categories is None:
                raise ValueError(
                    f"{path}: {where} (image {annotation['image_id']}) has unknown category_id "
                    f"{category!r}: it is not among the file's 'categories' (ids "
                    f"{category_ids}). Fix: add the category to the file's 'categories', or "
                    f"remove the annotation.")
            raise ValueError(
                f"{path}: {where} (image {annotation['image_id']}) has unknown category_id "
                f"{category!r}: it is not among categories={category_ids}. Fix: list the id "
                f"in categories=, or remove the annotation.")
        bbox = annotation.get("bbox")
        if not (isinstance(bbox, (list, tuple)) and len(bbox) == 4
                and all(_number(v) for v in bbox)):
            raise ValueError(f"{path}: {where} has bbox {_short(bbox)}; expected [x, y, width, "
                             f"height], four finite numbers in pixels. Fix: correct or remove "
                             f"the annotation.")
        x, y, w, h = (float(v) for v in bbox)
        j = index[annotation["image_id"]]
        height, width = sizes[j]
        box = (min(max(y, 0.0), height), min(max(x, 0.0), width),
               min(max(y + h, 0.0), height), min(max(x + w, 0.0), width))
        if box[2] > box[0] and box[3] > box[1]:  # degenerate after clipping: dropped
            boxes[j].append(box)
            classes[j].append(to_class[category])
    return boxes, classes


def _int_id(value):
    return not isinstance(value, bool) and isinstance(value, numbers.Integral)


def _short(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _pad(boxes, classes, max_boxes):
    """Largest ``max_boxes`` boxes (by area, ties in file order), padded; and whether cut."""
    cut = len(boxes) > max_boxes
    if cut:
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        keep = np.sort(np.argsort(-area, kind="stable")[:max_boxes])
        boxes, classes = boxes[keep], classes[keep]
    out_boxes = np.zeros((max_boxes, 4), np.float32)
    out_classes = np.full((max_boxes,), -1, np.int32)
    out_boxes[:len(boxes)] = boxes
    out_classes[:len(classes)] = classes
    return out_boxes, out_classes, cut


def coco_dataset(annotation_file: PathLike, image_dir: PathLike, max_boxes: int = 100,
                 image_size: Optional[Sequence[int]] = None, resize: Optional[str] = None,
                 categories: Optional[Sequence[int]] = None) -> tf.data.Dataset:
    """Unbatched ``(image, labels)`` examples of static shape from COCO annotations.

    Args:
      annotation_file, image_dir, categories: as in ``load_coco``.
      max_boxes: rows of ``labels["boxes"]``; more boxes keep the largest (with a warning).
      image_size: ``(height, width)`` of every example; by default the images' own size,
        which must then be the same for all.
      resize: ``None`` (images must already have ``image_size``) or ``"fit"`` (scale each
        image, keeping its aspect ratio, to fit ``image_size``; pad bottom and right).

    Raises:
      ValueError: as ``load_coco``; images of different sizes without ``resize="fit"``
        (naming the first that differs), a bad ``max_boxes``, ``image_size`` or ``resize``.
      An image whose decoded size differs from its annotation stops the pipeline with an
      ``InvalidArgumentError`` naming it.
    """
    image_size = _check_dataset_args(max_boxes, image_size, resize)
    path = os.fspath(annotation_file)
    data = load_coco(path, image_dir, categories)
    if not data.files:
        raise ValueError(f"{path}: lists no images; expected at least one. Fix: check that "
                         f"this is the right annotation file.")
    target, new_sizes = _sizes(data, image_size, resize)
    boxes, classes = _labels(data, new_sizes, max_boxes, path)
    ds = tf.data.Dataset.from_tensor_slices((
        data.files, data.sizes.astype(np.int32), new_sizes, boxes, classes))
    return ds.map(_loader(target, resize), num_parallel_calls=tf.data.AUTOTUNE,
                  deterministic=True)


def _check_dataset_args(max_boxes, image_size, resize):
    """``image_size`` as a tuple (or None), after checking ``coco_dataset``'s options."""
    if isinstance(max_boxes, bool) or not isinstance(max_boxes, numbers.Integral) or max_boxes < 1:
        raise ValueError(f"coco_dataset: max_boxes is {max_boxes!r}; expected an int >= 1.")
    if resize not in (None, "fit"):
        raise ValueError(f"coco_dataset: resize is {resize!r}; expected None or 'fit'.")
    if image_size is not None:
        image_size = tuple(image_size)
        if len(image_size) != 2 or not all(_int_id(s) and s > 0 for s in image_size):
            raise ValueError(f"coco_dataset: image_size is {image_size!r}; expected (height, "
                             f"width), two positive ints.")
    elif resize == "fit":
        raise ValueError("coco_dataset: resize='fit' needs image_size=(height, width), the "
                         "size to fit the images into. Fix: pass image_size.")
    return image_size


def _sizes(data, image_size, resize):
    """``(target (height, width), each image's size once resized)``."""
    target = image_size or tuple(int(s) for s in data.sizes[0])
    if resize is None:
        for file, size in zip(data.files, data.sizes):
            if tuple(size) != target:
                source = "image_size" if image_size else f"the first image's ({data.files[0]})"
                raise ValueError(
                    f"{file}: is {size[0]}x{size[1]} (height x width), {source} is "
                    f"{target[0]}x{target[1]}. Expected one size for the dataset: batches "
                    f"and XLA need static shapes. Fix: pass image_size=(height, width) and "
                    f"resize='fit' (scale keeping the aspect ratio, pad the rest).")
    new_sizes = data.sizes.astype(np.int32)
    if resize == "fit":  # the largest size of the image's aspect ratio inside target
        scale = np.min(np.asarray(target, np.float64) / data.sizes, axis=1, keepdims=True)
        new_sizes = np.minimum(np.maximum(np.floor(data.sizes * scale + 0.5), 1),
                               np.asarray(target)).astype(np.int32)
    return target, new_sizes


def _labels(data, new_sizes, max_boxes, path):
    """Boxes scaled to the new sizes and padded to ``max_boxes`` rows, and classes."""
    # boxes scale per axis as the pixels do: by new size / old size
    scales = np.concatenate([new_sizes / data.sizes] * 2, axis=1).astype(np.float32)
    padded_boxes, padded_classes, cut = [], [], 0
    for boxes, classes, scale in zip(data.boxes, data.classes, scales):
        b, c, was_cut = _pad(boxes * scale, classes, max_boxes)
        padded_boxes.append(b)
        padded_classes.append(c)
        cut += was_cut
    if cut:
        # stacklevel: the user's coco_dataset call
        warnings.warn(f"{path}: {plural(cut, 'image')} {'has' if cut == 1 else 'have'} more "
                      f"than max_boxes={max_boxes} boxes; kept the {max_boxes} largest of "
                      f"each. Pass a larger max_boxes to keep them all.", stacklevel=3)
    return np.stack(padded_boxes), np.stack(padded_classes)


def _loader(target, resize):
    """The map from ``(file, size, new_size, boxes, classes)`` to an example."""
    height, width = target

    @tf.autograph.experimental.do_not_convert  # plain TF ops: tracing as is is faster
    def load(file, size, new_size, boxes, classes):
        raw = tf.io.read_file(file)
        image = tf.io.decode_image(raw, channels=3, expand_animations=False)
        check = tf.debugging.Assert(tf.reduce_all(tf.equal(tf.shape(image)[:2], size)), [
            "coco_dataset: an image's pixel size differs from the height and width in its "
            "annotation. Fix: correct the annotation of", file, "which gives", size,
            "while the image is", tf.shape(image)[:2]])
        with tf.control_dependencies([check]):
            image = tf.identity(image)
        image = tf.image.convert_image_dtype(image, tf.float32)
        if resize == "fit":
            image = tf.image.resize(image, new_size, antialias=True)
            image = tf.image.pad_to_bounding_box(image, 0, 0, height, width)
        image = tf.ensure_shape(tf.clip_by_value(image, 0.0, 1.0), (height, width, 3))
        return image, {"boxes": boxes, "classes": classes}

    return load


def write_coco(directory: PathLike, examples: Iterable[Tuple[Any, Dict[str, Any]]],
               class_names: Sequence[str], annotation_name: str = "instances.json") -> str:
    """Write examples as ``directory/images/000000.png ...`` and a COCO JSON beside them.

    ``examples`` yields ``(image, labels)`` in the detection example format (a
    ``tf.data.Dataset`` or NumPy arrays; image values in [0, 1], stored as 8-bit PNG).
    Class ``k`` becomes category id ``k + 1`` named ``class_names[k]``. Returns the JSON's
    path; read it back with ``coco_dataset(path, os.path.join(directory, "images"))``.
    """
    directory = os.fspath(directory)
    image_dir = os.path.join(directory, "images")
    os.makedirs(image_dir, exist_ok=True)
    images: List[dict] = []
    annotations: List[dict] = []
    for i, (image, labels) in enumerate(examples):
        image = np.asarray(image, np.float32)
        boxes = np.asarray(labels["boxes"], np.float32)
        classes = np.asarray(labels["classes"]).astype(np.int64)
        if image.ndim != 3 or image.shape[-1] not in (1, 3) or boxes.ndim != 2 \
                or boxes.shape[-1] != 4 or classes.shape != boxes.shape[:1]:
            raise ValueError(f"write_coco: example {i} has image {image.shape}, boxes "
                             f"{boxes.shape}, classes {classes.shape}; expected [h, w, 3], "
                             f"[n, 4] and [n].")
        if classes.size and classes.max() >= len(class_names):
            raise ValueError(f"write_coco: example {i} has class {int(classes.max())}; expected "
                             f"classes below len(class_names)={len(class_names)}. Fix: pass a "
                             f"name for every class.")
        name = f"{i:06d}.png"
        pixels = np.round(np.clip(image, 0.0, 1.0) * 255.0).astype(np.uint8)
        tf.io.write_file(os.path.join(image_dir, name), tf.io.encode_png(pixels))
        images.append({"id": i + 1, "file_name": name, "height": image.shape[0],
                       "width": image.shape[1]})
        for box, cls in zip(boxes, classes):
            if cls < 0:
                continue
            y0, x0, y1, x1 = (float(v) for v in box)
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1,
                                "category_id": int(cls) + 1, "bbox": [x0, y0, x1 - x0, y1 - y0],
                                "area": (x1 - x0) * (y1 - y0), "iscrowd": 0})
    content = {"images": images, "annotations": annotations,
               "categories": [{"id": k + 1, "name": str(n)} for k, n in enumerate(class_names)]}
    path = os.path.join(directory, annotation_name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(content, f)
    return path
