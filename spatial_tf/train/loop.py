"""A resumable training loop over the pieces in this package.

``train`` restores the latest checkpoint in ``model_dir`` (weights, optimizer, global
step and the position in the data) and says so on stderr (``train: restored
<model_dir>/ckpt-<step> (step <step>)``), runs the remaining steps under ``strategy`` with a
progress bar (or, with ``progress=False``, a line every ``TrainOptions.log_every`` steps)
and TensorBoard summaries, and checkpoints every
``TrainOptions.checkpoint_every`` steps and at the end. Stopped at any moment, the next
call loses at most the steps since the last checkpoint.

The data position is restored in one of three ways, each giving the resumed run exactly
the batches an uninterrupted run gets:

- a ``tf.data`` iterator (the default strategy) is saved in the checkpoint;
- a distributed iterator (``distribute_datasets_from_function``,
  ``experimental_distribute_dataset``: TPUStrategy, MirroredStrategy, the emulator)
  cannot be saved in TensorFlow 2.21, so the resumed run replays it: it draws and drops
  the batches of the steps already done. This needs a deterministic pipeline (seeded
  shuffles and augmentations) and costs reading those batches again;
- a ``dataset`` given as a function of the restored step is trusted to begin there (its
  ``dataset_fn`` can skip the examples already used before decoding them, the cheap way).

A damaged latest checkpoint is passed over: ``train`` resumes from the newest one that
reads in full and says on stderr which files it passed over and why (see
``spatial_tf.train.checkpoints.newest_readable``).
"""
import os
import re
import sys
from typing import Any, Optional

import tensorflow as tf

from spatial_tf.checks import fold_keywords
from spatial_tf.train.checkpoints import Checkpointer
from spatial_tf.train.options import TrainOptions
from spatial_tf.train.step import make_train_step
from spatial_tf.train.summaries import Progress, StepLog, Summaries, default_log_every

__all__ = ["train"]


def train(strategy, model, optimizer, dataset, *, steps: int, model_dir, spec=None,
          options: Optional[TrainOptions] = None, **deprecated: Any) -> dict:
    """Train to global step ``steps``; return the last step's values and ``"step"``.

    Args:
      strategy: the strategy the model and optimizer were created under.
      model, optimizer: a Keras segmentation model and optimizer.
      dataset: batches as ``strategy`` distributes them: the result of
        ``spatial_tf.data.distribute`` or ``strategy.experimental_distribute_dataset``
        (or a plain ``tf.data.Dataset`` under the default strategy); or a function
        ``dataset(done)`` returning one whose first batch is that of step ``done + 1``
        (``done``: the steps the restored checkpoint holds, 0 for a new run).
      steps: the global step to stop at (already done steps are skipped on resume).
      model_dir: checkpoints (``ckpt-<step>``) and summaries (``train/``) go here.
      spec: the batch's spec, see ``make_train_step``.
      options: a ``TrainOptions``: checkpoint interval and count, the loss or the whole
        replica step, the progress bar, a stop callback. The step's values (by default
        ``"loss"`` and ``"dice"``) are averaged over replicas, shown on the progress bar
        and written to the summaries.
      **deprecated: ``TrainOptions`` fields given as keywords, as earlier releases took
        them (``checkpoint_every=``, ``progress=``...): still accepted, with a
        ``DeprecationWarning`` naming ``options=``.
    """
    options = fold_keywords("train", deprecated, {"options": (TrainOptions, options)})["options"]
    _check_steps(steps)
    if not getattr(optimizer, "built", True):  # its slots must exist before restore and
        with strategy.scope():                 # be made in the strategy's scope, not in a step
            optimizer.build(model.trainable_variables)
    checkpointer, start, iterator = _restore(model_dir, options.max_to_keep, model, optimizer,
                                             dataset)
    step_fn = options.step_fn or make_train_step(model, optimizer, spec, options.loss_fn)

    @tf.function
    def train_step(iterator):
        out = strategy.run(step_fn, args=(next(iterator),))
        return {k: strategy.reduce("MEAN", v, axis=None) for k, v in out.items()}

    if options.stop is not None and options.stop():
        return {"step": start, "stopped": True}
    shown = _shown(options, steps, start)
    try:
        with Summaries(os.path.join(os.fspath(model_dir), "train")) as summaries:
            return _run(lambda: train_step(iterator), checkpointer, summaries, shown,
                        options, start, steps)
    finally:
        shown.close()


def _check_steps(steps):
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"train: steps is {steps!r}; expected a positive int, the global step "
                         f"to stop at. Fix: e.g. steps=1000.")


