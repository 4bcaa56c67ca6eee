"""From the heads' per-level outputs to boxes: decode, then non-maximum suppression.

Runs **after** the partitioned step, unpartitioned (on the host, or on one core): it
flattens the levels into ``[B, anchors, ...]`` and NMS compares boxes across the whole
image, which would gather every split anyway. Its input is small next to the step's
activations (the head outputs only).

>>> import keras, tensorflow as tf
>>> from spatial_tf.detection import AnchorConfig
>>> from spatial_tf.models import RetinaNetOptions, retinanet
>>> options = RetinaNetOptions(backbone_filters=(16, 16, 16, 16), fpn_filters=8)
>>> model = retinanet((64, 64, 3), num_classes=2, options=options)
>>> detections = postprocess(model(tf.zeros([1, 64, 64, 3])), AnchorConfig(), (64, 64),
...                          max_detections=5)
>>> {k: tuple(v.shape) for k, v in detections.items()}
{'boxes': (1, 5, 4), 'scores': (1, 5), 'classes': (1, 5), 'num_detections': (1,)}
"""
from typing import Dict, Sequence, Tuple

import tensorflow as tf

from spatial_tf.detection import boxes as box_ops
from spatial_tf.detection.anchors import AnchorConfig
from spatial_tf.detection.losses import per_anchor

__all__ = ["postprocess", "decode_outputs"]


def decode_outputs(outputs: Dict[str, Sequence[tf.Tensor]], anchors: AnchorConfig,
                   image_size: Sequence[int]) -> Tuple[tf.Tensor, tf.Tensor]:
    """``(boxes [B, N, 4] pixels, scores [B, N, C])`` over all N anchors of all levels."""
    all_boxes, all_scores = [], []
    grids = anchors.grids(image_size)
    for logits, deltas, grid in zip(outputs["class_logits"], outputs["box_deltas"], grids):
        a = grid.shape[2]
        deltas = tf.cast(per_anchor(deltas, a), tf.float32)
        decoded = box_ops.decode(deltas, grid[None])                        # [B, h, w, A, 4]
        scores = tf.sigmoid(tf.cast(per_anchor(logits, a), tf.float32))     # [B, h, w, A, C]
        all_boxes.append(tf.reshape(decoded, [-1, grid.shape[0] * grid.shape[1] * a, 4]))
        all_scores.append(tf.reshape(scores, [-1, grid.shape[0] * grid.shape[1] * a,
                                              scores.shape[-1]]))
    return tf.concat(all_boxes, axis=1), tf.concat(all_scores, axis=1)


def postprocess(outputs: Dict[str, Sequence[tf.Tensor]], anchors: AnchorConfig,
                image_size: Sequence[int], *, max_detections: int = 100,
                max_per_class: int = 100, iou_threshold: float = 0.5,
                score_threshold: float = 0.05, pre_nms_top_k: int = 1000) -> Dict[str, tf.Tensor]:
    """Detections from the model's outputs (unpartitioned; run it after the step).

    Decodes every level's deltas against its anchors, keeps the ``pre_nms_top_k`` anchors
    with the highest class score per image, clips the boxes to the image and runs
    ``tf.image.combined_non_max_suppression``. Returns ``{"boxes": float32 [B, K, 4]
    (ymin, xmin, ymax, xmax) pixels, "scores": float32 [B, K], "classes": int32 [B, K],
    "num_detections": int32 [B]}`` with ``K = max_detections``; entries past
    ``num_detections`` are zero boxes and scores with class -1.
    """
    height, width = int(image_size[0]), int(image_size[1])
    boxes, scores = decode_outputs(outputs, anchors, (height, width))
    k = min(int(pre_nms_top_k), boxes.shape[1])
    _, top = tf.math.top_k(tf.reduce_max(scores, axis=-1), k=k)
    boxes = tf.gather(boxes, top, batch_dims=1)
    scores = tf.gather(scores, top, batch_dims=1)
    limits = tf.constant([height, width, height, width], tf.float32)
    boxes = tf.clip_by_value(boxes, 0.0, limits)
    nms = tf.image.combined_non_max_suppression(
        boxes[:, :, None, :], scores, max_output_size_per_class=max_per_class,
        max_total_size=max_detections, iou_threshold=iou_threshold,
        score_threshold=score_threshold, pad_per_class=False, clip_boxes=False)
    count = tf.cast(nms.valid_detections, tf.int32)
    valid = tf.range(max_detections)[None, :] < count[:, None]
    classes = tf.where(valid, tf.cast(nms.nmsed_classes, tf.int32), -1)
    return {"boxes": nms.nmsed_boxes, "scores": nms.nmsed_scores, "classes": classes,
            "num_detections": count}
