"""Object detection on large images: anchors, matching, losses, steps, post-processing.

Everything up to the loss keeps the pyramid levels' ``[B, h, w, A, ...]`` shapes, so a
split of the image's height and width survives; ``postprocess`` runs unpartitioned.

>>> from spatial_tf import detection
>>> AnchorConfig().num_anchors
9
"""
from spatial_tf.detection.anchors import AnchorConfig
from spatial_tf.detection.drawing import draw_detections
from spatial_tf.detection.evaluation import (DetectionEvaluator, evaluate_detections,
                                             recall_at_iou)
from spatial_tf.detection.boxes import VARIANCES, decode, encode, iou, iou_matrix
from spatial_tf.detection.losses import detection_loss, huber_loss, sigmoid_focal_loss
from spatial_tf.detection.matching import BACKGROUND, IGNORE, match, match_level
from spatial_tf.detection.postprocess import decode_outputs, postprocess
from spatial_tf.detection.step import (
    DetectionLossConfig,
    make_detection_predict_step,
    make_detection_train_step,
)

__all__ = [
    "AnchorConfig",
    "BACKGROUND",
    "DetectionEvaluator",
    "IGNORE",
    "VARIANCES",
    "decode",
    "decode_outputs",
    "detection_loss",
    "draw_detections",
    "encode",
    "evaluate_detections",
    "huber_loss",
    "iou",
    "iou_matrix",
    "make_detection_predict_step",
    "make_detection_train_step",
    "DetectionLossConfig",
    "match",
    "match_level",
    "postprocess",
    "recall_at_iou",
    "sigmoid_focal_loss",
]