def _shown(options, steps, start):
    """The progress bar, or without it (``progress=False``) a line every ``log_every``."""
    if options.progress:
        return Progress(total=steps, initial=start)
    return StepLog(total=steps, initial=start,
                   every=options.log_every or default_log_every(steps))


def _run(train_step, checkpointer, summaries, shown, options, start, steps):
    """Steps ``start + 1 .. steps``: summaries, progress, checkpoints, the stop callback;
    the last step's values and ``"step"`` (and ``"stopped": True`` when stopped)."""
    stop, last = options.stop, {"step": start}
    for step in range(start + 1, steps + 1):
        values = _step_values(train_step, step)
        checkpointer.step.assign(step)
        summaries.scalars(step, values)
        shown.update(values)
        last = dict(values, step=step)
        if step % options.checkpoint_every == 0 or step == steps:
            checkpointer.save(step)
        elif stop is not None and stop():
            checkpointer.save(step)
        if stop is not None and step < steps and stop():
            last["stopped"] = True
            break
    return last


def _step_values(train_step, step):
    """The step's values as floats; an error the dataset's Python code raised inside the
    step (TensorFlow wraps it in a long ``InvalidArgumentError``) as one line."""
    try:
        return {k: float(v) for k, v in train_step().items()}
    except tf.errors.OpError as e:
        raised = _python_error(e.message)
        if raised is None:
            raise
        raise ValueError(f"train: step {step}: the dataset raised {raised}") from None


def _python_error(message: str):
    """The last ``SomeError: text`` line of a TensorFlow error ``message`` that a Python
    function of the pipeline raised (``PyFunc``: ``Dataset.from_generator``,
    ``tf.py_function``), or None.

    >>> _python_error("Graph execution error:\\n\\nDetected at node PyFunc ...\\n"
    ...              "ValueError: scan.nii: 2 of 8 voxels are not finite\\n\\t [[{{node PyFunc}}]]")
    'ValueError: scan.nii: 2 of 8 voxels are not finite'
    >>> _python_error("Graph execution error: OOM") is None
    True
    """
    if "PyFunc" not in message:
        return None
    found = _PYTHON_ERROR.findall(message)
    return found[-1] if found else None


_PYTHON_ERROR = re.compile(r"^(?:[A-Za-z_][\w.]*(?:Error|Exception)): .+$", re.M)


def _restore(model_dir, max_to_keep, model, optimizer, dataset):
    """The checkpointer, the restored step and an iterator positioned after that step."""
    if callable(dataset):  # the caller positions the data
        checkpointer = Checkpointer(model_dir, max_to_keep=max_to_keep, model=model,
                                    optimizer=optimizer)
        start = _resume(checkpointer)
        return checkpointer, start, iter(dataset(start))
    iterator = iter(dataset)
    objects = dict(model=model, optimizer=optimizer)
    if isinstance(iterator, tf.__internal__.tracking.Trackable):
        objects["iterator"] = iterator  # the data position is saved too
    checkpointer = Checkpointer(model_dir, max_to_keep=max_to_keep, optional=("iterator",),
                                **objects)
    start = _resume(checkpointer)
    if "iterator" not in checkpointer.restored:  # not saved: replay the steps done
        replay(iterator, start)
    return checkpointer, start, iterator


def _resume(checkpointer):
    """Restore; say on stderr which damaged checkpoint files were passed over and which
    checkpoint was restored."""
    start = checkpointer.restore()
    notice = checkpointer.found.notice("resuming from")
    if notice:
        print(f"train: {notice}", file=sys.stderr, flush=True)
    if checkpointer.found.path is not None:
        print(f"train: restored {checkpointer.found.path} (step {start})", file=sys.stderr,
              flush=True)
    return start


def replay(iterator, batches: int) -> None:
    """Draw and drop ``batches`` batches from ``iterator`` (eagerly, on the host).

    >>> import tensorflow as tf
    >>> it = iter(tf.data.Dataset.range(10).batch(2))
    >>> replay(it, 3); next(it).numpy().tolist()
    [6, 7]
    >>> replay(iter(tf.data.Dataset.range(4).batch(2)), 3)
    Traceback (most recent call last):
    ...
    ValueError: train: the dataset ended after 2 batches while replaying the 3 steps the checkpoint holds. Expected a dataset with a batch for every step. Fix: repeat() it, or resume with a dataset that has at least that many batches.
    """
    for done in range(batches):
        try:
            next(iterator)
        except (StopIteration, tf.errors.OutOfRangeError):
            raise ValueError(
                f"train: the dataset ended after {done} batches while replaying the "
                f"{batches} steps the checkpoint holds. Expected a dataset with a batch for "
                f"every step. Fix: repeat() it, or resume with a dataset that has at least "
                f"that many batches.") from None
