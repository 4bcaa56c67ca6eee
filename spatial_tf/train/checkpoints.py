"""Checkpoints numbered by the global step, with the input position, and resume.

A restore takes the newest checkpoint that can be read in full (``newest_readable``):
the candidates are the ``ckpt-<step>.index`` / ``ckpt-<step>.data-*`` files on disk, not
only the one the ``checkpoint`` file names, so a damaged latest checkpoint (a truncated
or overwritten data file, a garbage or missing index) or a damaged ``checkpoint`` file
falls back to the one before, and says which files were passed over and why.

What a crash in the middle of a save leaves behind:

- TensorFlow (``tf.train.CheckpointManager`` over ``tf.train.Checkpoint``) writes the
  data into ``ckpt-<step>_temp/``, moves it into place, writes ``ckpt-<step>.index`` and
  only then rewrites the ``checkpoint`` file, by writing a temporary file and renaming
  it. A process killed mid-save leaves the ``checkpoint`` file naming the previous,
  complete checkpoint (and maybe a partial ``ckpt-<step>`` that ``newest_readable``
  passes over).
- TensorFlow does not flush the new files to the disk before that rename, so after a
  power loss or a kernel crash the ``checkpoint`` file could name a checkpoint whose
  bytes never reached the disk. ``Checkpointer.save`` adds that: it fsyncs the
  checkpoint's files and folder before the ``checkpoint`` file is rewritten.
- Every file is checked when read anyway: ``newest_readable`` reads every tensor
  (TensorFlow verifies each one's checksum), so nothing relies on the ``checkpoint``
  file alone.

>>> import os, tempfile, keras
>>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
>>> ckpt = Checkpointer(tempfile.mkdtemp(), model=model)
>>> ckpt.restore(), ckpt.save(5), ckpt.restore()
(0, 5, 5)
>>> os.path.basename(ckpt.manager.latest_checkpoint)
'ckpt-5'
"""
import glob
import os
import re
from typing import NamedTuple, Optional, Sequence, Tuple

import tensorflow as tf

from spatial_tf.error import Error

__all__ = ["Checkpointer", "CheckpointMismatchError", "CheckpointUnreadableError",
           "ReadableCheckpoint", "newest_readable"]

POINTER = "checkpoint"  # the file tf.train.CheckpointManager names the latest checkpoint in
_FILE = re.compile(r"^ckpt-(\d+)\.(index|data-\d{5}-of-\d{5})$")
_POINTER_LINE = re.compile(r'^\s*model_checkpoint_path:\s*"([^"]+)"\s*$', re.M)
_READ_ERRORS = (tf.errors.OpError, ValueError, IndexError, UnicodeDecodeError)


class CheckpointMismatchError(Error, ValueError):
    """The model dir holds a checkpoint of another model."""


class CheckpointUnreadableError(Error, ValueError):
    """The model dir holds checkpoint files, but no checkpoint among them can be read."""


class ReadableCheckpoint(NamedTuple):
    """What ``newest_readable`` found.

    ``path``: the prefix of the newest checkpoint read in full (``.../ckpt-<step>``), None
    when the folder holds no checkpoint files. ``skipped``: ``(file, what is wrong)`` for
    each newer checkpoint passed over and for a missing or damaged ``checkpoint`` file.
    """

    path: Optional[str]
    skipped: Tuple[Tuple[str, str], ...] = ()

    def notice(self, doing: str = "using") -> Optional[str]:
        """One line saying what was passed over and which checkpoint is used instead
        (None when nothing was), e.g. ``.../ckpt-3.index is missing; using ckpt-2, the
        newest readable checkpoint``."""
        if not self.skipped or self.path is None:
            return None
        wrong = "; ".join(f"{path} {problem}" for path, problem in self.skipped)
        return f"{wrong}; {doing} {os.path.basename(self.path)}, the newest readable checkpoint"


