"""Detection metrics: COCO mAP through ``pycocotools`` (the reference implementation),
and recall at IoU 0.5.

Inputs are batches in the detection formats: ground truth ``{"boxes": [B, N, 4],
"classes": [B, N]}`` (``(ymin, xmin, ymax, xmax)`` pixels, class ``-1`` on padding rows)
and detections ``{"boxes": [B, K, 4], "scores": [B, K], "classes": [B, K],
"num_detections": [B]}`` (the first ``num_detections`` rows of each image count).
``DetectionEvaluator`` collects them batch by batch; ``evaluate_detections`` does it at
once. Needs ``pycocotools`` (``pip install "spatial-tf[detection]"``).

>>> import numpy as np
>>> truth = {"boxes": np.array([[[10., 10., 50., 60.], [0., 0., 0., 0.]]]),
...          "classes": np.array([[2, -1]])}
>>> found = {"boxes": np.array([[[10., 10., 50., 60.]]]), "scores": np.array([[0.9]]),
...          "classes": np.array([[2]]), "num_detections": np.array([1])}
>>> metrics = evaluate_detections(truth, found, num_classes=3)
>>> round(metrics["mAP"], 6), round(metrics["mAP@0.5"], 6), metrics["recall@0.5"]
(1.0, 1.0, 1.0)
"""
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union
import contextlib
import io
import math
import numbers

import numpy as np

__all__ = ["DetectionEvaluator", "evaluate_detections", "recall_at_iou", "box_iou"]

Batch = Mapping[str, Any]


