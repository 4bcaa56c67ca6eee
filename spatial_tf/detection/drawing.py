"""Draw detected boxes with class names and scores on an image, saved as PNG (matplotlib).

>>> import numpy as np, os, tempfile
>>> image = np.full((48, 64, 3), 0.5, np.float32)
>>> found = {"boxes": np.array([[8., 8., 30., 40.]]), "scores": np.array([0.87]),
...          "classes": np.array([1])}
>>> path = draw_detections(os.path.join(tempfile.mkdtemp(), "d.png"), image, found,
...                        class_names=["ellipse", "triangle"])
>>> os.path.getsize(path) > 0
True
"""
from typing import Any, Mapping, Optional, Sequence, Tuple, Union
import os

import numpy as np

__all__ = ["draw_detections"]

PathLike = Union[str, os.PathLike]


def _one_image(values, key, what, rank):
    array = np.asarray(values[key].numpy() if hasattr(values[key], "numpy") else values[key])
    if array.ndim == rank + 1 and array.shape[0] == 1:
        array = array[0]  # a batch of one
    if array.ndim != rank:
        raise ValueError(
            f"draw_detections: {what}['{key}'] has shape {array.shape}; expected one image's "
            f"({rank} axes). Fix: pass one image's entries, e.g. "
            f"{{k: v[i] for k, v in {what}.items()}}.")
    return array


def draw_detections(path: PathLike, image: Any, detections: Mapping[str, Any],
                    class_names: Optional[Sequence[str]] = None,
                    score_threshold: float = 0.0,
                    ground_truth: Optional[Mapping[str, Any]] = None,
                    dpi: int = 100) -> str:
    """Write ``image`` with ``detections`` drawn on it to the PNG ``path``; return ``path``.

    Args:
      path: the PNG to write (its folder must exist).
      image: ``[height, width, 3]`` (or ``[height, width]``, ``[height, width, 1]``)
        values in [0, 1]; the PNG has the same height and width in pixels.
      detections: one image's ``{"boxes": [K, 4] (ymin, xmin, ymax, xmax) pixels,
        "scores": [K], "classes": [K]}`` and optionally ``"num_detections"`` (only the
        first that many are drawn); a batch of one is accepted too.
      class_names: the label text of class ``k``; the class number by default.
      score_threshold: detections scoring below it are left out.
      ground_truth: optional ``{"boxes", "classes"}`` of the image (class ``-1`` on
        padding), drawn dashed in white under the detections.
      dpi: the PNG's dots per inch (metadata only; the size stays in pixels).
    """
    pixels = _pixels(image)
    found = _detections(detections)
    figure, axes = _figure(pixels, dpi)
    font = max(6.0, min(pixels.shape[:2]) / 50.0)
    if ground_truth is not None:
        _draw_ground_truth(axes, ground_truth)
    _draw_boxes(axes, found, class_names, score_threshold, font)
    path = os.fspath(path)
    figure.savefig(path, dpi=dpi, format="png")
    return path


def _pixels(image: Any) -> np.ndarray:
    """``image`` as float32 ``[height, width, 3]`` or ``[height, width]``."""
    pixels = np.asarray(image.numpy() if hasattr(image, "numpy") else image, np.float32)
    if pixels.ndim == 4 and pixels.shape[0] == 1:
        pixels = pixels[0]
    if pixels.ndim == 3 and pixels.shape[-1] == 1:
        pixels = pixels[..., 0]
    if pixels.ndim not in (2, 3) or (pixels.ndim == 3 and pixels.shape[-1] != 3):
        raise ValueError(f"draw_detections: image has shape {pixels.shape}; expected "
                         f"[height, width, 3], [height, width, 1] or [height, width].")
    return pixels


def _detections(detections: Mapping[str, Any]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One image's ``(boxes, scores, classes)``, the first ``num_detections`` of each."""
    for key in ("boxes", "scores", "classes"):
        if key not in detections:
            raise ValueError(f"draw_detections: detections has no '{key}' (it has "
                             f"{sorted(detections)}); expected 'boxes', 'scores' and 'classes'.")
    boxes = _one_image(detections, "boxes", "detections", 2)
    scores = _one_image(detections, "scores", "detections", 1)
    classes = _one_image(detections, "classes", "detections", 1).astype(np.int64)
    count = len(boxes)
    if "num_detections" in detections:
        count = int(np.asarray(detections["num_detections"]).reshape(-1)[0])
    return boxes[:count], scores[:count], classes[:count]


def _figure(pixels: np.ndarray, dpi: int) -> Tuple[Any, Any]:
    """A matplotlib figure of the image's size in pixels showing it, and its axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    height, width = pixels.shape[:2]
    figure = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    FigureCanvasAgg(figure)
    axes = figure.add_axes((0.0, 0.0, 1.0, 1.0))
    axes.set_axis_off()
    axes.imshow(np.clip(pixels, 0.0, 1.0), cmap="gray", vmin=0.0, vmax=1.0,
                interpolation="nearest", extent=(0, width, height, 0))
    axes.set_xlim(0, width)
    axes.set_ylim(height, 0)
    return figure, axes


def _draw_ground_truth(axes: Any, ground_truth: Mapping[str, Any]) -> None:
    """The true boxes (class >= 0), dashed in white."""
    from matplotlib.patches import Rectangle

    truth_boxes = _one_image(ground_truth, "boxes", "ground_truth", 2)
    truth_classes = _one_image(ground_truth, "classes", "ground_truth", 1)
    for (y0, x0, y1, x1), cls in zip(truth_boxes, truth_classes):
        if cls >= 0:
            axes.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False,
                                     edgecolor="white", linestyle="--", linewidth=1.0))


def _draw_boxes(axes: Any, found: Tuple[np.ndarray, np.ndarray, np.ndarray],
                class_names: Optional[Sequence[str]], score_threshold: float,
                font: float) -> None:
    """The detections ``found = (boxes, scores, classes)`` scoring at least
    ``score_threshold``, a colour per class, labelled with the class name and score."""
    import matplotlib
    from matplotlib.patches import Rectangle

    colours = matplotlib.colormaps["tab10"]
    for (y0, x0, y1, x1), score, cls in zip(*found):
        if score < score_threshold or cls < 0:
            continue
        colour = colours(int(cls) % 10)
        axes.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, edgecolor=colour,
                                 linewidth=1.5))
        name = class_names[cls] if class_names is not None and cls < len(class_names) else str(cls)
        axes.text(x0, y0, f"{name} {score:.2f}", color="white", fontsize=font,
                  verticalalignment="bottom", clip_on=True,
                  bbox={"facecolor": colour, "edgecolor": "none", "pad": 1.0, "alpha": 0.8})
