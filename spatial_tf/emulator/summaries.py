"""``tf.summary`` calls inside a step: recorded while tracing, written on the host.

On TPU, summary ops in a step run on the host (TPUStrategy moves them out of the
compiled program) and only replica 0 records. The emulator does the same: while a step
is traced, ``tf.summary.write`` (which ``tf.summary.scalar``, ``histogram``, ``image``
and ``text`` call) records the tag, the value and the step instead of writing, the values
become extra results of the compiled program, and after the step ran ``write`` writes
replica 0's values with the summary writer that was default at the call: one the step
itself entered (``with writer.as_default():`` inside the step, as in TensorFlow's
``test_spmd_with_summary``), else the one default where ``run`` is called. A writer
entered inside the step is made default without its ``flush`` on exit while tracing (a
flush is a host op XLA cannot compile); ``write`` flushes it after writing.

>>> import tensorflow as tf
>>> with recording() as recorded:
...     _ = tf.summary.write("loss", tf.constant(1.0), step=3)
>>> [(s.tag, int(s.step)) for s in recorded]
[('loss', 3)]
"""
import contextlib
import dataclasses
from typing import Any

import tensorflow as tf

from spatial_tf import _tf_internals as _tf

__all__ = ["Recorded", "recording", "write"]



@dataclasses.dataclass
class Recorded:
    """One ``tf.summary.write`` call seen while tracing; ``writer``: the summary writer the
    step itself made default around it, or None."""

    tag: Any
    value: Any
    step: Any
    metadata: Any
    writer: Any = None


class _EnteredInStep:
    """``writer.as_default(step)`` while a step is traced: default, no flush on exit."""

    def __init__(self, writer, step, entered):
        self.writer, self.step, self.entered = writer, step, entered

    def __enter__(self):
        state = _tf.summary_ops_v2._summary_state
        self.old = (state.writer, state.step)
        state.writer = self.writer
        if self.step is not None:
            state.step = self.step
        self.entered.append(self.writer)
        return self.writer

    def __exit__(self, *exc):
        state = _tf.summary_ops_v2._summary_state
        state.writer = self.old[0]
        if self.step is not None:
            state.step = self.old[1]
        self.entered.pop()
        return False


def _may_record():
    """False when ``tf.summary.record_if`` says no with a condition known while tracing.
    (Whether a writer is default is decided where the values are written: a step may be
    traced again where none is, e.g. for the sizes a call brings.)"""
    condition = _tf.summary_ops_v2._summary_state.is_recording
    if callable(condition):
        condition = condition()
    return tf.get_static_value(condition) is not False


@contextlib.contextmanager
def recording():
    """Inside: ``tf.summary.write`` records into the yielded list and writes nothing, and
    a summary writer made default inside is recorded with the calls it covers."""
    recorded, entered = [], []
    original = tf.summary.write
    writer_class = _tf.summary_ops_v2.SummaryWriter
    original_as_default = writer_class.as_default

    def record(tag, tensor, step=None, metadata=None, name=None):
        del name
        if not _may_record():
            return tf.constant(False)  # tf.summary.record_if(False) around it
        value = tensor() if callable(tensor) else tensor
        if step is None and entered:
            step = tf.summary.experimental.get_step()  # as_default(step=...) in the step
        recorded.append(Recorded(tag, tf.convert_to_tensor(value),
                                 None if step is None else tf.convert_to_tensor(step, tf.int64),
                                 metadata, entered[-1] if entered else None))
        return tf.constant(True)

    # tf.summary.scalar & co. (TensorBoard's) call it through tf.compat.v2.summary
    modules = [m for m in (tf.summary, tf.compat.v2.summary) if m.write is original]
    for module in modules:
        module.write = record
    writer_class.as_default = lambda writer, step=None: _EnteredInStep(writer, step, entered)
    try:
        yield recorded
    finally:
        for module in modules:
            module.write = original
        writer_class.as_default = original_as_default


def write(recorded, values):
    """Write ``recorded`` summaries with ``values`` (value, step per summary) now."""
    ops = []
    for summary, (value, step) in zip(recorded, values):
        context = summary.writer.as_default() if summary.writer is not None else \
            contextlib.nullcontext()
        with context:  # a writer the step entered: made default, and flushed on exit
            ops.append(tf.summary.write(summary.tag, value,
                                        step=None if summary.step is None else step,
                                        metadata=summary.metadata))
    return ops