def _pycocotools():
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError as e:
        raise ImportError(
            "COCO mAP needs pycocotools, which is not installed. Fix: pip install "
            "'spatial-tf[detection]' (or pip install pycocotools).") from e
    return COCO, COCOeval


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix ``[n, m]`` of boxes ``a [n, 4]`` and ``b [m, 4]`` (ymin, xmin, ymax, xmax).

    >>> box_iou(np.array([[0., 0., 2., 2.]]), np.array([[1., 0., 3., 2.], [5., 5., 6., 6.]]))
    array([[0.33333333, 0.        ]])
    """
    a = np.asarray(a, np.float64).reshape(-1, 4)
    b = np.asarray(b, np.float64).reshape(-1, 4)
    top = np.maximum(a[:, None, 0], b[None, :, 0])
    left = np.maximum(a[:, None, 1], b[None, :, 1])
    bottom = np.minimum(a[:, None, 2], b[None, :, 2])
    right = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(bottom - top, 0, None) * np.clip(right - left, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def _array(batch, key, where, name):
    if not isinstance(batch, Mapping) or key not in batch:
        keys = sorted(batch) if isinstance(batch, Mapping) else type(batch).__name__
        raise ValueError(f"{where}: {name} has no '{key}' (it has {keys}); expected "
                         f"the detection format, e.g. {{'boxes': [B, N, 4], 'classes': [B, N]}}.")
    value = batch[key]
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def _images(labels, detections, where) -> List[Tuple[Any, Any, Any, Any, Any]]:
    """Per image: (truth boxes, truth classes, det boxes, det scores, det classes)."""
    boxes = _array(labels, "boxes", where, "labels").astype(np.float64)
    classes = _array(labels, "classes", where, "labels").astype(np.int64)
    if boxes.ndim != 3 or boxes.shape[-1] != 4 or classes.shape != boxes.shape[:2]:
        raise ValueError(f"{where}: labels['boxes'] has shape {boxes.shape} and "
                         f"labels['classes'] {classes.shape}; expected [B, N, 4] and [B, N]. "
                         f"Fix: pass batches (a single example needs a leading axis of 1).")
    d_boxes = _array(detections, "boxes", where, "detections").astype(np.float64)
    scores = _array(detections, "scores", where, "detections").astype(np.float64)
    d_classes = _array(detections, "classes", where, "detections").astype(np.int64)
    if d_boxes.ndim != 3 or d_boxes.shape[-1] != 4 or scores.shape != d_boxes.shape[:2] \
            or d_classes.shape != d_boxes.shape[:2]:
        raise ValueError(f"{where}: detections have boxes {d_boxes.shape}, scores "
                         f"{scores.shape}, classes {d_classes.shape}; expected [B, K, 4], "
                         f"[B, K], [B, K].")
    if d_boxes.shape[0] != boxes.shape[0]:
        raise ValueError(f"{where}: labels hold {boxes.shape[0]} images and detections "
                         f"{d_boxes.shape[0]}; expected the detections of the same batch.")
    count = (_array(detections, "num_detections", where, "detections").astype(np.int64)
             if "num_detections" in detections else np.full(boxes.shape[0], d_boxes.shape[1]))
    if count.shape != (boxes.shape[0],):
        raise ValueError(f"{where}: detections['num_detections'] has shape {count.shape}; "
                         f"expected [{boxes.shape[0]}], one count per image.")
    out = []
    for i in range(boxes.shape[0]):
        valid = classes[i] >= 0
        n = int(np.clip(count[i], 0, d_boxes.shape[1]))
        keep = d_classes[i, :n] >= 0
        out.append((boxes[i][valid], classes[i][valid], d_boxes[i, :n][keep],
                    scores[i, :n][keep], d_classes[i, :n][keep]))
    return out


def _matched(truth_boxes, truth_classes, boxes, scores, classes, iou):
    """How many ground-truth boxes a detection of their class finds at ``iou``, matching
    greedily by descending score, each box and detection at most once (as COCO does)."""
    found = np.zeros(len(truth_boxes), bool)
    if not len(truth_boxes) or not len(boxes):
        return 0
    overlaps = box_iou(boxes, truth_boxes)
    overlaps[classes[:, None] != truth_classes[None, :]] = -1.0
    for d in np.argsort(-scores, kind="stable"):
        candidates = np.where(found, -1.0, overlaps[d])
        best = int(np.argmax(candidates))
        if candidates[best] >= iou:
            found[best] = True
    return int(found.sum())


class DetectionEvaluator:
    """Collects ground truth and detections batch by batch; ``result()`` gives the metrics.

    Args:
      num_classes: classes ``0 .. num_classes - 1``.
      class_names: optional names, for the per-class ``AP/<name>`` entries.
      max_detections: detections per image COCO counts (its ``maxDets``, default 100).
      iou: the IoU threshold of ``recall@<iou>``.
    """

    def __init__(self, num_classes: int, class_names: Optional[Sequence[str]] = None,
                 max_detections: int = 100, iou: float = 0.5) -> None:
        if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral) \
                or num_classes < 1:
            raise ValueError(f"DetectionEvaluator: num_classes is {num_classes!r}; expected "
                             f"an int >= 1.")
        if class_names is not None and len(class_names) != num_classes:
            raise ValueError(f"DetectionEvaluator: class_names has {len(class_names)} names "
                             f"for num_classes={num_classes}; expected one name per class.")
        if isinstance(max_detections, bool) or not isinstance(max_detections, numbers.Integral) \
                or max_detections < 1:
            raise ValueError(f"DetectionEvaluator: max_detections is {max_detections!r}; "
                             f"expected an int >= 1.")
        if not (isinstance(iou, numbers.Real) and 0.0 < iou <= 1.0):
            raise ValueError(f"DetectionEvaluator: iou is {iou!r}; expected a number in (0, 1].")
        self.num_classes: int = int(num_classes)
        self.class_names = [str(n) for n in class_names] if class_names is not None \
            else [str(k) for k in range(num_classes)]
        self.max_detections = int(max_detections)
        self.iou: float = float(iou)
        self.reset()

    def reset(self) -> None:
        """Forget everything collected."""
        self._images: List[Tuple[Any, Any, Any, Any, Any]] = []

    def update(self, labels: Batch, detections: Batch) -> None:
        """Add one batch: ground-truth ``labels`` and the model's ``detections``."""
        images = _images(labels, detections, "DetectionEvaluator.update")
        for truth_boxes, truth_classes, _, _, det_classes in images:
            for name, values in (("labels", truth_classes), ("detections", det_classes)):
                if values.size and values.max() >= self.num_classes:
                    raise ValueError(
                        f"DetectionEvaluator.update: {name} hold class {int(values.max())}; "
                        f"expected classes below num_classes={self.num_classes}. Fix: pass "
                        f"the model's class count as num_classes.")
        self._images.extend(images)

    def _coco(self):
        COCO, COCOeval = _pycocotools()
        images = [{"id": i + 1} for i in range(len(self._images))]
        categories = [{"id": k + 1, "name": n} for k, n in enumerate(self.class_names)]
        truth, found = [], []
        for i, (t_boxes, t_classes, d_boxes, d_scores, d_classes) in enumerate(self._images):
            for box, cls in zip(t_boxes, t_classes):
                y0, x0, y1, x1 = box
                truth.append({"id": len(truth) + 1, "image_id": i + 1, "category_id": int(cls) + 1,
                              "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0),
                              "iscrowd": 0})
            for box, score, cls in zip(d_boxes, d_scores, d_classes):
                y0, x0, y1, x1 = box
                found.append({"id": len(found) + 1, "image_id": i + 1,
                              "category_id": int(cls) + 1, "score": float(score),
                              "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0),
                              "iscrowd": 0})
        with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
            ground_truth = COCO()
            ground_truth.dataset = {"images": images, "categories": categories,
                                    "annotations": truth}
            ground_truth.createIndex()
            detections = COCO()
            detections.dataset = {"images": images, "categories": categories,
                                  "annotations": found}
            detections.createIndex()
            evaluation = COCOeval(ground_truth, detections, "bbox")
            evaluation.params.maxDets = [self.max_detections]
            evaluation.evaluate()
            evaluation.accumulate()
        return evaluation

    def result(self) -> Dict[str, float]:
        """The metrics over everything collected, as floats.

        ``mAP`` (COCO's AP averaged over IoU 0.5:0.95), ``mAP@0.5``, ``mAP@0.75``,
        ``mAP_small`` / ``_medium`` / ``_large`` (COCO's area ranges), ``AR@<max>``
        (COCO's average recall), ``recall@<iou>`` (the share of ground-truth boxes that
        a detection of their class overlaps by at least ``iou``, any score), and
        ``AP/<class name>`` per class. A metric without ground truth to measure (e.g.
        no small objects) is NaN.
        """
        if not self._images:
            raise ValueError("DetectionEvaluator.result: no batches were added. Fix: call "
                             "update(labels, detections) for each batch first.")
        stats = self._coco_stats()
        total = sum(len(t[0]) for t in self._images)
        matched = sum(_matched(*image, self.iou) for image in self._images)
        stats[f"recall@{self.iou:g}"] = matched / total if total else math.nan
        return stats

    def _coco_stats(self):
        if not any(len(t[0]) for t in self._images):
            names = ["mAP", "mAP@0.5", "mAP@0.75", "mAP_small", "mAP_medium", "mAP_large",
                     f"AR@{self.max_detections}"]
            return {**{n: math.nan for n in names},
                    **{f"AP/{n}": math.nan for n in self.class_names}}
        evaluation = self._coco()
        # COCOeval.summarize's averages, read from accumulate()'s arrays (summarize itself
        # assumes maxDets=100): precision is [IoU thresholds, recall points, classes,
        # area ranges, max dets], recall [IoU thresholds, classes, area ranges, max dets];
        # -1 marks a class without ground truth
        precision = evaluation.eval["precision"][..., 0]
        recall = evaluation.eval["recall"][..., 0]
        thresholds = evaluation.params.iouThrs
        areas = evaluation.params.areaRngLbl   # all, small, medium, large

        def mean(values):
            values = values[values > -1]
            return float(values.mean()) if values.size else math.nan

        at = {t: int(np.argmin(np.abs(thresholds - t))) for t in (0.5, 0.75)}
        out = {"mAP": mean(precision[:, :, :, 0]), "mAP@0.5": mean(precision[at[0.5], :, :, 0]),
               "mAP@0.75": mean(precision[at[0.75], :, :, 0])}
        for a, name in enumerate(areas[1:], start=1):
            out[f"mAP_{name}"] = mean(precision[:, :, :, a])
        out[f"AR@{self.max_detections}"] = mean(recall[:, :, 0])
        for k, name in enumerate(self.class_names):
            out[f"AP/{name}"] = mean(precision[:, :, k, 0])
        return out


