"""Pictures a person would rather look at than read: volume slices and per-core memory.

Both return a matplotlib ``Figure`` (``pip install "spatial-tf[plot]"``): a notebook shows
it, ``fig.savefig(path)`` writes it.

>>> import numpy as np
>>> from spatial_tf import viz
>>> volume = np.zeros((8, 16, 16))
>>> fig = viz.slices_figure(volume, labels=volume.astype(int), slices=[2, 5])
>>> [ax.get_title() for ax in fig.axes]
['input, slice 2 of 8 along D (axis 0)', 'label', 'input, slice 5 of 8 along D (axis 0)', 'label']
"""
import numpy as np

from spatial_tf.table import plural

__all__ = ["slices_figure", "memory_figure", "clip_layout_figure", "clip_cores"]

_AXES = "DHW"  # the library's names of a [D, H, W] volume's axes


def _pyplot():
    import matplotlib.pyplot as plt  # headless: matplotlib falls back to Agg by itself

    return plt


def slices_figure(image, labels=None, prediction=None, *, slices=None, axis: int = 0,
                  title: str = "", class_names=None, plane=None):
    """Slices of a volume: a row per slice, columns input / label / prediction, and a
    legend of the classes' colours under the masks.

    Args:
      image: a ``[D, H, W]`` volume (a trailing channel of 1 is dropped).
      labels, prediction: integer ``[D, H, W]`` class masks, shown when given.
      slices: indices along ``axis`` (default: the slice with the most labelled voxels,
        class > 0, of ``labels``, else of ``prediction``; the middle one without any).
      axis: the axis the slices cut (0: axial for ``[D, H, W]`` volumes; 2 for the RAS+
        volumes ``spatial_tf.data.read_volume`` gives of NIfTI files).
      title: the figure's title.
      class_names: a name per class (default ``background``, ``class 1``, ...).
      plane: the slices' anatomical plane, e.g. ``"axial"``: each input's title says
        ``input, axial slice 9 of 35 (axis 2)``; without it, ``input, slice 9 of 35 along
        D (axis 0)`` (D, H, W: the axes of a ``[D, H, W]`` volume). Slices count from 0.
    """
    image = np.asarray(image)
    if image.ndim == 4 and image.shape[-1] == 1:
        image = image[..., 0]
    if image.ndim != 3:
        raise ValueError(f"slices_figure: image has shape {image.shape}; expected a [D, H, W] "
                         f"volume (or [D, H, W, 1]). Fix: pass one volume, without the batch axis")
    masks = [(name, np.asarray(m)) for name, m in (("label", labels), ("prediction", prediction))
             if m is not None]
    for name, mask in masks:
        if mask.shape != image.shape:
            raise ValueError(f"slices_figure: {name} has shape {mask.shape}; expected the "
                             f"image's {image.shape}. Fix: pass class indices (argmax of logits)")
    if not -3 <= axis < 3:
        raise ValueError(f"slices_figure: axis is {axis}; expected 0, 1 or 2.")
    depth = image.shape[axis]
    slices = [_most_labelled(masks, axis, depth)] if slices is None else list(slices)
    for s in slices:
        if not 0 <= s < depth:
            raise ValueError(f"slices_figure: slice {s} is outside the volume; expected "
                             f"0..{depth - 1} along axis {axis}.")
    top = max([int(m.max()) for _, m in masks] + [1])
    names = _class_names(class_names, top)
    plt = _pyplot()
    columns = 1 + len(masks)
    fig, axes = plt.subplots(len(slices), columns, figsize=(3.2 * columns, 3.4 * len(slices)),
                             squeeze=False)
    for row, s in zip(axes, slices):
        row[0].imshow(np.take(image, s, axis=axis), cmap="gray")
        row[0].set_title(f"input, {plane} slice {s} of {depth} (axis {axis % 3})" if plane else
                         f"input, slice {s} of {depth} along {_AXES[axis]} (axis {axis % 3})")
        for ax, (name, mask) in zip(row[1:], masks):
            ax.imshow(np.take(mask, s, axis=axis), cmap="viridis", vmin=0, vmax=top,
                      interpolation="nearest")
            ax.set_title(name)
        for ax in row:
            ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    if masks:
        _legend(fig, plt, names, top)
    return fig


def _most_labelled(masks, axis, depth):
    """The slice with the most voxels of a class > 0 in the first mask that has any."""
    for _, mask in masks:
        counts = np.count_nonzero(mask > 0, axis=tuple(a for a in range(3) if a != axis % 3))
        if counts.any():
            return int(np.argmax(counts))
    return depth // 2


def _class_names(class_names, top):
    if class_names is None:
        return ["background"] + [f"class {k}" for k in range(1, top + 1)]
    names = [str(n) for n in class_names]
    if len(names) <= top:
        raise ValueError(f"slices_figure: class_names has {plural(len(names), 'name')}; "
                         f"expected one per class, {top + 1} (the masks hold classes "
                         f"0..{top}). Fix: name every class, background included.")
    return names


def _legend(fig, plt, names, top):
    """The classes' colours as in the masks (viridis over 0..top), under the figure."""
    from matplotlib.patches import Patch

    cmap = plt.get_cmap("viridis")
    handles = [Patch(color=cmap(k / top), label=names[k]) for k in range(top + 1)]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=8,
               frameon=False)
    fig.subplots_adjust(bottom=0.1)


