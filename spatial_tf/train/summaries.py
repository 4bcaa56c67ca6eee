"""TensorBoard summaries, and a progress bar or periodic log lines, for a training loop.

>>> import tempfile
>>> with Summaries(tempfile.mkdtemp()) as summaries:
...     summaries.scalars(1, {"loss": 0.5, "dice": 0.2})
"""
import os
import sys
import time

import tensorflow as tf

__all__ = ["Summaries", "Progress", "StepLog", "default_log_every"]


class Summaries:
    """Scalars to ``logdir`` for TensorBoard (``tensorboard --logdir <model_dir>``). The
    events file is made with the first scalars: a run that fails before its first step
    leaves no file behind.

    >>> import os, tempfile
    >>> logdir = os.path.join(tempfile.mkdtemp(), "train")
    >>> Summaries(logdir).close(); os.path.exists(logdir)
    False
    """

    def __init__(self, logdir):
        self.logdir = os.fspath(logdir)
        self.writer = None

    def scalars(self, step: int, values: dict) -> None:
        if self.writer is None:
            self.writer = tf.summary.create_file_writer(self.logdir)
        with self.writer.as_default(step=int(step)):
            for name, value in values.items():
                tf.summary.scalar(name, float(value))

    def close(self):
        if self.writer is not None:
            self.writer.flush()
            self.writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Progress:
    """A tqdm bar from ``initial`` to ``total`` steps showing the step's scalars and time.

    ``loss`` (and any ``*loss``) is shown with 4 decimals, other values with 3.

    >>> bar = Progress(total=2, disable=True)
    >>> bar.update({"loss": 0.7, "dice": 0.4}); bar.update({"loss": 0.6, "dice": 0.5})
    >>> bar.n, bar.postfix["loss"], bar.postfix["dice"]
    (2, '0.6000', '0.500')
    >>> bar.close()
    """

    def __init__(self, total: int, initial: int = 0, **tqdm_options):
        from tqdm.auto import tqdm

        self._bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, **tqdm_options)
        self._last = time.perf_counter()
        self.postfix: dict = {}
        self.n = initial  # steps done (tqdm stops counting when disabled)

    def update(self, values: dict) -> None:
        now = time.perf_counter()
        seconds, self._last = now - self._last, now
        self.postfix = _formatted(values)
        self.postfix["step"] = f"{seconds:.2f}s"
        self._bar.set_postfix(self.postfix, refresh=False)
        self._bar.update(1)
        self.n += 1

    def close(self):
        self._bar.close()


def _formatted(values: dict) -> dict:
    """``loss`` (and any ``*loss``) with 4 decimals, other values with 3."""
    return {k: f"{float(v):.4f}" if k.endswith("loss") else f"{float(v):.3f}"
            for k, v in values.items()}


def default_log_every(steps: int) -> int:
    """Steps between ``StepLog`` lines when none is asked: a tenth of ``steps``, at least 1.

    >>> default_log_every(200), default_log_every(5)
    (20, 1)
    """
    return max(1, int(steps) // 10)


class StepLog:
    """For a run without a progress bar: one line every ``every`` global steps and at step
    ``total``, with the step's values (as ``Progress`` formats them) and the seconds per
    step averaged since the previous line (the first line's include tracing and compiling).

    >>> import sys
    >>> log = StepLog(total=5, initial=0, every=2, file=sys.stdout)
    >>> for loss in (0.9, 0.8, 0.7, 0.6, 0.5):
    ...     log.update({"loss": loss, "dice": 0.25})   # doctest: +ELLIPSIS
    train: step 2/5: loss 0.8000, dice 0.250, ... s/step
    train: step 4/5: loss 0.6000, dice 0.250, ... s/step
    train: step 5/5: loss 0.5000, dice 0.250, ... s/step
    """

    def __init__(self, total: int, initial: int = 0, every: int = 10, file=None):
        self.total, self.n, self.every = int(total), int(initial), int(every)
        self.file = file
        self._last, self._since = time.perf_counter(), self.n

    def update(self, values: dict) -> None:
        self.n += 1
        if self.n % self.every and self.n != self.total:
            return
        now = time.perf_counter()
        seconds = (now - self._last) / max(1, self.n - self._since)
        self._last, self._since = now, self.n
        shown = ", ".join(f"{k} {v}" for k, v in _formatted(values).items())
        print(f"train: step {self.n}/{self.total}: {shown}, {seconds:.2f} s/step",
              file=self.file or sys.stderr, flush=True)

    def close(self):
        pass
