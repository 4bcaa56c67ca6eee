"""TensorBoard summaries and a progress bar for a training loop.

>>> import tempfile
>>> with Summaries(tempfile.mkdtemp()) as summaries:
...     summaries.scalars(1, {"loss": 0.5, "dice": 0.2})
"""
import os
import time

import tensorflow as tf

__all__ = ["Summaries", "Progress"]


class Summaries:
    """Scalars to ``logdir`` for TensorBoard (``tensorboard --logdir <model_dir>``)."""

    def __init__(self, logdir):
        self.writer = tf.summary.create_file_writer(os.fspath(logdir))

    def scalars(self, step: int, values: dict) -> None:
        with self.writer.as_default(step=int(step)):
            for name, value in values.items():
                tf.summary.scalar(name, float(value))

    def close(self):
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
        self.postfix = {k: f"{float(v):.4f}" if k.endswith("loss") else f"{float(v):.3f}"
                        for k, v in values.items()}
        self.postfix["step"] = f"{seconds:.2f}s"
        self._bar.set_postfix(self.postfix, refresh=False)
        self._bar.update(1)
        self.n += 1

    def close(self):
        self._bar.close()
