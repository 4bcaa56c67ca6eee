"""The training loop as a library: step, checkpoints, resume, summaries, progress.

>>> from spatial_tf import train
>>> sorted(n for n in train.__all__ if n[0].islower())
['make_eval_step', 'make_train_step', 'newest_readable', 'segmentation_loss', 'train']
"""
from spatial_tf.train.checkpoints import (CheckpointMismatchError, Checkpointer,
                                         CheckpointUnreadableError, newest_readable)
from spatial_tf.train.loop import train
from spatial_tf.train.options import TrainOptions
from spatial_tf.train.step import make_eval_step, make_train_step, segmentation_loss
from spatial_tf.train.summaries import Progress, Summaries

__all__ = [
    "CheckpointMismatchError", "CheckpointUnreadableError", "Checkpointer", "Progress",
    "Summaries", "TrainOptions", "make_eval_step", "make_train_step", "newest_readable", "segmentation_loss",
    "train",
]