def newest_readable(model_dir) -> ReadableCheckpoint:
    """The newest checkpoint in ``model_dir`` whose files can all be read.

    Candidates are the ``ckpt-<step>.index`` and ``ckpt-<step>.data-*`` files found in
    the folder, newest step first; each is opened and every tensor read (TensorFlow
    checks each tensor's checksum; a data iterator's state, a variant, is not read) until
    one reads in full.

    Raises:
      CheckpointUnreadableError: checkpoint files are there but none can be read; the
        message names the folder and what is wrong with each file. Nothing is changed.
    """
    model_dir = os.fspath(model_dir)
    steps = _candidates(model_dir)
    skipped = list(_pointer_problems(model_dir, steps))
    for step in sorted(steps, reverse=True):
        prefix = os.path.join(model_dir, f"ckpt-{step}")
        problem = _unreadable(prefix, steps[step])
        if problem is None:
            return ReadableCheckpoint(prefix, tuple(skipped))
        skipped.append(problem)
    if steps:
        details = "; ".join(f"{os.path.basename(path)} {problem}" for path, problem in skipped
                            if os.path.basename(path) != POINTER)
        raise CheckpointUnreadableError(
            f"{model_dir}: no checkpoint in it can be read ({details}); expected ckpt-N.index "
            f"with its ckpt-N.data-* files as training writes them. Fix: restore them from a "
            f"copy, or move them out of {model_dir} and train again from step 0")
    return ReadableCheckpoint(None, tuple(skipped))


def _candidates(model_dir):
    """``{step: [file names]}`` of the checkpoint files in ``model_dir``."""
    if not tf.io.gfile.isdir(model_dir):
        return {}
    steps = {}
    for name in tf.io.gfile.listdir(model_dir):
        match = _FILE.match(name)
        if match:
            steps.setdefault(int(match.group(1)), []).append(name)
    return steps


def _pointer_problems(model_dir, steps):
    """``(file, problem)`` when the ``checkpoint`` file is missing, unreadable or names a
    checkpoint whose files are gone (only where there are checkpoint files to use)."""
    path = os.path.join(model_dir, POINTER)
    if not tf.io.gfile.exists(path):
        if steps:
            yield path, "is missing"
        return
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            text = f.read().decode("utf-8")
    except UnicodeDecodeError:
        yield path, "cannot be read (it is not text)"
        return
    named = _POINTER_LINE.search(text)
    if named is None:
        yield path, "cannot be read (it names no checkpoint)"
        return
    match = _FILE.match(os.path.basename(named.group(1)) + ".index")
    if match and int(match.group(1)) not in steps:
        yield path, f"names {os.path.basename(named.group(1))}, whose files are missing"


def _pointer_unreadable(model_dir) -> bool:
    """True when ``model_dir``'s ``checkpoint`` file exists but names no checkpoint."""
    return any("cannot be read" in problem
               for _, problem in _pointer_problems(os.fspath(model_dir), {}))


def _unreadable(prefix, names):
    """None when checkpoint ``prefix`` reads in full, else ``(file, what is wrong)``."""
    index = prefix + ".index"
    data = sorted(os.path.join(os.path.dirname(prefix), n) for n in names if ".data-" in n)
    if os.path.basename(index) not in names:
        return index, "is missing"
    try:
        reader = tf.train.load_checkpoint(prefix)
    except _READ_ERRORS as e:
        return _blame(e, index, data, opening=True)
    try:
        for key, dtype in reader.get_variable_to_dtype_map().items():
            if dtype != tf.variant:  # a data iterator's state: no NumPy value to read
                reader.get_tensor(key)
    except _READ_ERRORS as e:
        return _blame(e, index, data, opening=False)
    return None


