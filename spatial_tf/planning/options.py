"""What ``plan`` takes besides the step, the inputs, the cores and the budget.

``PlanOptions``: how candidates are measured and ranked (memory basis, bfloat16, a size
fit, threads, progress). ``Training``: how a Keras model is trained while planned (its
loss and optimizer, and how to rebuild it at other sizes for a fit). Both are frozen
dataclasses with defaults, so a plan states only what differs:

>>> PlanOptions(fit_sizes=(16, 24, 32), progress=False).memory
'tpu'
>>> Training(loss="mse").optimizer is None
True

``plan``'s keyword arguments of earlier releases (``memory=``, ``fit_sizes=``,
``loss=``, ...) still work for one release and warn, naming the field that takes them.
"""
import dataclasses
from typing import Any, Callable, Optional, Sequence, Tuple

from spatial_tf.checks import fold_keywords

__all__ = ["PlanOptions", "Training", "from_keywords", "check_memory", "MEMORY_BASES"]

MEMORY_BASES = ("tpu", "cpu")


@dataclasses.dataclass(frozen=True)
class PlanOptions:
    """How ``plan`` measures and ranks candidates.

    Attributes:
      memory: ``"tpu"`` (the TPU estimate) or ``"cpu"``: which peak the budget checks.
      bf16: count activations as bfloat16 in the TPU estimate.
      fit_sizes: cube edges to compile at; the figures at the inputs' size are then
        predicted from ``bytes = a + b * voxels``. ``fit_check``: one more edge compiled
        to report the fit's error.
      workers: candidates compiled at once (threads; XLA compiles in parallel).
      progress: a progress bar (tqdm) on stderr; default when stderr is a terminal.
      symmetric: try one of the specs that only permute counts among equal spatial axes.
      reserve: the budget's reserve fraction, overriding the slice's default.
      target: the TPU whose compiler measures each candidate (``memory="tpu"``):
        ``"auto"`` (default) is the budget's generation when libtpu is installed, the
        budget names a generation and no ``fit_sizes`` are given; a generation or slice
        name (``"v5e"``) asks for it (libtpu required); None never compiles for TPU
        (the TPU figure is then the tile-padding estimate). With a target, candidates
        are compiled at the real size and fit when the TPU compiler accepts them.
      timeout: seconds for all the plan's compiles; the candidates not compiled by then
        are listed as such (``Plan.unfinished``), as after Ctrl-C, and the rest ranked.
      fit_only: the TPU compiler answers the fit and memory only, at XLA's lowest
        memory-fitting effort (no step time, so candidates rank by communication). The
        searches (``search_fewest_cores``, ``search_largest_edge``) always compile so.
    """

    memory: str = "tpu"
    bf16: bool = False
    fit_sizes: Optional[Sequence[int]] = None
    fit_check: Optional[int] = None
    workers: int = 1
    progress: Optional[bool] = None
    symmetric: bool = True
    reserve: Optional[float] = None
    target: Any = "auto"
    timeout: Optional[float] = None
    fit_only: bool = False

    def __post_init__(self):
        check_memory(self.memory)
        if self.timeout is not None and not (isinstance(self.timeout, (int, float))
                                             and not isinstance(self.timeout, bool)
                                             and self.timeout > 0):
            raise ValueError(
                f"plan: timeout={self.timeout!r}; expected seconds, a positive number, or "
                f"None for no limit. Fix: e.g. PlanOptions(timeout=600).")
        if self.target not in (None, "auto"):
            from spatial_tf.emulator.tpu import tpu_target

            tpu_target(self.target)  # ValueError for an unknown generation
            if self.fit_sizes is not None:
                raise ValueError(
                    f"plan: target={self.target!r} compiles every candidate at the real "
                    f"size with the TPU compiler, so fit_sizes={tuple(self.fit_sizes)} has "
                    f"nothing to fit. Fix: leave fit_sizes out, or target=None to predict "
                    f"from XLA:CPU compiles at those sizes."
                )
        if self.fit_sizes is not None:
            sizes = tuple(int(e) for e in self.fit_sizes)
            if len(set(sizes)) < 2:
                raise ValueError(
                    f"plan: fit_sizes is {sizes}; expected at least 2 different cube edges. "
                    f"Fix: e.g. PlanOptions(fit_sizes=(16, 24, 32))."
                )
            object.__setattr__(self, "fit_sizes", sizes)


@dataclasses.dataclass(frozen=True)
class Training:
    """How ``plan`` trains a Keras model (ignored for a step function).

    Attributes:
      loss: ``loss(labels, logits)`` or a Keras loss name; default: spatial_tf's
        cross-entropy + soft Dice, the step ``spatial_tf.train`` runs. A model compiled
        with ``model.compile`` and no loss or optimizer here is planned as ``fit``
        trains it.
      optimizer: a Keras optimizer or its name (default Adam).
      model_fn: ``model_fn(input_shape) -> model``, to rebuild a model of fixed input
        size at the edges of ``PlanOptions.fit_sizes``.
    """

    loss: Any = None
    optimizer: Any = None
    model_fn: Optional[Callable] = None


def check_memory(memory: str) -> str:
    """``memory`` if it is a memory basis the budget can check, else a ``ValueError``."""
    if memory not in MEMORY_BASES:
        raise ValueError(
            f"plan: memory is {memory!r}; expected one of {MEMORY_BASES}. Fix: memory='tpu' "
            f"to budget the TPU estimate, 'cpu' for XLA:CPU's figures."
        )
    return memory


def from_keywords(options: Optional[PlanOptions], training: Optional[Training],
                  keywords: dict) -> Tuple[PlanOptions, Training]:
    """``(options, training)`` with the keyword arguments of earlier releases folded in
    (each warns, naming its new place); unknown keywords raise ``TypeError``."""
    folded = fold_keywords("plan", keywords, {"options": (PlanOptions, options),
                                              "training": (Training, training)})
    return folded["options"], folded["training"]
