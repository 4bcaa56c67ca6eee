"""``TrainOptions``: how ``spatial_tf.train.train`` steps, checkpoints and reports.

>>> TrainOptions(checkpoint_every=10, progress=False).checkpoint_every
10
>>> TrainOptions(max_to_keep=0)
Traceback (most recent call last):
...
ValueError: TrainOptions: max_to_keep is 0; expected a positive int (checkpoints kept in model_dir). Fix: max_to_keep=3, the default.
"""
import dataclasses
from typing import Any, Callable, Optional

from spatial_tf.train.step import segmentation_loss

__all__ = ["TrainOptions"]

_MEANINGS = {"checkpoint_every": "steps between checkpoints",
             "max_to_keep": "checkpoints kept in model_dir",
             "log_every": "steps between the lines said without a progress bar; None: a "
                          "tenth of steps"}


@dataclasses.dataclass(frozen=True)
class TrainOptions:
    """Options of ``spatial_tf.train.train`` beyond the model, data and steps.

    Attributes:
      checkpoint_every: steps between checkpoints (one is also saved at the end).
      max_to_keep: checkpoints kept in ``model_dir``; older ones are deleted.
      loss_fn: the loss of the default step (``make_train_step``'s ``loss_fn``).
      step_fn: the replica step, ``step_fn(batch) -> {name: scalar}`` (applying the
        gradients itself), instead of ``make_train_step(model, optimizer, spec, loss_fn)``.
      progress: show a progress bar on stderr. Without it, a line on stderr every
        ``log_every`` global steps and at the last: ``train: step 20/200: loss 0.6931,
        dice 0.412, 0.48 s/step`` (the step's values, and the seconds per step since the
        previous line, the first one including the trace and compile).
      log_every: steps between those lines; None (the default): a tenth of ``steps``, at
        least 1, so about ten lines a run.
      stop: a callable checked after every step; when it returns True (e.g. a SIGTERM
        handler set a flag) a checkpoint of the finished step is saved and ``train``
        returns with ``"stopped": True``.
    """

    checkpoint_every: int = 100
    max_to_keep: int = 3
    loss_fn: Callable[..., Any] = segmentation_loss
    step_fn: Optional[Callable[..., Any]] = None
    progress: bool = True
    stop: Optional[Callable[[], bool]] = None
    log_every: Optional[int] = None

    def __post_init__(self):
        for name, meaning in _MEANINGS.items():
            value = getattr(self, name)
            if value is None and name == "log_every":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                default = next(f.default for f in dataclasses.fields(self) if f.name == name)
                raise ValueError(f"TrainOptions: {name} is {value!r}; expected a positive int "
                                 f"({meaning}). Fix: {name}={default}, the default.")
        for name in ("loss_fn", "step_fn", "stop"):
            value = getattr(self, name)
            if (value is not None or name == "loss_fn") and not callable(value):
                raise TypeError(f"TrainOptions: {name} is {value!r}, which is not callable; "
                                f"expected a function. Fix: pass the function itself, not its "
                                f"result (e.g. {name}=my_fn, not {name}=my_fn()).")
        if not isinstance(self.progress, bool):
            raise TypeError(f"TrainOptions: progress is {self.progress!r}; expected True or "
                            f"False. Fix: progress=False to hide the progress bar.")