def _blame(error, index, data, opening):
    """``(file, what is wrong)`` for a TensorFlow read error of one checkpoint."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    message = message.replace("Unsuccessful TensorSliceReader constructor: ", "")
    named = re.search(r"[^\s;:'\"]+\.data-\d{5}-of-\d{5}", message)
    if named and not os.path.exists(named.group(0)):
        return named.group(0), "is missing"
    if opening and not named:
        return index, f"is not a checkpoint index ({message})"
    shard = re.search(r"shard (\d+)", message)
    if named:
        file = named.group(0)
    elif shard and int(shard.group(1)) < len(data):
        file = data[int(shard.group(1))]
    else:
        file = data[0] if len(data) == 1 else index[: -len(".index")] + ".data-*"
    if isinstance(error, IndexError) or "Read less bytes" in message:
        return file, "is truncated (shorter than its index says)"
    if "checksum" in message.lower():
        return file, "does not match its checksum (its bytes were changed)"
    return file, f"cannot be read ({message})"


def _flush_to_disk(prefix: str) -> None:
    """fsync checkpoint ``prefix``'s files and folder (local folders only): a save
    callback, run before ``tf.train.CheckpointManager`` rewrites the ``checkpoint`` file."""
    prefix = os.fspath(prefix)
    if "://" in prefix:
        return
    paths = [prefix + ".index"] + glob.glob(glob.escape(prefix) + ".data-*")
    for path in paths + [os.path.dirname(os.path.abspath(prefix))]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class Checkpointer:
    """``tf.train.CheckpointManager`` over the model, optimizer, step and data iterator.

    Args:
      model_dir: where checkpoints go (``ckpt-<step>``).
      max_to_keep: checkpoints kept.
      optional: names of ``objects`` a checkpoint may lack (e.g. ``("iterator",)``: a
        checkpoint written under a strategy whose data iterator cannot be saved);
        ``restored`` tells which objects a restore did set.
      **objects: what to save, e.g. ``model=``, ``optimizer=``, ``iterator=`` (a
        ``tf.data`` iterator: saving it saves the position in the data).

    ``step`` is an int64 variable holding the global step; ``save()`` numbers the checkpoint
    with it. ``found`` is what the last ``restore()`` found (``ReadableCheckpoint``):
    ``found.notice()`` says which damaged files it passed over, if any.
    """

    def __init__(self, model_dir, max_to_keep: int = 3, *, optional: Sequence[str] = (),
                 **objects):
        self.model_dir = os.fspath(model_dir)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.objects = dict(objects)
        self.optional = tuple(optional)
        self.max_to_keep = max_to_keep
        self.restored: frozenset = frozenset()  # the objects the last restore() set
        self.found = ReadableCheckpoint(None)
        self.checkpoint = tf.train.Checkpoint(step=self.step, **objects)
        self._manager = None

    @property
    def manager(self) -> tf.train.CheckpointManager:
        """The ``tf.train.CheckpointManager``, made at first use (the first ``save``). A
        ``checkpoint`` file that names no checkpoint (which TensorFlow cannot read) is
        removed then: the save that follows writes a new one."""
        if self._manager is None:
            if _pointer_unreadable(self.model_dir):
                tf.io.gfile.remove(os.path.join(self.model_dir, POINTER))
            self._manager = tf.train.CheckpointManager(self.checkpoint, self.model_dir,
                                                       max_to_keep=self.max_to_keep)
        return self._manager

    def restore(self) -> int:
        """Restore the newest readable checkpoint if any; return the global step (0 when
        none). Newer damaged checkpoints are passed over (``found.notice()`` says so).

        Raises:
          CheckpointMismatchError: the checkpoint does not fit these objects (another
            model); nothing in the model dir is changed.
          CheckpointUnreadableError: checkpoint files are there but none can be read.
        """
        self.found = newest_readable(self.model_dir)
        latest = self.found.path
        if latest is None:
            return 0
        try:
            names = self._names_in(latest)
            checkpoint = self.checkpoint if len(names) == len(self.objects) else \
                tf.train.Checkpoint(step=self.step, **{k: self.objects[k] for k in names})
            status = checkpoint.restore(latest)
            status.assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as e:
            raise CheckpointMismatchError(
                f"{latest}: does not fit this model ({type(e).__name__}: "
                f"{str(e).splitlines()[0][:300]}). Expected a checkpoint of the same model and "
                f"optimizer. Fix: use another model dir ({self.model_dir} keeps that model's "
                f"checkpoints)."
            ) from e
        self.restored = frozenset(names)
        return int(self.step.numpy())

    def _names_in(self, path):
        """The names of ``objects`` to restore from checkpoint ``path``."""
        names = list(self.objects)
        if self.optional:  # read which objects the checkpoint holds only when it matters
            saved = {key.split("/")[0] for key in
                     tf.train.load_checkpoint(path).get_variable_to_shape_map()}
            names = [k for k in names if k in saved or k not in self.optional]
        return names

    def save(self, step=None) -> int:
        """Save with ``step`` (or the current global step) as the checkpoint number; the
        files reach the disk before the ``checkpoint`` file names them."""
        if step is not None:
            self.step.assign(int(step))
        options = tf.train.CheckpointOptions(experimental_write_callbacks=[_flush_to_disk])
        self.manager.save(checkpoint_number=int(self.step.numpy()), options=options)
        return int(self.step.numpy())
