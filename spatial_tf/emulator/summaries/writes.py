"""``tf.summary`` calls inside a step: traced as TensorFlow's own ops, written on the host.

On TPU, summary ops in a step run on the host (TPUStrategy moves them out of the
compiled program) and only replica 0 records. The emulator does the same without
replacing anything in TensorFlow: while a step is traced, ``default_writer`` makes a
summary writer of its own default (``writer.as_default()``, its events kept in memory
and never written), so ``tf.summary.write`` (which ``tf.summary.scalar``, ``histogram``,
``image`` and ``text`` call) builds its real ops in the step's graph.
``graph.split`` cuts them out of the program XLA compiles and makes their
numeric inputs extra results of the program; after the step ran, ``write`` computes the
rest on the host (PNG encoding, strings, a cond's branch) from replica 0's values and
writes with the summary writer that was default at the call: one the step itself made
default (``with writer.as_default():`` inside the step, as in TensorFlow's
``test_spmd_with_summary``; flushed after writing, as leaving it does), else the one
default where ``run`` is called. A call with no step, traced where no default step was
set, takes the default step where the step runs.

>>> import tensorflow as tf
>>> with default_writer():
...     @tf.function
...     def step(x):
...         return tf.summary.scalar("loss", x, step=3)
...     graph = step.get_concrete_function(tf.TensorSpec([])).graph
>>> sorted({op.type for op in graph.get_operations()} & {"WriteSummary", "If"})
['WriteSummary']
"""
import contextlib
import dataclasses
import threading
from typing import Any, List

import tensorflow as tf

from spatial_tf.emulator.summaries import parts

__all__ = ["HOST_STEP", "ResultPair", "default_writer", "tracing_writer_handle", "pairs",
           "write"]

# the default step while tracing when none is set: such writes take the host's
HOST_STEP = -(2 ** 63)
_LOGDIR = "ram://spatial_tf/summaries_while_tracing"  # TensorFlow's in-memory file system
_lock = threading.Lock()
_tracing_writer: List[Any] = []  # [writer, its handle or None], made at first use


def _writer():
    with _lock:
        if not _tracing_writer:
            with tf.init_scope():
                _tracing_writer.extend([tf.summary.create_file_writer(_LOGDIR), None])
        return _tracing_writer[0]


def tracing_writer_handle():
    """The resource handle of the writer ``default_writer`` makes default."""
    writer = _writer()
    with _lock:
        if _tracing_writer[1] is None:
            with tf.init_scope():
                _tracing_writer[1] = parts.handle(writer)
        return _tracing_writer[1]


@contextlib.contextmanager
def default_writer():
    """While tracing a step: the emulator's writer is the default summary writer, and
    ``HOST_STEP`` the default step if none is set. Leaving it flushes that writer now
    (outside the traced function), so a step without summaries gets no op from it."""
    step = HOST_STEP if tf.summary.experimental.get_step() is None else None
    manager = _writer().as_default(step=step)
    manager.__enter__()
    try:
        yield
    finally:
        with tf.init_scope():
            manager.__exit__(None, None, None)


class _HostWrites:
    """Writes one traced step's summaries from its transfers (``parts.Split``)."""

    def __init__(self, cut):
        self.cut = cut
        self._function = None

    def write(self, transfers):
        if self._function is None:
            self._function = self.cut.host_function()
        results = self._function(*transfers)
        written = [_write(w, results) for w in self.cut.writes]
        flushed = {id(w.writer): w.writer for w in self.cut.writes if w.flushed}
        if flushed:
            with tf.control_dependencies([w for w in written if w is not None]):
                written += [tf.raw_ops.FlushSummaryWriter(writer=h) for h in flushed.values()]
        return written


@dataclasses.dataclass(frozen=True)
class ResultPair:
    """Two of a step's extra program results, which the host reads to write the step's
    summaries (the runner hands them over in pairs; ``pairs`` makes them)."""

    host: Any
    index: int


def pairs(cut):
    """The ``ResultPair`` s of a ``parts.Split``: its transfers, two at a time."""
    host = _HostWrites(cut)
    return tuple(ResultPair(host, i) for i in range(len(cut.transfers) // 2))


def write(recorded, values):
    """Write the summaries of a step whose extra results, as ``recorded`` (its
    ``ResultPair`` s) names them, are ``values`` (one pair each); returns the ops."""
    if not recorded:
        return []
    host = recorded[0].host
    flat = [v for pair in values for v in pair]
    return host.write(flat[:len(host.cut.transfers)])


def check_steps(recorded) -> None:
    """Before a step runs: ``ValueError`` when one of its summaries (``recorded``, its
    ``ResultPair`` s) will need a default step that is not set, so that the step is not
    run, and its variables not updated, for a write that must fail."""
    if recorded and tf.summary.experimental.get_step() is None and any(
            w.writer is not None and w.host_step for w in recorded[0].host.cut.writes):
        raise ValueError(
            "A tf.summary call in the step wrote to the summary writer the step made "
            "default, with no step: none was passed, and no default step was set where "
            "the step was traced or where it runs. Fix: pass step= to the summary "
            "call, or enter the writer with writer.as_default(step=...).")


def _write(w, results):
    tag, value, metadata = results[w.tag], results[w.value], results[w.metadata]

    def record():  # the step is a scalar when the cond recorded (empty when not)
        step = None if w.host_step else tf.reshape(results[w.step], [])
        if w.writer is None:  # the writer default where the step runs
            return tf.summary.write(tag, value, step=step, metadata=metadata)
        at = step if step is not None else tf.summary.experimental.get_step()
        if at is None:  # check_steps refuses this before the step runs
            raise ValueError(
                "A tf.summary call in the step wrote to the summary writer the step made "
                "default, with no step: none was passed, and no default step was set "
                "where the step was traced or where it runs. Fix: pass step= to the "
                "summary call, or enter the writer with writer.as_default(step=...).")
        op = tf.raw_ops.WriteSummary(writer=w.writer, step=tf.cast(at, tf.int64),
                                     tensor=value, tag=tag, summary_metadata=metadata)
        with tf.control_dependencies([op]):
            return tf.constant(True)

    if w.flag is None:
        return record()
    return tf.cond(results[w.flag], record, lambda: tf.constant(False))