def memory_figure(report, title: str = ""):
    """Per-core bytes of a partitioned step beside the unpartitioned program's.

    ``report`` is what ``Emulator.report`` returns: bars per kind (arguments, outputs,
    temporaries), partitioned per core against unpartitioned, in MiB.
    """
    from spatial_tf.emulator.xla import MEMORY_KINDS

    # the kinds XLA reports, less "alias": outputs that reuse an argument's buffer,
    # already counted among the arguments
    kinds = [k for k in MEMORY_KINDS if k != "alias"]
    plt = _pyplot()
    mib = 2.0 ** 20
    x = np.arange(len(kinds))
    part = [report.partitioned[k] / mib for k in kinds]
    whole = [report.unpartitioned[k] / mib for k in kinds]
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    ax.bar(x - 0.2, whole, 0.4, label="unpartitioned", color="0.6")
    ax.bar(x + 0.2, part, 0.4, label=f"per core, {report.num_cores_per_replica} cores",
           color="tab:blue")
    ax.set_xticks(x, kinds)
    ax.set_ylabel("MiB")
    ax.set_title(title or f"{report.function}: memory per core", fontsize=9)
    ax.legend()
    fig.tight_layout()
    return fig


def clip_cores(shape, spec, example: int = 0):
    """Which logical core holds each pixel of one example of a ``[B, T, H, W, C]`` clip.

    Returns an int array ``[T, H, W]`` of core ids (row-major over the spec's tiling, as
    ``TPUStrategy`` and ``spatial_tf.split`` number them).

    >>> clip_cores((2, 4, 2, 2, 3), [1, 2, 1, 2, 1])[:, 0, :].tolist()   # frames x columns
    [[0, 1], [0, 1], [2, 3], [2, 3]]
    """
    from spatial_tf.spec import Tile

    shape = tuple(int(d) for d in shape)
    dims = tuple(int(d) for d in (spec.dims if isinstance(spec, Tile) else spec))
    if len(shape) != 5 or len(dims) != 5:
        raise ValueError(f"clip_cores: shape {list(shape)} and spec {list(dims)}; expected "
                         f"both of rank 5, [batch, frames, height, width, channels]. Fix: "
                         f"e.g. spec [1, 2, 2, 1, 1] for a (2, 16, 64, 64, 3) clip")
    if dims[4] != 1:
        raise ValueError(f"clip_cores: spec {list(dims)} splits the channels, so every pixel "
                         f"is on {dims[4]} cores. Expected 1 on the last axis. Fix: split "
                         f"frames, height or width")
    for axis, (size, count) in enumerate(zip(shape, dims)):
        if count < 1 or size % count:
            raise ValueError(f"clip_cores: axis {axis} has size {size}, which {count} pieces do "
                             f"not divide. Fix: a split count that divides {size}")
    if not 0 <= example < shape[0]:
        raise ValueError(f"clip_cores: example {example}; expected 0..{shape[0] - 1}")
    ids = np.arange(int(np.prod(dims))).reshape(dims)[example // (shape[0] // dims[0]), ..., 0]
    for axis in range(3):
        ids = np.repeat(ids, shape[axis + 1] // dims[axis + 1], axis=axis)
    return ids


def clip_layout_figure(clip, spec, *, example: int = 0, frames=None, title: str = ""):
    """A clip's frames side by side, each pixel coloured by the core that holds it.

    Args:
      clip: a ``[B, T, H, W, C]`` array (its first channel is drawn in grey under the
        colours) or just its shape.
      spec: the clip's split counts, e.g. ``[1, 2, 2, 1, 1]`` (frames in 2, rows in 2).
      example: which example of the batch (a batch split puts examples on other cores).
      frames: the frame indices to draw (default: all, or 8 spread over the clip).
      title: the figure's title (default: the spec and what the colours mean).

    The legend gives each core's frames, rows and columns (ranges include both ends).
    """
    array = None
    if hasattr(clip, "shape") and np.ndim(clip) == 5:
        array = np.asarray(clip)
        shape = array.shape
    else:
        shape = tuple(int(d) for d in clip)
    cores = clip_cores(shape, spec, example)
    count = int(np.prod([int(d) for d in (getattr(spec, "dims", None) or spec)]))
    total = shape[1]
    if frames is None:
        frames = range(total) if total <= 8 else sorted({int(round(f)) for f in
                                                         np.linspace(0, total - 1, 8)})
    frames = list(frames)
    for f in frames:
        if not 0 <= f < total:
            raise ValueError(f"clip_layout_figure: frame {f}; expected 0..{total - 1}")
    plt = _pyplot()
    from matplotlib.patches import Patch

    cmap = plt.get_cmap("tab10" if count <= 10 else "tab20")
    fig, axes = plt.subplots(1, len(frames), figsize=(1.9 * len(frames) + 0.4, 2.9),
                             squeeze=False)
    for ax, f in zip(axes[0], frames):
        if array is not None:
            ax.imshow(array[example, f, :, :, 0], cmap="gray")
        ax.imshow(cores[f], cmap=cmap, vmin=-0.5, vmax=cmap.N - 0.5,
                  alpha=0.45 if array is not None else 1.0, interpolation="nearest")
        ax.set_title(f"frame {f}", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    handles = []
    for k in np.unique(cores):
        t, h, w = (np.nonzero((cores == k).any(axis=tuple(a for a in range(3) if a != axis)))[0]
                   for axis in range(3))
        handles.append(Patch(color=cmap(int(k)), label=f"core {k}: frames {t[0]}-{t[-1]}, "
                             f"rows {h[0]}-{h[-1]}, columns {w[0]}-{w[-1]}"))
    fig.suptitle(title or f"split {list(getattr(spec, 'dims', None) or spec)} on {count} "
                 f"cores: example {example}'s pixels coloured by the core holding them",
                 fontsize=9)
    fig.legend(handles=handles, loc="lower center", ncol=2 if len(handles) > 2 else 1,
               fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.06 * ((len(handles) + 1) // 2 + 1), 1, 0.95))
    return fig
