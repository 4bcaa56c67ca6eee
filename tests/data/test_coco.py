"""COCO reader and writer: round trip, resize policy, box policies, bad annotation files."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from spatial_tf import data
from spatial_tf.data import coco_dataset, load_coco, synthetic_detection_image, write_coco


def _png(path, height, width, value=0):
    pixels = np.full((height, width, 3), value, np.uint8)
    tf.io.write_file(str(path), tf.io.encode_png(pixels))


def _files(tmp_path, images, annotations, categories=({"id": 1, "name": "a"},), sizes=None):
    """A COCO folder: images/<name> PNGs of their annotated size, and instances.json."""
    folder = tmp_path / "images"
    folder.mkdir(exist_ok=True)
    for image in images:
        _png(folder / image["file_name"], image["height"], image["width"])
    path = tmp_path / "instances.json"
    path.write_text(json.dumps({"images": list(images), "annotations": list(annotations),
                                "categories": list(categories)}))
    return path, folder


def _image(i, height=32, width=32):
    return {"id": i, "file_name": f"{i}.png", "height": height, "width": width}


def _box(i, image_id, bbox, category=1, **extra):
    return {"id": i, "image_id": image_id, "category_id": category, "bbox": bbox, **extra}


def test_round_trip_of_synthetic_images(tmp_path):
    examples = [synthetic_detection_image((48, 64), seed=s, num_classes=3, max_boxes=6)
                for s in range(3)]
    path = write_coco(tmp_path, examples, ["rectangle", "ellipse", "triangle"])
    assert path == os.path.join(tmp_path, "instances.json")
    # the file, read as plain JSON: COCO's [x, y, width, height] and ids from 1
    content = json.loads(open(path).read())
    first = examples[0][1]
    row = int(np.argmax(first["classes"] >= 0))
    y0, x0, y1, x1 = first["boxes"][row].tolist()
    annotation = content["annotations"][0]
    assert annotation["bbox"] == [x0, y0, x1 - x0, y1 - y0]
    assert annotation["category_id"] == int(first["classes"][row]) + 1
    assert annotation["area"] == (x1 - x0) * (y1 - y0) and annotation["iscrowd"] == 0
    assert [c["name"] for c in content["categories"]] == ["rectangle", "ellipse", "triangle"]
    assert len(content["annotations"]) == sum(int((e[1]["classes"] >= 0).sum()) for e in examples)
    # read back: the same boxes and classes, the image to 8-bit precision
    ds = coco_dataset(path, tmp_path / "images", max_boxes=6)
    assert ds.element_spec[0].shape.as_list() == [48, 64, 3]
    got = list(ds)
    assert len(got) == 3
    for (image, labels), (want_image, want_labels) in zip(got, examples):
        np.testing.assert_array_equal(labels["boxes"].numpy(), want_labels["boxes"])
        np.testing.assert_array_equal(labels["classes"].numpy(), want_labels["classes"])
        np.testing.assert_allclose(image.numpy(), want_image, atol=0.5 / 255 + 1e-6)
    # pycocotools reads the file too
    from pycocotools.coco import COCO
    import contextlib, io
    with contextlib.redirect_stdout(io.StringIO()):
        reference = COCO(path)
    assert len(reference.getAnnIds()) == len(content["annotations"])
    assert sorted(reference.getCatIds()) == [1, 2, 3]


def test_through_distribute(tmp_path):
    examples = [synthetic_detection_image(32, seed=s, max_boxes=4) for s in range(2)]
    path = write_coco(tmp_path, examples, ["a", "b", "c"])
    spec = [[1, 2, 2, 1], {"boxes": None, "classes": None}]
    dist = data.distribute(tf.distribute.get_strategy(),
                           lambda _: coco_dataset(path, tmp_path / "images", 4).repeat(), 2, spec)
    image, labels = next(iter(dist))
    assert image.shape.as_list() == [2, 32, 32, 3] and labels["boxes"].shape.as_list() == [2, 4, 4]
    np.testing.assert_array_equal(labels["classes"].numpy(),
                                  np.stack([e[1]["classes"] for e in examples]))


def test_clipping_dropping_crowd_and_empty_images(tmp_path):
    path, folder = _files(tmp_path, [_image(1, 24, 40), _image(2, 24, 40)], [
        _box(1, 1, [-5, -4, 20, 10]),          # x -5..15, y -4..6 -> clipped to 0
        _box(2, 1, [25, 20, 20, 30]),          # reaches past the bottom (24) and right (40)
        _box(3, 1, [40, 40, 5, 5]),            # entirely outside: dropped
        _box(4, 1, [10, 10, 0, 5]),            # zero width: dropped
        _box(5, 1, [1, 1, 4, 4], iscrowd=1),   # crowd: skipped
    ])
    (image, labels), (empty, empty_labels) = list(coco_dataset(path, folder, max_boxes=3))
    np.testing.assert_array_equal(labels["boxes"].numpy(),
                                  [[0, 0, 6, 15], [20, 25, 24, 40], [0, 0, 0, 0]])
    np.testing.assert_array_equal(labels["classes"].numpy(), [0, 0, -1])
    np.testing.assert_array_equal(empty_labels["classes"].numpy(), [-1, -1, -1])
    np.testing.assert_array_equal(empty_labels["boxes"].numpy(), np.zeros((3, 4)))


def test_more_boxes_than_max_keeps_the_largest_with_a_warning(tmp_path):
    # areas 10, 30, 20, 40 (and 5 in the second image, which fits)
    path, folder = _files(tmp_path, [_image(1), _image(2)], [
        _box(1, 1, [0, 0, 10, 1]), _box(2, 1, [0, 2, 10, 3]), _box(3, 1, [0, 7, 10, 2]),
        _box(4, 1, [0, 10, 10, 4]), _box(5, 2, [0, 0, 5, 1]),
    ])
    with pytest.warns(UserWarning, match=r"instances\.json: 1 image has more than "
                                         r"max_boxes=2 boxes; kept the 2 largest"):
        ds = coco_dataset(path, folder, max_boxes=2)
    (_, labels), (_, second) = list(ds)
    # the boxes of areas 30 and 40, in file order
    np.testing.assert_array_equal(labels["boxes"].numpy(), [[2, 0, 5, 10], [10, 0, 14, 10]])
    np.testing.assert_array_equal(second["boxes"].numpy(), [[0, 0, 1, 5], [0, 0, 0, 0]])


def test_categories_map_to_classes(tmp_path):
    categories = [{"id": 7, "name": "cat"}, {"id": 3, "name": "dog"}]
    path, folder = _files(tmp_path, [_image(1)], [_box(1, 1, [0, 0, 4, 4], 7),
                                                  _box(2, 1, [8, 8, 4, 4], 3)], categories)
    contents = load_coco(path, folder)
    assert contents.category_ids == [3, 7] and contents.class_names == ["dog", "cat"]
    np.testing.assert_array_equal(contents.classes[0], [1, 0])    # sorted ids by default
    contents = load_coco(path, folder, categories=[7, 3])
    np.testing.assert_array_equal(contents.classes[0], [0, 1])
    assert contents.class_names == ["cat", "dog"] and contents.image_ids == [1]
    with pytest.raises(ValueError, match=r"categories lists id 5, which .*instances\.json does "
                                         r"not define \(its ids: \[3, 7\]\)"):
        load_coco(path, folder, categories=[5])
    with pytest.raises(ValueError, match=r"annotation 2 \(image 1\) has unknown category_id 3: "
                                         r"it is not among categories=\[7\].*Fix: list the id in "
                                         r"categories="):
        load_coco(path, folder, categories=[7])


def test_resize_fit_scales_boxes_and_pads(tmp_path):
    # a 32 x 48 image with a white rectangle, a 64 x 32 one; fitted into 64 x 64
    folder = tmp_path / "images"
    folder.mkdir()
    pixels = np.zeros((32, 48, 3), np.uint8)
    pixels[8:24, 12:36] = 255
    tf.io.write_file(str(folder / "1.png"), tf.io.encode_png(pixels))
    _png(folder / "2.png", 64, 32, value=100)
    path = tmp_path / "instances.json"
    path.write_text(json.dumps({
        "images": [_image(1, 32, 48), _image(2, 64, 32)],
        "annotations": [_box(1, 1, [12, 8, 24, 16]), _box(2, 2, [4, 6, 10, 20])],
        "categories": [{"id": 1, "name": "a"}]}))
    with pytest.raises(ValueError, match=r"2\.png: is 64x32 \(height x width\), the first "
                                         r"image's .*1\.png\) is 32x48.*Fix: pass image_size="
                                         r"\(height, width\) and resize='fit'"):
        coco_dataset(path, folder)
    with pytest.raises(ValueError, match=r"1\.png: is 32x48 \(height x width\), image_size is "
                                         r"64x64"):
        coco_dataset(path, folder, image_size=(64, 64))
    (first, labels), (second, labels2) = list(coco_dataset(path, folder, image_size=(64, 64),
                                                           resize="fit"))
    # 32 x 48 -> 43 x 64 (scale 4/3, 42.67 rounded), then zero rows 43..63
    sy, sx = 43 / 32, 64 / 48
    np.testing.assert_allclose(labels["boxes"].numpy()[0], [8 * sy, 12 * sx, 24 * sy, 36 * sx],
                               rtol=1e-6)
    image = first.numpy()
    assert image.shape == (64, 64, 3)
    assert (image[43:] == 0).all() and image[:43].max() > 0.99
    y0, x0, y1, x1 = labels["boxes"].numpy()[0]
    inner = image[int(np.ceil(y0)) + 1:int(y1) - 1, int(np.ceil(x0)) + 1:int(x1) - 1]
    assert inner.min() > 0.99          # the rectangle is where its box says
    assert image[2:int(y0) - 1, :].max() < 0.01 and image[:42, 2:int(x0) - 1].max() < 0.01
    # 64 x 32 -> 64 x 32 (scale 1), padded on the right; boxes unchanged
    np.testing.assert_allclose(labels2["boxes"].numpy()[0], [6, 4, 26, 14])
    second = second.numpy()
    np.testing.assert_allclose(second[:, :32], 100 / 255, atol=1e-6)
    assert (second[:, 32:] == 0).all()


def test_jpeg_and_a_size_other_than_annotated(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    tf.io.write_file(str(folder / "a.jpg"), tf.io.encode_jpeg(np.zeros((16, 24, 3), np.uint8)))
    _png(folder / "b.png", 20, 24)   # annotated as 16 x 24
    path = tmp_path / "instances.json"
    path.write_text(json.dumps({"images": [{"id": 1, "file_name": "a.jpg", "height": 16,
                                            "width": 24},
                                           {"id": 2, "file_name": "b.png", "height": 16,
                                            "width": 24}],
                                "annotations": [], "categories": []}))
    ds = iter(coco_dataset(path, folder, max_boxes=1))
    assert next(ds)[0].shape.as_list() == [16, 24, 3]
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"(?s)pixel size differs from the height and width in its "
                             r"annotation.*b\.png"):
        next(ds)


BAD = [
    ("{not json", r"instances\.json: is not valid JSON \(Expecting property name"),
    ("[1, 2]", r"instances\.json: holds a JSON list; expected an object with keys 'images'"),
    ({"images": [], "categories": []}, r"instances\.json: has no list 'annotations'.*Fix: add "
                                       r"'annotations' \(an empty list"),
    ({"images": [{"id": 1}], "annotations": [], "categories": []},
     r"images\[0\] is \{'id': 1\}; expected an object with an int 'id', a 'file_name'"),
    ({"images": [_image(1), _image(1)], "annotations": [], "categories": []},
     r"images\[1\] repeats image id 1"),
    ({"images": [_image(1)], "annotations": [], "categories": [{"name": "x"}]},
     r"categories\[0\] is \{'name': 'x'\}; expected an object with an int 'id'"),
    ({"images": [_image(1)], "annotations": [_box(9, 2, [0, 0, 1, 1])],
      "categories": [{"id": 1}]},
     r"annotation 9 refers to image_id 2, which is not in 'images'"),
    ({"images": [_image(1)], "annotations": [_box(9, 1, [0, 0, 1, 1], category=4)],
      "categories": [{"id": 1}, {"id": 2}]},
     r"instances\.json: annotation 9 \(image 1\) has unknown category_id 4: it is not among "
     r"the file's 'categories' \(ids \[1, 2\]\)\. Fix: add the category to the file's"),
    ({"images": [_image(1)], "annotations": [_box(9, 1, [0, 0, 1])], "categories": [{"id": 1}]},
     r"annotation 9 has bbox \[0, 0, 1\]; expected \[x, y, width, height\]"),
    ({"images": [_image(1)], "annotations": ["x"], "categories": [{"id": 1}]},
     r"annotations\[0\] is 'x'; expected an object"),
    ({"images": [], "annotations": [], "categories": []}, r"instances\.json: lists no images"),
]


@pytest.mark.parametrize("content, message", BAD, ids=[m[:30] for _, m in BAD])
def test_bad_annotation_files(tmp_path, content, message):
    (tmp_path / "images").mkdir()
    _png(tmp_path / "images" / "1.png", 32, 32)
    path = tmp_path / "instances.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(ValueError, match=message):
        coco_dataset(path, tmp_path / "images")
    assert sorted(os.listdir(tmp_path)) == before


def test_missing_files_and_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"none\.json: no such annotation file"):
        coco_dataset(tmp_path / "none.json", tmp_path)
    path, folder = _files(tmp_path, [_image(1)], [])
    os.remove(folder / "1.png")
    with pytest.raises(FileNotFoundError, match=r"1\.png: no such image \(images\[0\] of .*"
                                                r"Fix: pass the folder"):
        coco_dataset(path, folder)
    with pytest.raises(ValueError, match=r"max_boxes is 0; expected an int >= 1"):
        coco_dataset(path, folder, max_boxes=0)
    with pytest.raises(ValueError, match=r"resize is 'crop'; expected None or 'fit'"):
        coco_dataset(path, folder, resize="crop")
    with pytest.raises(ValueError, match=r"resize='fit' needs image_size"):
        coco_dataset(path, folder, resize="fit")
    with pytest.raises(ValueError, match=r"image_size is \(64,\); expected \(height, width\)"):
        coco_dataset(path, folder, image_size=(64,))
    with pytest.raises(ValueError, match=r"example 0 has class 3; expected classes below "
                                         r"len\(class_names\)=2"):
        write_coco(tmp_path / "out", [(np.zeros((8, 8, 3)), {"boxes": np.ones((1, 4)),
                                                             "classes": np.array([3])})],
                   ["a", "b"])
    with pytest.raises(ValueError, match=r"example 0 has image \(8, 8\), boxes \(1, 4\), "
                                         r"classes \(1,\); expected \[h, w, 3\]"):
        write_coco(tmp_path / "out", [(np.zeros((8, 8)), {"boxes": np.ones((1, 4)),
                                                          "classes": np.array([0])})], ["a"])