def evaluate_detections(labels: Union[Batch, Iterable[Batch]],
                        detections: Union[Batch, Iterable[Batch]], num_classes: int,
                        class_names: Optional[Sequence[str]] = None,
                        max_detections: int = 100) -> Dict[str, float]:
    """COCO mAP, mAP@0.5 and recall@0.5 of one batch, or of lists of batches (paired).

    See ``DetectionEvaluator.result`` for the entries.
    """
    evaluator = DetectionEvaluator(num_classes, class_names, max_detections)
    if isinstance(labels, Mapping) != isinstance(detections, Mapping):
        raise ValueError("evaluate_detections: labels and detections must both be one batch "
                         "(a dict) or both sequences of batches. Fix: pass them alike.")
    pairs: List[Tuple[Any, Any]] = [(labels, detections)] if isinstance(labels, Mapping) \
        else list(zip(labels, detections))  # type: ignore[arg-type]  # both sequences here
    for truth, found in pairs:
        evaluator.update(truth, found)
    return evaluator.result()


def recall_at_iou(labels: Batch, detections: Batch, iou: float = 0.5) -> float:
    """The share of ground-truth boxes in a batch that a detection of their class overlaps
    by at least ``iou`` (one detection per box, greedily by score); NaN without boxes.

    >>> truth = {"boxes": np.array([[[0., 0., 10., 10.], [20., 20., 30., 30.]]]),
    ...          "classes": np.array([[0, 1]])}
    >>> found = {"boxes": np.array([[[0., 0., 10., 12.]]]), "scores": np.array([[0.5]]),
    ...          "classes": np.array([[0]]), "num_detections": np.array([1])}
    >>> recall_at_iou(truth, found)
    0.5
    """
    images = _images(labels, detections, "recall_at_iou")
    total = sum(len(t[0]) for t in images)
    return sum(_matched(*image, iou) for image in images) / total if total else math.nan
